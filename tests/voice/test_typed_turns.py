"""Typed turns waiting behind a turn that settles: bounded by `VoiceConfig.max_queued_texts`
(the excess refused, the loop going on), dropped by `interrupt`, and forgotten when the loop
ends. (Typed text interrupts a running turn, as speech would; it then waits for that turn to
settle, here a "finish" tool that goes on after the barge-in: test_interruptions.py covers
the interruption itself.)"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc.agent.events import ToolCallStarted, TurnCompleted
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import SystemMessage, ToolMessage, UserMessage
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse, check_chat_messages
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import VoiceConfig, VoiceLoop
from llmrtc.voice.loop import TurnQueueFull

pytestmark = pytest.mark.anyio


def busy_loop(answers: list[Any], **config: Any) -> tuple[VoiceLoop, ScriptedLLM, anyio.Event]:
    """A loop whose first turn calls `wait`, a "finish" tool that runs (a barge-in does not
    stop it) until the returned event is set."""
    release = anyio.Event()

    @tool(on_interrupt="finish")
    async def wait() -> str:
        """Wait."""
        await release.wait()
        return "waited"

    llm = ScriptedLLM(
        [ScriptedResponse(text="Checking.", tool_calls=[ToolCall("c1", "wait", {})]), *answers]
    )
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([wait])), system_prompt="Be brief.")
    tts = FakeTTS()
    loop = VoiceLoop(
        runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), config=VoiceConfig(**config)
    )
    return loop, llm, release


async def until(events: Any, predicate: Any, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        async for event in events:
            if predicate(event):
                return
    raise AssertionError("the events ended")


def user_lines(loop: VoiceLoop) -> list[str]:
    return [m.content for m in loop.history.messages if isinstance(m, UserMessage)]


async def test_typed_turns_beyond_the_limit_are_refused_and_the_loop_goes_on() -> None:
    loop, llm, release = busy_loop(["One.", "Two.", "Three."], max_queued_texts=2)
    async with loop:
        events = loop.events()
        await loop.send_text("Start.")
        await until(events, lambda e: isinstance(e, ToolCallStarted))
        await loop.send_text("First.")  # interrupts "Start.", whose tool goes on
        await loop.send_text("Second.")
        with pytest.raises(TurnQueueFull, match="2 typed turns already wait") as refused:
            await loop.send_text("Third.")
        assert refused.value.limit == 2
        for _ in range(1000):  # a flood is refused as cheaply, and takes nothing
            with pytest.raises(TurnQueueFull):
                await loop.send_text("Flood.")
        await loop.interrupt()  # the typed ones waiting are dropped
        release.set()  # the tool finishes: the interrupted turn settles
        await until(events, lambda e: isinstance(e, TurnCompleted))
        await loop.send_text("Again.")  # room again, and it is answered
        await until(events, lambda e: isinstance(e, TurnCompleted))
    assert user_lines(loop) == ["Start.", "Again."]
    assert len(llm.requests) == 2


async def test_interrupt_drops_a_typed_turn_already_taken_from_the_queue() -> None:
    # "First." is taken at once and waits for the running turn to settle; an interrupt must
    # drop it too (the user is starting over), not run it after the aborted turn.
    loop, llm, release = busy_loop(["Fresh answer."])
    async with loop:
        events = loop.events()
        await loop.send_text("Start.")
        await until(events, lambda e: isinstance(e, ToolCallStarted))
        await loop.send_text("First.")  # interrupts "Start.", whose tool goes on
        await anyio.sleep(0.05)  # let the worker take it
        await loop.interrupt()
        release.set()
        await until(events, lambda e: isinstance(e, TurnCompleted))
        await loop.send_text("Fresh start.")
        await until(events, lambda e: isinstance(e, TurnCompleted))
    assert user_lines(loop) == ["Start.", "Fresh start."]
    assert len(llm.requests) == 2
    assert llm.requests[-1].messages[-1] == UserMessage("Fresh start.")


async def test_waiting_typed_turns_are_forgotten_when_the_loop_ends() -> None:
    loop, llm, release = busy_loop([], max_queued_texts=3)
    async with loop:
        events = loop.events()
        await loop.send_text("Start.")
        await until(events, lambda e: isinstance(e, ToolCallStarted))
        for text in ("a", "b", "c"):
            await loop.send_text(text)
        release.set()  # the interrupted turn settles as the loop closes
    assert loop._turns.typed_waiting == 0  # nothing kept after the end
    assert user_lines(loop) == ["Start."]  # and none of them ran
    assert len(llm.requests) == 1


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_max_queued_texts_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_queued_texts must be an int >= 1"):
        VoiceConfig(max_queued_texts=bad)


async def test_abort_stops_a_finish_tool_too_and_the_history_stays_valid() -> None:
    # What a server does when its shutdown grace is over: nothing may keep the loop open.
    @tool(on_interrupt="finish")
    async def pay() -> str:
        """Pay (finishes even on a barge-in)."""
        await anyio.sleep(60)
        return "paid"

    llm = ScriptedLLM([ScriptedResponse(text="Paying.", tool_calls=[ToolCall("p1", "pay", {})])])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([pay])), system_prompt="Be brief.")
    tts = FakeTTS()
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    with anyio.fail_after(10):  # not the 30 s a closing loop gives a finish tool
        async with loop:
            events = loop.events()
            await loop.send_text("Pay it.")
            await until(events, lambda e: isinstance(e, ToolCallStarted))
            await loop.abort()
            await loop.send_text("More.")  # taken no more: nothing runs after an abort
            await anyio.sleep(0.1)
    check_chat_messages([SystemMessage("Be brief."), *loop.history.messages])
    results = [m for m in loop.history.messages if isinstance(m, ToolMessage)]
    assert [m.call_id for m in results] == ["p1"] and "paid" not in results[0].content
    assert user_lines(loop) == ["Pay it."]
    assert len(llm.requests) == 1
