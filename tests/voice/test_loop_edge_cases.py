"""VoiceLoop at the edges of a spoken turn: lead-ins before tool calls, proactive timing,
engines without optional members, barge-in over an apology, turn errors, answers cut before
their first word, config limits, audio after a barge-in and a huge pushed frame."""

from __future__ import annotations

import itertools
import logging
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from llmrtc.agent.events import StageChanged
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, UserMessage
from llmrtc.playbook import Playbook, PlaybookOrchestrator
from llmrtc.telemetry.events import BargeInEvent, STTEndEvent, TTSStartEvent
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, RecordingHooks, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse, check_chat_messages
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import AudioFrame, VoiceConfig, VoiceLoop
from llmrtc.voice.audio import split_frames
from llmrtc.voice.events import (
    AgentSpeechEnded,
    AgentSpeechStarted,
    BargeIn,
    SpeechError,
    UserSpeechEnded,
)
from llmrtc.voice.stt import STTError

pytestmark = pytest.mark.anyio


def make(
    script: list[Any], *, tools: Any = (), tts: Any = None, stt: Any = None, **kw: Any
) -> tuple[VoiceLoop, ScriptedLLM, Any, TurnRunner]:
    tts = tts or FakeTTS()
    llm = ScriptedLLM(script)
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry(list(tools))), system_prompt="Be brief.")
    loop = VoiceLoop(runner, stt=stt or FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), **kw)
    return loop, llm, tts, runner


async def say(loop: VoiceLoop, tts: FakeTTS, text: str, silence: float = 0.7) -> None:
    for frame in split_frames(tts.render(text) + bytes(2 * round(24000 * silence)), 24000):
        await loop.push_audio(frame)


async def until(events: Any, predicate: Any, timeout: float = 15) -> list[Any]:
    seen: list[Any] = []
    with anyio.fail_after(timeout):
        async for event in events:
            seen.append(event)
            if predicate(event):
                return seen
    raise AssertionError(f"events ended: {seen}")


def timeout_playbook(seconds: float) -> Playbook:
    return Playbook.model_validate(
        {
            "id": "p",
            "initial_stage": "a",
            "stages": [
                {"id": "a", "system_prompt": "Waiting."},
                {"id": "nudge", "system_prompt": "Nudge."},
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


@tool
async def get_weather(city: str) -> str:
    """Weather."""
    return "sunny"


# 1: a lead-in before a tool call ------------------------------------------------------------


async def test_a_complete_lead_in_sentence_before_a_tool_call_is_spoken() -> None:
    lead = "Let me check the weather for you."
    call = ToolCall("c1", "get_weather", {"city": "Tokyo"})
    loop, _llm, tts, runner = make(
        [ScriptedResponse(text=lead, tool_calls=[call]), "It is sunny in Tokyo."],
        tools=[get_weather],
    )
    async with loop:
        events = loop.events()
        await loop.send_text("weather in Tokyo?")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    assert tts.spoken == [lead, "It is sunny in Tokyo."]
    assert runner.history.messages[1] == AssistantMessage(lead, (call,))


async def test_a_lead_in_with_no_sentence_end_is_spoken_and_kept() -> None:
    # With native tool calls the text before the call is final: "One moment while I check
    # the weather in Tokyo" is a whole lead-in, though it has no full stop.
    call = ToolCall("c1", "get_weather", {"city": "Tokyo"})
    lead = "Sure. One moment while I check the weather in Tokyo"
    loop, _llm, tts, runner = make(
        [ScriptedResponse(text=lead, tool_calls=[call]), "Sunny."], tools=[get_weather]
    )
    async with loop:
        events = loop.events()
        await loop.send_text("weather?")
        seen = await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    assert tts.spoken == ["Sure.", "One moment while I check the weather in Tokyo", "Sunny."]
    assert seen[-1] == AgentSpeechEnded(False, f"{lead} Sunny.")
    assert runner.history.messages[1] == AssistantMessage(lead, (call,))


async def test_text_inside_an_open_call_span_is_neither_spoken_nor_in_the_history() -> None:
    call = ToolCall("c1", "get_weather", {"city": "Tokyo"})
    loop, _llm, tts, runner = make(
        [ScriptedResponse(text="Sure. I will call get_weather(", tool_calls=[call]), "Sunny."],
        tools=[get_weather],
    )
    async with loop:
        events = loop.events()
        await loop.send_text("weather?")
        seen = await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    assert tts.spoken == ["Sure.", "Sunny."]
    assert seen[-1] == AgentSpeechEnded(False, "Sure. Sunny.")
    # the history is what was heard, though nothing interrupted the reply
    assert runner.history.messages[1] == AssistantMessage("Sure.", (call,))
    assert runner.history.messages[-1] == AssistantMessage("Sunny.")


# 2, 3: proactive turns count the silence from when the line went quiet ----------------------


async def test_stage_timeout_counts_from_the_end_of_speech_with_a_realtime_tts() -> None:
    tts = FakeTTS(delay=0.095)  # streams at about real time, as OpenAI TTS does
    llm = ScriptedLLM(
        [
            "Hello there. I can help you with orders. I can help with refunds. What do you need?",
            "Are you still there?",
        ]
    )
    loop = VoiceLoop(
        PlaybookOrchestrator(timeout_playbook(2.0), llm, ToolRegistry()),
        stt=FakeSTT(),
        tts=tts,
        vad=FakeVAD(),
    )
    async with loop:
        events = loop.events()
        await loop.send_text("hi")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded))
        ended = anyio.current_time()
        await until(events, lambda e: isinstance(e, StageChanged))
        silence = anyio.current_time() - ended
        await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    assert silence >= 1.8, f"timeout turn after {silence:.2f} s of silence, stage timeout 2.0 s"


@pytest.mark.parametrize("transcript", ["", "stt-error"])
async def test_user_speech_that_makes_no_turn_still_restarts_the_silence(transcript: str) -> None:
    tts = FakeTTS()
    entry: Any = STTError("cannot decode") if transcript == "stt-error" else ""
    llm = ScriptedLLM(["Hi.", "Are you still there?"])
    loop = VoiceLoop(
        PlaybookOrchestrator(timeout_playbook(1.5), llm, ToolRegistry()),
        stt=FakeSTT([entry], tts=tts),
        tts=tts,
        vad=FakeVAD(),
    )
    marks: dict[str, float] = {}
    async with loop:
        events = loop.events()
        await loop.send_text("hello")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded))

        async def user() -> None:  # ~1.3 s of speech in real time, 0.3 s after the reply
            await anyio.sleep(0.3)
            audio = tts.render("mumble mumble mumble mumble") + bytes(2 * 24000 * 4)
            for frame in split_frames(audio, 24000):
                await loop.push_audio(frame)
                await anyio.sleep(0.02)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as group:
                group.start_soon(user)
                async for event in events:
                    if isinstance(event, UserSpeechEnded):
                        marks["user"] = anyio.current_time()
                    if isinstance(event, AgentSpeechEnded):
                        marks["agent"] = anyio.current_time()  # the apology (STT failure)
                    if isinstance(event, StageChanged):
                        marks["nudge"] = anyio.current_time()
                        group.cancel_scope.cancel()
    quiet_since = max(marks["user"], marks.get("agent", 0.0))
    assert marks["nudge"] - quiet_since >= 1.0, marks  # 1.5 s (0.5 s endpointing passed)


# 4: engines with only the essential members --------------------------------------------------


class OnlyRateTTS:
    sample_rate = 16000

    async def synthesize(self, text: str) -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"\x10\x27" * 320


class OnlyRateSTT:
    sample_rate = 16000

    async def transcribe(self, pcm: bytes) -> str:
        return "hello"


async def test_engines_without_a_name_work_and_report_their_class_name() -> None:
    hooks = RecordingHooks()
    tts = FakeTTS()
    loop, *_ = make(["Hi there."], tts=OnlyRateTTS(), stt=OnlyRateSTT(), hooks=hooks)
    async with loop:
        events = loop.events()
        await say(loop, tts, "hello there")
        seen = await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    assert not any(isinstance(e, SpeechError) for e in seen), seen
    assert hooks.of(STTEndEvent)[0].model == "OnlyRateSTT"
    assert hooks.of(TTSStartEvent)[0].voice == "OnlyRateTTS"


def test_an_engine_missing_an_essential_member_is_refused_up_front() -> None:
    class NoRate:
        async def transcribe(self, pcm: bytes) -> str:
            return ""

    class BadWindow(FakeVAD):
        window_samples = 0

    runner = TurnRunner(ScriptedLLM([]), ToolExecutor(ToolRegistry()), system_prompt="x")
    with pytest.raises(TypeError, match="stt=NoRate lacks sample_rate"):
        VoiceLoop(runner, stt=NoRate(), tts=FakeTTS(), vad=FakeVAD())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tts=OnlyRateSTT lacks synthesize"):
        VoiceLoop(runner, stt=FakeSTT(), tts=OnlyRateSTT(), vad=FakeVAD())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="window_samples must be a positive int"):
        VoiceLoop(runner, stt=FakeSTT(), tts=FakeTTS(), vad=BadWindow())


# 8: a barge-in over the apology; which apology ----------------------------------------------


async def test_speech_over_the_tts_failure_apology_is_a_barge_in() -> None:
    hooks = RecordingHooks()
    loop, *_, tts, _ = make(["First sentence here. Second one.", "Sure."], hooks=hooks)
    tts.fail_next()
    async with loop:
        events = loop.events()
        await loop.send_text("go")
        seen = await until(events, lambda e: isinstance(e, AgentSpeechStarted))  # the apology
        await anyio.sleep(0.5)
        await say(loop, tts, "wait wait")
        seen += await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    assert any(isinstance(e, BargeIn) for e in seen), [type(e).__name__ for e in seen]
    assert hooks.of(BargeInEvent)
    assert tts.spoken[1] == VoiceConfig().error_text  # not "I didn't catch that"


# 9: a handler whose turn raises --------------------------------------------------------------


async def test_a_failing_handler_turn_gives_an_error_event_and_the_error_apology() -> None:
    class Broken:
        def __init__(self) -> None:
            self.history = ConversationHistory()

        async def run_turn(self, user_text: str | None, *, abort_signal: Any = None) -> Any:
            self.history.append(UserMessage(user_text))
            async with anyio.create_task_group():  # the error comes out as a group of one
                raise RuntimeError("model server 500")
            yield

        def next_deadline(self) -> None:
            return None

        async def run_timeout_turn(self, *, abort_signal: Any = None) -> Any:
            return
            yield

    tts = FakeTTS()
    config = VoiceConfig(error_text="Oops, try again.", apology_text="Pardon?")
    handler: Any = Broken()
    loop = VoiceLoop(handler, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), config=config)
    logging.disable(logging.CRITICAL)
    try:
        async with loop:
            events = loop.events()
            await loop.send_text("hi")
            seen = await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    finally:
        logging.disable(logging.NOTSET)
    errors = [e for e in seen if isinstance(e, SpeechError)]
    assert [(e.source, e.error_type, e.message) for e in errors] == [
        ("turn", "RuntimeError", "model server 500")
    ]
    assert tts.spoken == ["Oops, try again."]


# 10: an answer cut before its first word ----------------------------------------------------


async def test_an_answer_cut_before_its_first_word_leaves_an_interrupted_message() -> None:
    loop, llm, _, runner = make(["Certainly, the weather in Tokyo is sunny.", "Ok."])
    async with loop:
        events = loop.events()
        await loop.send_text("weather?")
        await until(events, lambda e: isinstance(e, AgentSpeechStarted))
        await loop.interrupt()
        await until(events, lambda e: isinstance(e, AgentSpeechEnded))
        await loop.send_text("and Paris?")
        await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    assert runner.history.messages[:3] == (
        UserMessage("weather?"),
        AssistantMessage("", (), True),
        UserMessage("and Paris?"),
    )
    check_chat_messages(llm.requests[1].messages)


# 11: config limits and a non-default endpointing silence ------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("end_of_speech_silence", 0),
        ("end_of_speech_silence", float("inf")),
        ("max_utterance", float("inf")),
        ("filler_after", float("inf")),
        ("barge_in_min_speech", float("nan")),
        ("min_speech", -0.1),
        ("error_text", None),
    ],
)
def test_config_refuses_zero_silence_and_non_finite_durations(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        VoiceConfig(**{field: value})


async def test_a_longer_end_of_speech_silence_keeps_a_pause_inside_the_turn() -> None:
    tts = FakeTTS()
    config = VoiceConfig(end_of_speech_silence=1.0)
    loop, *_ = make(["Okay."], tts=tts, config=config)
    async with loop:
        events = loop.events()
        # a 0.7 s pause (would end the turn at the default 0.5 s), then more words
        await say(loop, tts, "book a", silence=0.7)
        await say(loop, tts, "table", silence=1.2)
        seen = await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    assert [type(e).__name__ for e in seen].count("UserSpeechEnded") == 1
    assert loop.history.messages[0] == UserMessage("book a table")


async def test_a_lower_barge_in_min_speech_makes_a_short_sound_interrupt() -> None:
    config = VoiceConfig(barge_in_min_speech=0.1)
    loop, _, tts, _ = make(["One two three four five six.", "Yes?"], config=config)
    async with loop:
        events = loop.events()
        await loop.send_text("Count.")
        seen = await until(events, lambda e: isinstance(e, AgentSpeechStarted))
        await say(loop, tts, "hmm")  # 0.15 s: no barge-in at the default 0.2 s
        seen += await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    assert any(isinstance(e, BargeIn) for e in seen)


# 12: a barge-in also silences frames a consumer has not taken yet ----------------------------


async def test_interrupt_turns_buffered_speech_frames_into_silence() -> None:
    loop, *_ = make(["One two three four five six seven eight."])
    async with loop:
        events = loop.events()
        audio = loop.audio_out()  # a bursty consumer: not read until after the barge-in
        await loop.send_text("Count.")
        await until(events, lambda e: isinstance(e, AgentSpeechStarted))
        await anyio.sleep(0.3)
        await loop.interrupt()
        taken = []
        with anyio.fail_after(5):
            async for frame in audio:
                taken.append(frame)
                if len(taken) == 10:
                    break
    assert all(frame.pcm == bytes(len(frame.pcm)) for frame in taken)


# 7: a huge pushed frame does not stall other sessions' audio --------------------------------


async def test_a_30_s_frame_does_not_stall_another_loops_audio_clock() -> None:
    class SlowVAD(FakeVAD):  # ~1 ms a window, as a real model on a busy core
        def stream(self) -> Any:
            inner = super().stream()

            class Stream:
                def speech_probability(self, window: bytes) -> float:
                    time.sleep(0.001)
                    return inner.speech_probability(window)

                def reset(self) -> None:
                    pass

            return Stream()

    other, *_ = make([])
    runner = TurnRunner(ScriptedLLM([]), ToolExecutor(ToolRegistry()), system_prompt="x")
    loop = VoiceLoop(runner, stt=FakeSTT(), tts=FakeTTS(), vad=SlowVAD())
    stamps: list[float] = []
    async with other, loop:
        frames = other.audio_out()

        async def consume() -> None:
            async for _ in frames:
                stamps.append(time.monotonic())

        async with anyio.create_task_group() as group:
            group.start_soon(consume)
            await anyio.sleep(0.2)
            await loop.push_audio(AudioFrame(bytes(2 * 16000 * 30), 16000))  # ~940 windows
            await anyio.sleep(0.2)
            group.cancel_scope.cancel()
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert max(gaps) < 0.25, f"the other loop's audio stalled {max(gaps) * 1000:.0f} ms"


# 5: heard text of a sentence still being synthesised ----------------------------------------


@pytest.mark.parametrize("seconds_per_char", [0.05, 0.09])
async def test_heard_text_never_claims_words_that_were_not_played(seconds_per_char: float) -> None:
    text = "Alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima."
    # synthesis a little behind real time: the sentence is still being synthesised when cut
    tts = FakeTTS(seconds_per_char=seconds_per_char, delay=0.12)
    config = VoiceConfig(output_sample_rate=24000)
    loop, _llm, _, runner = make([text, "Ok."], tts=tts, config=config)
    async with loop:
        events = loop.events()
        await loop.send_text("spell")
        await until(events, lambda e: isinstance(e, AgentSpeechStarted))
        await anyio.sleep(1.0)
        segment = loop._playout._queue[0]
        assert not segment.done
        played = segment.played / 24000
        await loop.interrupt()
        seen = await until(events, lambda e: isinstance(e, AgentSpeechEnded))
    chars = played / seconds_per_char
    truly = [m.group() for m in re.finditer(r"\S+", text) if m.end() <= chars]
    heard = seen[-1].heard_text.split()
    assert heard == truly[: len(heard)], (played, heard, truly)  # a prefix: never more
    assert runner.history.messages[1].content.split() == heard
