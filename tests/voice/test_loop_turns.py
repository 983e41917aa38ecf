"""VoiceLoop with tools, playbooks and failures: the per-tool interrupt policy across a
barge-in, the filler, proactive turns, and STT/TTS failures (apology, error event, next turn)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc.agent.events import ToolCallFinished, ToolCallStarted, TurnCompleted
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from llmrtc.playbook import Playbook, PlaybookOrchestrator
from llmrtc.telemetry.events import ErrorEvent, TTSStartEvent
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, RecordingHooks, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse, check_chat_messages
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import VoiceConfig, VoiceLoop
from llmrtc.voice.audio import split_frames
from llmrtc.voice.events import (
    AgentSpeechEnded,
    AgentSpeechStarted,
    BargeIn,
    SpeechError,
    Transcript,
)
from llmrtc.voice.stt import STTError

pytestmark = pytest.mark.anyio


async def say(loop: VoiceLoop, tts: FakeTTS, text: str) -> None:
    for frame in split_frames(tts.render(text) + bytes(2 * 24000 * 7 // 10), 24000):
        await loop.push_audio(frame)


async def until(events: Any, predicate: Any, seen: list[Any], timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        async for event in events:
            seen.append(event)
            if predicate(event):
                return
    raise AssertionError(f"events ended: {seen}")


async def test_barge_in_cancels_a_cancel_tool_and_lets_a_finish_tool_finish() -> None:
    runs: list[str] = []

    @tool(on_interrupt="finish")
    async def refund(amount: int) -> str:
        """Refund an amount."""
        runs.append("refund")
        await anyio.sleep(1.0)
        return f"refunded {amount}"

    @tool
    async def lookup(order: str) -> str:
        """Look an order up."""
        runs.append("lookup")
        await anyio.sleep(30)
        return "found"

    calls = [ToolCall("c1", "lookup", {"order": "A1"}), ToolCall("c2", "refund", {"amount": 5})]
    llm = ScriptedLLM(
        [ScriptedResponse(text="Let me do both.", tool_calls=calls), "Sure, what else?"]
    )
    runner = TurnRunner(
        llm, ToolExecutor(ToolRegistry([refund, lookup])), system_prompt="Be brief."
    )
    tts = FakeTTS()
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await loop.send_text("Refund order A1.")
        await until(events, lambda e: isinstance(e, ToolCallStarted), seen)
        with anyio.fail_after(5):
            while len(runs) < 2:  # both handlers started (a queued call is only ever aborted)
                await anyio.sleep(0.01)
        await say(loop, tts, "Never mind")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded) and not e.interrupted, seen)
    barge = next(i for i, e in enumerate(seen) if isinstance(e, BargeIn))
    finished = {
        e.result.call_id: (i, e.result)
        for i, e in enumerate(seen)
        if isinstance(e, ToolCallFinished)
    }
    assert finished["c1"][1].status == "aborted"
    assert finished["c2"][1].status == "ok" and finished["c2"][1].result == "refunded 5"
    assert finished["c2"][0] > barge  # the barge-in did not wait for the finish tool
    assert runs == ["lookup", "refund"]  # each ran once: no duplicate refund
    assert [e.stop_reason for e in seen if isinstance(e, TurnCompleted)] == ["aborted", "stop"]
    # the next request was sent after the refund finished, with both results in a valid history
    second = llm.requests[1].messages
    check_chat_messages(second)
    assert ToolMessage("c2", '"refunded 5"') in second
    assert any(isinstance(m, ToolMessage) and m.call_id == "c1" for m in second)
    assert second[-1] == UserMessage("Never mind")
    # the lead-in, a whole sentence, was spoken before the calls; the history keeps the calls
    # and what was heard of it (the barge-in may come before its end)
    assert tts.spoken == ["Let me do both.", "Sure, what else?"]
    lead = next(m for m in second if isinstance(m, AssistantMessage) and m.tool_calls)
    assert "Let me do both.".startswith(lead.content)
    assert [c.call_id for c in lead.tool_calls] == ["c1", "c2"]


async def test_a_slow_batch_gets_the_filler_once_and_it_is_not_in_the_answer() -> None:
    @tool
    async def slow(n: int) -> str:
        """Take a while."""
        await anyio.sleep(0.6)
        return "done"

    llm = ScriptedLLM(
        [
            [ToolCall("c1", "slow", {"n": 1})],
            [ToolCall("c2", "slow", {"n": 2})],
            "All done.",
        ]
    )
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([slow])), system_prompt="Be brief.")
    tts = FakeTTS()
    config = VoiceConfig(filler_after=0.2, filler_text="One moment.")
    loop = VoiceLoop(runner, stt=FakeSTT(), tts=tts, vad=FakeVAD(), config=config)
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await loop.send_text("Do it twice.")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
    assert tts.spoken == ["One moment.", "All done."]  # once per turn, though two batches ran
    started = next(e for e in seen if isinstance(e, AgentSpeechStarted))
    assert started.text == "One moment."
    assert seen[-1] == AgentSpeechEnded(False, "All done.")
    assert loop.history.messages[-1] == AssistantMessage("All done.")


async def test_no_filler_when_it_is_empty() -> None:
    @tool
    async def slow(n: int) -> str:
        """Take a while."""
        await anyio.sleep(0.4)
        return "done"

    llm = ScriptedLLM([[ToolCall("c1", "slow", {"n": 1})], "Done."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([slow])), system_prompt="Be brief.")
    tts = FakeTTS()
    config = VoiceConfig(filler_after=0.1, filler_text="")
    loop = VoiceLoop(runner, stt=FakeSTT(), tts=tts, vad=FakeVAD(), config=config)
    async with loop:
        events = loop.events()
        await loop.send_text("Go.")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), [])
    assert tts.spoken == ["Done."]


def timer_playbook(seconds: float) -> Playbook:
    return Playbook.model_validate(
        {
            "id": "p",
            "initial_stage": "a",
            "stages": [
                {"id": "a", "system_prompt": "Waiting."},
                {"id": "nudge", "system_prompt": "Ask if the user is still there."},
            ],
            "transitions": [
                {
                    "id": "silence",
                    "from_stage": "a",
                    "condition": {"type": "timeout", "seconds": seconds},
                    "action": {"target_stage": "nudge", "transition_message": "Silence."},
                }
            ],
        }
    )


async def test_a_stage_timeout_makes_the_agent_speak_up() -> None:
    llm = ScriptedLLM(["Hello, how can I help?", "Are you still there?"])
    orchestrator = PlaybookOrchestrator(timer_playbook(0.5), llm, ToolRegistry())
    tts = FakeTTS()
    loop = VoiceLoop(orchestrator, stt=FakeSTT(), tts=tts, vad=FakeVAD())
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await loop.send_text("hi")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
        ended = anyio.current_time()
        await until(events, lambda e: isinstance(e, AgentSpeechStarted), seen)
        spoke_up = anyio.current_time()
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
    assert tts.spoken == ["Hello, how can I help?", "Are you still there?"]
    assert [type(e).__name__ for e in seen].count("StageChanged") == 1
    # the 0.5 s of silence counted from when the agent stopped speaking (its 1.1 s reply
    # outlasted the handler's timer), not from the end of the model's text
    assert spoke_up - ended >= 0.4
    assert llm.requests[1].messages[-1] == SystemMessage("Silence.")
    assert orchestrator.next_deadline() is None  # no second timeout turn


async def test_an_stt_failure_apologises_and_the_next_turn_works() -> None:
    tts = FakeTTS()
    stt = FakeSTT([STTError("engine crashed"), "What time is it?"])
    hooks = RecordingHooks()
    llm = ScriptedLLM(["It is noon."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    config = VoiceConfig(apology_text="Sorry, say again?")
    loop = VoiceLoop(runner, stt=stt, tts=tts, vad=FakeVAD(), config=config, hooks=hooks)
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await say(loop, tts, "mumble")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
        await say(loop, tts, "What time")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
    errors = [e for e in seen if isinstance(e, SpeechError)]
    assert [(e.source, e.error_type) for e in errors] == [("stt", "STTError")]
    assert "Sorry, say again?" in tts.spoken and tts.spoken[-1] == "It is noon."
    assert [e.where for e in hooks.of(ErrorEvent)] == ["stt"]
    assert Transcript("What time is it?") in seen
    assert loop.history.messages == (
        UserMessage("What time is it?"),
        AssistantMessage("It is noon."),
    )


async def test_a_tts_failure_apologises_keeps_a_valid_history_and_the_next_turn_works() -> None:
    tts = FakeTTS()
    llm = ScriptedLLM(["First sentence here. Second one.", "Fine again."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    config = VoiceConfig(error_text="Sorry, something went wrong.", apology_text="Pardon?")
    loop = VoiceLoop(runner, stt=FakeSTT(), tts=tts, vad=FakeVAD(), config=config)
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        tts.fail_next()
        await loop.send_text("Talk.")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
        await loop.send_text("Again.")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
    errors = [e for e in seen if isinstance(e, SpeechError)]
    assert [(e.source, e.error_type) for e in errors] == [("tts", "TTSError")]
    first_end = next(e for e in seen if isinstance(e, AgentSpeechEnded))
    assert first_end == AgentSpeechEnded(True, "")  # the apology played, nothing of the answer
    assert tts.spoken == ["First sentence here.", "Sorry, something went wrong.", "Fine again."]
    check_chat_messages(llm.requests[1].messages)
    # nothing of the first answer was heard: it stays as an empty, interrupted answer
    assert loop.history.messages == (
        UserMessage("Talk."),
        AssistantMessage("", (), True),
        UserMessage("Again."),
        AssistantMessage("Fine again."),
    )


async def test_leaving_the_loop_ends_the_turn_cleanly() -> None:
    started = anyio.Event()

    @tool
    async def lookup(order: str) -> str:
        """Look an order up."""
        started.set()
        await anyio.sleep(30)
        return "found"

    llm = ScriptedLLM([[ToolCall("c1", "lookup", {"order": "A1"})]])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([lookup])), system_prompt="Be brief.")
    loop = VoiceLoop(runner, stt=FakeSTT(), tts=FakeTTS(), vad=FakeVAD())
    with anyio.fail_after(10):
        async with loop:
            events = loop.events()
            await loop.send_text("Where is A1?")
            await started.wait()
        seen = [e async for e in events]  # ends with the loop
    assert isinstance(seen[-1], TurnCompleted) and seen[-1].stop_reason == "aborted"
    assert seen[-1].tool_results[0].status == "aborted"
    messages = loop.history.messages
    check_chat_messages([SystemMessage("x"), *messages])
    assert isinstance(messages[-1], ToolMessage) and messages[-1].call_id == "c1"


async def test_markdown_and_json_are_never_spoken() -> None:
    reply = 'It is **sunny** today.\n```json\n{"temp": 21}\n```\nEnjoy!'
    llm = ScriptedLLM([reply])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    tts = FakeTTS()
    loop = VoiceLoop(runner, stt=FakeSTT(), tts=tts, vad=FakeVAD())
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await loop.send_text("Weather?")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
    spoken = " ".join(tts.spoken)
    assert "sunny" in spoken and "Enjoy!" in spoken
    assert not any(mark in spoken for mark in ("*", "`", "{", "temp"))
    assert loop.history.messages[-1] == AssistantMessage(reply)  # the history keeps the text


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_spoken_turn_with_a_barge_in_on_trio(anyio_backend: str) -> None:
    tts = FakeTTS()
    llm = ScriptedLLM(["One two three four five six seven eight nine ten.", "Okay."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await say(loop, tts, "Count")
        await until(events, lambda e: isinstance(e, AgentSpeechStarted), seen)
        await anyio.sleep(0.4)
        await say(loop, tts, "Stop")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded) and not e.interrupted, seen)
    barge = next(e for e in seen if isinstance(e, BargeIn))
    assert barge.heard_text and "One two three".startswith(barge.heard_text[:13])
    assert loop.history.messages[1] == AssistantMessage(barge.heard_text, (), True)
    assert loop.history.messages[2] == UserMessage("Stop")


async def test_a_barge_in_after_a_tool_round_keeps_only_heard_words_in_each_message() -> None:
    @tool
    async def track(order: str) -> str:
        """Track an order."""
        return "shipped"

    answer = "The order shipped on Monday and will arrive on Friday afternoon."
    llm = ScriptedLLM(
        [
            ScriptedResponse(
                text="Let me look.", tool_calls=[ToolCall("c1", "track", {"order": "A"})]
            ),
            answer,
            "Okay.",
        ]
    )
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([track])), system_prompt="Be brief.")
    tts = FakeTTS()
    hooks = RecordingHooks()
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), hooks=hooks)
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await loop.send_text("Where is A?")
        await until(events, lambda e: isinstance(e, AgentSpeechStarted), seen)
        # Barge in once the answer (after the tool round) is under way, not after a fixed time
        # from the lead-in: a loaded machine may take longer than the lead-in to get there.
        with anyio.fail_after(20):
            while not any("shipped" in e.text for e in hooks.of(TTSStartEvent)):
                await anyio.sleep(0.02)
        await anyio.sleep(0.8)  # the lead-in lasts 0.6 s, the answer 3.3 s
        await say(loop, tts, "Thanks")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded) and not e.interrupted, seen)
    heard = next(e for e in seen if isinstance(e, BargeIn)).heard_text
    assert heard.startswith("Let me look. ")  # the lead-in sentence was spoken in full
    heard = heard.removeprefix("Let me look. ")
    assert heard and answer.startswith(heard) and heard != answer
    messages = llm.requests[2].messages
    check_chat_messages(messages)
    assert messages[1:] == [
        UserMessage("Where is A?"),
        AssistantMessage("Let me look.", (ToolCall("c1", "track", {"order": "A"}),)),
        ToolMessage("c1", '"shipped"'),
        AssistantMessage(heard, (), True),
        UserMessage("Thanks"),
    ]
