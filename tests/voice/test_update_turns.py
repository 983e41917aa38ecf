"""Update turns in `VoiceLoop`: a background call's final result (a late result) is told by the
agent as soon as the line is quiet, never over the user or over another reply, and never lost.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, RecordingHooks, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.context import ToolContext
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import VoiceConfig, VoiceLoop
from llmrtc.voice.audio import split_frames
from llmrtc.voice.events import AgentSpeechEnded, AgentSpeechStarted, BargeIn

pytestmark = pytest.mark.anyio

RATE = 24000


def silence(seconds: float) -> bytes:
    return bytes(2 * round(RATE * seconds))


async def push(loop: VoiceLoop, pcm: bytes) -> None:
    for frame in split_frames(pcm, RATE):
        await loop.push_audio(frame)


async def wait_for(predicate: Any, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def quiet(loop: VoiceLoop) -> None:
    """Until no turn runs or plays."""
    await wait_for(lambda: loop._turns.reply is None)


class Booking:
    """A background booking tool the test finishes by hand (`release`)."""

    def __init__(self) -> None:
        self.released: dict[str, anyio.Event] = {}
        self.aborted: list[str] = []
        self.finished: list[str] = []

    def release(self, restaurant: str) -> None:
        self.released.setdefault(restaurant, anyio.Event()).set()

    def registry(self) -> ToolRegistry:
        booking = self

        @tool(background=True, timeout=60.0)
        async def book_table(restaurant: str, ctx: ToolContext) -> dict[str, Any]:
            """Book a table."""
            event = booking.released.setdefault(restaurant, anyio.Event())
            try:
                await event.wait()
            except BaseException:
                booking.aborted.append(restaurant)
                raise
            booking.finished.append(restaurant)
            return {"confirmed": True, "restaurant": restaurant}

        return ToolRegistry([book_table])


def runner_for(llm: ScriptedLLM, booking: Booking, hooks: RecordingHooks | None = None) -> Any:
    executor = ToolExecutor(booking.registry(), hooks=hooks)
    return TurnRunner(llm, executor, system_prompt="Be brief.", hooks=hooks)


def book(call_id: str, restaurant: str) -> list[ToolCall]:
    return [ToolCall(call_id, "book_table", {"restaurant": restaurant})]


def notes(messages: Any) -> list[str]:
    return [
        m.content for m in messages if isinstance(m, SystemMessage) and "background" in m.content
    ]


async def test_a_late_result_is_told_in_an_update_turn_once_the_line_is_quiet() -> None:
    booking = Booking()
    llm = ScriptedLLM([book("c1", "Nopa"), "I am booking Nopa now.", "Nopa is booked."])
    tts = FakeTTS()
    loop = VoiceLoop(runner_for(llm, booking), stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    async with loop:
        await loop.send_text("Book Nopa")
        await wait_for(lambda: tts.spoken == ["I am booking Nopa now."])
        await anyio.sleep(0.3)
        assert len(llm.requests) == 2  # nothing more until the call lands
        booking.release("Nopa")
        await wait_for(lambda: tts.spoken[-1:] == ["Nopa is booked."])
        await quiet(loop)
    update = llm.requests[2]
    assert update.messages[-1] == SystemMessage(update.messages[-1].content)
    assert "c1" in update.messages[-1].content and '"confirmed":true' in update.messages[-1].content
    history = loop.history.messages
    assert isinstance(history[2], ToolMessage) and "running" in history[2].content
    assert history[-1] == AssistantMessage("Nopa is booked.")
    assert len(notes(history)) == 1
    llm.assert_consumed()


async def test_a_result_landing_while_the_user_speaks_goes_with_the_users_turn() -> None:
    booking = Booking()
    llm = ScriptedLLM([book("c1", "Nopa"), "Booking it.", "Nopa is booked, and it is noon."])
    tts = FakeTTS()
    # Without an early answer: one started at the user's pause would be discarded (the late
    # result changed the history before the turn's request), making the request count vary.
    config = VoiceConfig(preemptive_generation=False)
    loop = VoiceLoop(
        runner_for(llm, booking), stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), config=config
    )
    async with loop:
        await loop.send_text("Book Nopa")
        await wait_for(lambda: tts.spoken == ["Booking it."])
        await quiet(loop)
        # The user starts speaking; the booking lands mid-sentence.
        await push(loop, tts.render("What time"))
        booking.release("Nopa")
        await anyio.sleep(0.3)
        assert len(llm.requests) == 2  # never an update turn over the user
        await push(loop, tts.render("is it") + silence(0.8))
        await wait_for(lambda: tts.spoken[-1:] == ["Nopa is booked, and it is noon."])
        await anyio.sleep(0.5)
    assert len(llm.requests) == 3  # the user's turn carried it: no update turn after
    request = llm.requests[2].messages
    # The late result landed while the user spoke: it comes after their words, and the
    # request that answers them sees both.
    assert request[-2] == UserMessage("What time is it")
    assert "c1" in request[-1].content
    llm.assert_consumed()


async def test_a_barge_in_does_not_stop_a_background_call_and_its_result_is_told() -> None:
    booking = Booking()
    hooks = RecordingHooks()
    long_answer = "I am booking it now. " + "This may take a little while. " * 6
    llm = ScriptedLLM(
        [
            book("c1", "Nopa"),
            ScriptedResponse(text=long_answer, chunk_delay=0.01),
            "Sure, it is noon.",
            "Nopa is booked.",
        ]
    )
    tts = FakeTTS()
    loop = VoiceLoop(runner_for(llm, booking, hooks), stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    seen: list[Any] = []
    async with loop:
        events = loop.events()

        async def collect() -> None:
            async for event in events:
                seen.append(event)

        async with anyio.create_task_group() as group:
            group.start_soon(collect)
            await loop.send_text("Book Nopa")
            await wait_for(lambda: any(isinstance(e, AgentSpeechStarted) for e in seen))
            await push(loop, tts.render("What time is it") + silence(0.8))
            await wait_for(lambda: any(isinstance(e, BargeIn) for e in seen))
            await wait_for(lambda: "Sure, it is noon." in tts.spoken)
            assert booking.aborted == []  # the barge-in did not reach the call
            booking.release("Nopa")
            await wait_for(lambda: tts.spoken[-1:] == ["Nopa is booked."])
            group.cancel_scope.cancel()
    assert booking.finished == ["Nopa"]
    ends = [e for e in hooks.of(ToolEndEvent) if e.call_id == "c1"]
    assert [e.status for e in ends] == ["ok"]  # exactly one final result
    assert len(notes(loop.history.messages)) == 1
    llm.assert_consumed()


async def test_a_second_result_waits_for_the_update_turn_being_spoken() -> None:
    booking = Booking()
    llm = ScriptedLLM(
        [
            [*book("c1", "Nopa"), *book("c2", "Zuni")],
            "Booking both.",
            ScriptedResponse(text="Nopa is booked. " * 4, chunk_delay=0.01),
            "Zuni is booked too.",
        ]
    )
    tts = FakeTTS()
    loop = VoiceLoop(runner_for(llm, booking), stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    seen: list[Any] = []
    async with loop:
        events = loop.events()

        async def collect() -> None:
            async for event in events:
                seen.append(event)

        async with anyio.create_task_group() as group:
            group.start_soon(collect)
            await loop.send_text("Book Nopa and Zuni")
            await wait_for(lambda: tts.spoken == ["Booking both."])
            await quiet(loop)
            booking.release("Nopa")
            await wait_for(lambda: len(llm.requests) == 3)
            await wait_for(lambda: sum(isinstance(e, AgentSpeechStarted) for e in seen) == 2)
            booking.release("Zuni")  # lands while the first update is spoken
            await wait_for(lambda: tts.spoken[-1:] == ["Zuni is booked too."])
            await quiet(loop)
            await anyio.sleep(0.1)
            group.cancel_scope.cancel()
    speech = [
        type(e).__name__ for e in seen if isinstance(e, AgentSpeechStarted | AgentSpeechEnded)
    ]
    assert speech == ["AgentSpeechStarted", "AgentSpeechEnded"] * 3  # never over each other
    assert "c1" in notes(llm.requests[2].messages)[-1]
    assert "c2" in notes(llm.requests[3].messages)[-1]
    assert not any("c2" in n for n in notes(llm.requests[2].messages))
    llm.assert_consumed()


async def test_an_update_turn_is_cut_by_a_barge_in_like_any_turn() -> None:
    booking = Booking()
    long_update = "Nopa is booked. " + "Your table is by the window, for two. " * 8
    llm = ScriptedLLM(
        [
            book("c1", "Nopa"),
            "Booking it.",
            ScriptedResponse(text=long_update, chunk_delay=0.01),
            "It is noon.",
        ]
    )
    tts = FakeTTS()
    loop = VoiceLoop(runner_for(llm, booking), stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    seen: list[Any] = []
    async with loop:
        events = loop.events()

        async def collect() -> None:
            async for event in events:
                seen.append(event)

        async with anyio.create_task_group() as group:
            group.start_soon(collect)
            await loop.send_text("Book Nopa")
            await wait_for(lambda: tts.spoken == ["Booking it."])
            await quiet(loop)
            booking.release("Nopa")
            await wait_for(lambda: sum(isinstance(e, AgentSpeechStarted) for e in seen) == 2)
            await anyio.sleep(1.5)  # a few words of it are heard
            await push(loop, tts.render("What time is it") + silence(0.8))
            await wait_for(lambda: tts.spoken[-1:] == ["It is noon."])
            await quiet(loop)
            group.cancel_scope.cancel()
    ended = [e for e in seen if isinstance(e, AgentSpeechEnded)]
    assert ended[1].interrupted  # the update turn was cut
    history = loop.history.messages
    cut = [m for m in history if isinstance(m, AssistantMessage) and m.content.startswith("Nopa")]
    assert cut and len(cut[0].content) < len(long_update.strip())  # only what was heard stays
    assert history[-1] == AssistantMessage("It is noon.")
    llm.assert_consumed()


async def test_a_loop_without_background_calls_runs_no_update_turn() -> None:
    llm = ScriptedLLM(["Hello."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    tts = FakeTTS()
    config = VoiceConfig()
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), config=config)
    async with loop:
        await loop.send_text("Hi")
        await wait_for(lambda: tts.spoken == ["Hello."])
        await anyio.sleep(0.3)
    assert len(llm.requests) == 1


async def test_an_application_reading_late_results_too_does_not_silence_the_agent() -> None:
    # late_results() yields each result once: a UI reading it takes results from the loop's
    # own reader; the loop still finds them waiting and tells them.
    booking = Booking()
    llm = ScriptedLLM([book("c1", "Nopa"), "Booking it.", "Nopa is booked."])
    tts = FakeTTS()
    runner = runner_for(llm, booking)
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    shown: list[str] = []
    async with loop, anyio.create_task_group() as group:

        async def ui() -> None:
            async for result in runner.late_results():
                shown.append(result.call_id)

        group.start_soon(ui)
        await loop.send_text("Book Nopa")
        await wait_for(lambda: tts.spoken == ["Booking it."])
        booking.release("Nopa")
        await wait_for(lambda: tts.spoken[-1:] == ["Nopa is booked."])
        await quiet(loop)
        group.cancel_scope.cancel()
    assert len(llm.requests) == 3
    llm.assert_consumed()
