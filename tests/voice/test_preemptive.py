"""Preemptive generation in `VoiceLoop` (`VoiceConfig.preemptive_generation`): the answer starts
at the user's pause; speech after it discards that answer (no tool ran, nothing played); a turn
that ends at the pause takes it, with one STT pass and one model request."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc.abort import AbortSignal
from llmrtc.agent.handler import PreemptingHandler
from llmrtc.agent.preemption import Preemption
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, UserMessage
from llmrtc.telemetry.events import STTEndEvent
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, RecordingHooks, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import VoiceConfig, VoiceLoop
from llmrtc.voice.audio import split_frames
from llmrtc.voice.events import AgentSpeechEnded, AgentSpeechStarted, Transcript

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


async def until(events: Any, predicate: Any, seen: list[Any], timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        async for event in events:
            seen.append(event)
            if predicate(event):
                return
    raise AssertionError(f"events ended: {seen}")


def weather_runner(llm: ScriptedLLM, runs: list[str]) -> TurnRunner:
    @tool
    async def lookup_weather(city: str) -> str:
        """The weather in a city."""
        runs.append(city)
        return "sunny, 21 C"

    return TurnRunner(llm, ToolExecutor(ToolRegistry([lookup_weather])), system_prompt="Be brief.")


async def test_speech_after_the_pause_discards_the_early_answer_unplayed_and_unrun() -> None:
    runs: list[str] = []
    early_call = ToolCall("c0", "lookup_weather", {"city": "Nowhere"})
    llm = ScriptedLLM(
        [
            # The early answer, on "What is the weather": a call and words, never run or said.
            ScriptedResponse(text="Let me look.", tool_calls=[early_call]),
            [ToolCall("c1", "lookup_weather", {"city": "Oslo"})],
            "It is sunny in Oslo.",
        ]
    )
    runner = weather_runner(llm, runs)
    tts = FakeTTS()
    stt = FakeSTT(tts=tts)
    loop = VoiceLoop(runner, stt=stt, tts=tts, vad=FakeVAD(), config=VoiceConfig())
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        # A pause of 0.3 s: long enough to start answering, too short to end the turn.
        await push(loop, tts.render("What is the weather") + silence(0.3))
        await wait_for(lambda: len(llm.requests) == 1)
        assert llm.requests[0].messages[-1] == UserMessage("What is the weather")
        await push(loop, tts.render("in Oslo") + silence(0.7))
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
    assert runs == ["Oslo"]  # the early answer's call never ran
    assert tts.spoken == ["It is sunny in Oslo."]
    assert [e.text for e in seen if isinstance(e, AgentSpeechStarted)] == ["It is sunny in Oslo."]
    assert llm.requests[1].messages[-1] == UserMessage("What is the weather in Oslo")
    assert [t.text for t in seen if isinstance(t, Transcript)] == ["What is the weather in Oslo"]
    history = loop.history.messages
    assert history[0] == UserMessage("What is the weather in Oslo")
    assert history[-1] == AssistantMessage("It is sunny in Oslo.")
    assert not any("Let me look" in str(m) for m in history)
    llm.assert_consumed()


async def test_a_turn_that_ends_at_the_pause_takes_the_answer_under_way() -> None:
    llm = ScriptedLLM(["It is noon."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    tts = FakeTTS()
    stt = FakeSTT(tts=tts)
    hooks = RecordingHooks()
    loop = VoiceLoop(runner, stt=stt, tts=tts, vad=FakeVAD(), hooks=hooks)
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await push(loop, tts.render("What time is it") + silence(0.3))
        # Asked before the end of the turn was decided (0.5 s of silence).
        await wait_for(lambda: len(llm.requests) == 1)
        assert not hooks.of(STTEndEvent)
        await push(loop, silence(0.4))
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
    assert tts.spoken == ["It is noon."]
    assert len(llm.requests) == 1  # the early request was the turn's
    assert len(stt.utterances) == 1  # one STT pass: the pause's
    assert [e.text for e in hooks.of(STTEndEvent)] == ["What time is it"]
    assert loop.history.messages == (
        UserMessage("What time is it"),
        AssistantMessage("It is noon."),
    )


async def test_off_the_model_waits_for_the_end_of_the_turn() -> None:
    llm = ScriptedLLM(["It is noon."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    tts = FakeTTS()
    config = VoiceConfig(preemptive_generation=False)
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), config=config)
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await push(loop, tts.render("What time is it") + silence(0.3))
        await anyio.sleep(0.3)
        assert llm.requests == []
        await push(loop, silence(0.4))
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
    assert tts.spoken == ["It is noon."]


async def test_typed_text_first_discards_the_early_answer() -> None:
    llm = ScriptedLLM(
        [
            ScriptedResponse(text="Early words never said.", delay=30),
            "Hello typed.",
            "Hello spoken.",
        ]
    )
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    tts = FakeTTS()
    hooks = RecordingHooks()
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), hooks=hooks)
    async with loop:
        await push(loop, tts.render("Good morning") + silence(0.3))
        await wait_for(lambda: len(llm.requests) == 1)
        # Typed mid-pause: it comes first (the history changes), so the early answer goes.
        await loop.send_text("Hi")
        await push(loop, silence(0.4))
        await wait_for(lambda: tts.spoken[-1:] == ["Hello spoken."])
    assert "Early words never said." not in tts.spoken
    assert [r.messages[-1] for r in llm.requests[1:]] == [
        UserMessage("Hi"),
        UserMessage("Good morning"),
    ]
    # The early pass was dropped with its answer: the utterance is transcribed when it ends.
    assert [e.text for e in hooks.of(STTEndEvent)] == ["Good morning"]


def test_the_option_is_a_bool() -> None:
    with pytest.raises(ValueError, match="preemptive_generation must be True or False"):
        VoiceConfig(preemptive_generation="yes")  # type: ignore[arg-type]


async def test_a_handler_of_the_protocol_without_turn_ids_takes_the_early_answer() -> None:
    # Review finding: the preempted turn always passed turn_id=, which the protocol lacks.
    llm = ScriptedLLM(["It is noon."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")

    class Minimal:
        """`PreemptingHandler` exactly: no turn_id anywhere."""

        history = runner.history

        def preempt(self, user_text: str) -> Preemption | None:
            return runner.preempt(user_text)

        def run_turn(
            self,
            user_text: str | None,
            *,
            abort_signal: AbortSignal | None = None,
            preemption: Preemption | None = None,
        ) -> Any:
            return runner.run_turn(user_text, abort_signal=abort_signal, preemption=preemption)

        def next_deadline(self) -> float | None:
            return None

        def run_timeout_turn(self, *, abort_signal: AbortSignal | None = None) -> Any:
            return runner.run_timeout_turn(abort_signal=abort_signal)

    handler = Minimal()
    assert isinstance(handler, PreemptingHandler)
    tts = FakeTTS()
    loop = VoiceLoop(handler, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    seen: list[Any] = []
    async with loop:
        events = loop.events()
        await push(loop, tts.render("What time is it") + silence(0.3))
        await wait_for(lambda: len(llm.requests) == 1)
        await push(loop, silence(0.4))
        await until(events, lambda e: isinstance(e, AgentSpeechEnded), seen)
    assert tts.spoken == ["It is noon."] and len(llm.requests) == 1
    assert runner.history.messages == (
        UserMessage("What time is it"),
        AssistantMessage("It is noon."),
    )


class SlowFirstSTT(FakeSTT):
    """The first transcription takes 0.5 s (Whisper on a loaded machine)."""

    async def transcribe(self, pcm: bytes, *, hints: Any = ()) -> str:
        slow = not self.utterances
        text = await super().transcribe(pcm, hints=hints)
        if slow:
            await anyio.sleep(0.5)
        return text


async def test_no_early_answer_while_the_utterance_before_is_still_being_answered() -> None:
    # Review finding: an utterance pausing while the one before was still being transcribed
    # started its answer on a history without that one, holding the model meanwhile.
    llm = ScriptedLLM(["Answer to A.", "Answer to B."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    tts = FakeTTS()
    loop = VoiceLoop(runner, stt=SlowFirstSTT(tts=tts), tts=tts, vad=FakeVAD())
    async with loop:
        await push(loop, tts.render("What time is it") + silence(0.6))  # A ends
        await anyio.sleep(0.05)  # A is being transcribed
        await push(loop, tts.render("in Oslo") + silence(0.3))  # B pauses
        await push(loop, silence(0.4))
        await wait_for(lambda: tts.spoken[-1:] == ["Answer to B."])
    assert [r.messages[-1] for r in llm.requests] == [
        UserMessage("What time is it"),
        UserMessage("in Oslo"),
    ]
    # B was asked on a history holding A's turn.
    assert UserMessage("What time is it") in llm.requests[1].messages


async def test_okay_to_an_idle_agent_is_answered_early() -> None:
    # Review finding: "okay" is a turn when the agent is idle, but was never answered early.
    llm = ScriptedLLM(["Great."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    tts = FakeTTS()
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    async with loop:
        await push(loop, tts.render("okay") + silence(0.3))
        await wait_for(lambda: len(llm.requests) == 1)
        await push(loop, silence(0.4))
        await wait_for(lambda: tts.spoken == ["Great."])
    assert len(llm.requests) == 1
