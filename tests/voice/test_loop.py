"""VoiceLoop with the fake speech engines and a real TurnRunner: turns, order, barge-in,
pacing, subscribers and bad input."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from llmrtc.agent.events import TextDelta, TurnCompleted
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, UserMessage
from llmrtc.telemetry.events import (
    BargeInEvent,
    SpeechEndEvent,
    SpeechStartEvent,
    STTEndEvent,
    TTSEndEvent,
    TTSStartEvent,
)
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, RecordingHooks, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse, check_chat_messages
from llmrtc.tools.registry import ToolRegistry
from llmrtc.voice import AudioFrame, VoiceConfig, VoiceLoop
from llmrtc.voice.audio import split_frames
from llmrtc.voice.events import (
    AgentSpeechEnded,
    AgentSpeechStarted,
    BargeIn,
    Transcript,
    UserSpeechStarted,
)

pytestmark = pytest.mark.anyio


def make_loop(
    script: Sequence[Any], *, stt: FakeSTT | None = None, tts: FakeTTS | None = None, **kw: Any
) -> tuple[VoiceLoop, ScriptedLLM, FakeTTS]:
    tts = tts or FakeTTS()
    llm = ScriptedLLM(script)
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    loop = VoiceLoop(runner, stt=stt or FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), **kw)
    return loop, llm, tts


async def say(loop: VoiceLoop, tts: FakeTTS, text: str, *, silence: float = 0.7) -> None:
    """Push `text` as FakeTTS speech (24 kHz, 20 ms frames, as fast as possible)."""
    for frame in split_frames(tts.render(text) + bytes(2 * round(24000 * silence)), 24000):
        await loop.push_audio(frame)


async def collect_until(events: Any, kind: type, *, timeout: float = 10) -> list[Any]:
    seen = []
    with anyio.fail_after(timeout):
        async for event in events:
            seen.append(event)
            if isinstance(event, kind):
                return seen
    raise AssertionError(f"events ended before {kind.__name__}: {seen}")


def names(events: list[Any]) -> list[str]:
    out: list[str] = []
    for event in events:
        name = type(event).__name__
        if not (out and out[-1] == name == "TextDelta"):
            out.append(name)
    return out


async def test_a_spoken_turn_in_order_with_hooks() -> None:
    hooks = RecordingHooks()
    loop, llm, tts = make_loop(["It is sunny. Enjoy the day."], hooks=hooks, session_id="s1")
    async with loop:
        events = loop.events()
        await say(loop, tts, "What is the weather?")
        seen = await collect_until(events, AgentSpeechEnded)
    assert names(seen) == [
        "UserSpeechStarted",
        "UserSpeechEnded",
        "Transcript",
        "TextDelta",
        "AgentSpeechStarted",
        "TextDelta",
        "TurnCompleted",
        "AgentSpeechEnded",
    ] or names(seen) == [
        "UserSpeechStarted",
        "UserSpeechEnded",
        "Transcript",
        "TextDelta",
        "TurnCompleted",
        "AgentSpeechStarted",
        "AgentSpeechEnded",
    ]
    assert seen[2] == Transcript("What is the weather?", True)
    assert seen[-1] == AgentSpeechEnded(False, "It is sunny. Enjoy the day.")
    assert tts.spoken == ["It is sunny.", "Enjoy the day."]  # sentence by sentence
    assert loop.history.messages == (
        UserMessage("What is the weather?"),
        AssistantMessage("It is sunny. Enjoy the day."),
    )
    # every speech hook carries the session and the one turn id the model's turn used
    turn_id = hooks.of(STTEndEvent)[0].turn_id
    assert turn_id is not None and llm.requests
    for kind in (SpeechStartEvent, SpeechEndEvent, STTEndEvent, TTSStartEvent, TTSEndEvent):
        assert {(e.session_id, e.turn_id) for e in hooks.of(kind)} == {("s1", turn_id)}
    stt_end = hooks.of(STTEndEvent)[0]
    assert stt_end.model == "fake-stt" and stt_end.audio_duration_s > 1.0
    first, second = hooks.of(TTSStartEvent)
    assert first.voice == "fake-tts" and first.time_to_first_audio_s is not None
    assert second.time_to_first_audio_s is None
    assert [e.interrupted for e in hooks.of(TTSEndEvent)] == [False, False]


async def test_a_typed_turn_needs_no_stt() -> None:
    stt = FakeSTT()  # no transcripts: any transcription would fail
    loop, _, _ = make_loop(["Hello!"], stt=stt)
    async with loop:
        events = loop.events()
        await loop.send_text("  Hi there  ")
        seen = await collect_until(events, AgentSpeechEnded)
    assert names(seen) == [
        "TextDelta",
        "TurnCompleted",
        "AgentSpeechStarted",
        "AgentSpeechEnded",
    ]
    assert stt.utterances == []
    assert loop.history.messages[0] == UserMessage("Hi there")


async def test_audio_out_is_paced_20_ms_frames_speech_then_silence() -> None:
    loop, _, _ = make_loop(["Hi."], config=VoiceConfig(output_sample_rate=24000))
    async with loop:
        frames = loop.audio_out()
        await loop.send_text("hello")
        got: list[tuple[float, AudioFrame]] = []
        with anyio.fail_after(10):
            async for frame in frames:
                got.append((anyio.current_time(), frame))
                if len(got) == 60:
                    break
    assert all(f.sample_rate == 24000 and f.samples == 480 and f.channels == 1 for _, f in got)
    speech = [bool(any(f.pcm)) for _, f in got]
    first = speech.index(True)
    # "Hi." is 3 x 50 ms = 150 ms: 7.5 frames of speech, then silence again
    assert 7 <= sum(speech) <= 9 and not any(speech[first + 9 :])
    assert got[-1][0] - got[0][0] == pytest.approx(59 * 0.02, abs=0.2)


async def test_barge_in_during_a_long_reply_stops_speech_and_keeps_what_was_heard() -> None:
    long_reply = "One two three four five six seven. Eight nine ten eleven twelve. Thirteen."
    hooks = RecordingHooks()
    tts = FakeTTS(delay=0.05)  # synthesis at twice real time: still running at the barge-in
    loop, llm, _ = make_loop(
        [ScriptedResponse(text=long_reply), "Okay, stopping."], hooks=hooks, tts=tts
    )
    log: list[Any] = []
    async with loop:
        events = loop.events()
        frames = loop.audio_out()

        async def watch_events() -> None:
            async for event in events:
                log.append(event)

        async def watch_audio() -> None:
            async for frame in frames:
                log.append(bool(any(frame.pcm)))

        async with anyio.create_task_group() as group:
            group.start_soon(watch_events)
            group.start_soon(watch_audio)
            await loop.send_text("Count for me.")
            with anyio.fail_after(10):
                while not any(isinstance(e, AgentSpeechStarted) for e in log):
                    await anyio.sleep(0.01)
            await anyio.sleep(0.6)  # about 12 characters heard
            await say(loop, tts, "Stop please")
            with anyio.fail_after(10):
                while sum(isinstance(e, AgentSpeechEnded) for e in log) < 2:
                    await anyio.sleep(0.01)
            group.cancel_scope.cancel()
    barge = next(i for i, e in enumerate(log) if isinstance(e, BargeIn))
    resumed = next(i for i, e in enumerate(log) if i > barge and isinstance(e, AgentSpeechStarted))
    assert sum(1 for e in log[barge:resumed] if e is True) <= 1  # at most one more speech frame
    assert log[barge:resumed].count(False) >= 1  # silence until the next reply
    ended = next(e for e in log if isinstance(e, AgentSpeechEnded))
    heard = log[barge].heard_text
    assert ended == AgentSpeechEnded(True, heard)
    assert heard and long_reply.startswith(heard) and heard != long_reply
    full = next(e for e in log if isinstance(e, TurnCompleted)).text
    assert full == long_reply  # the turn's events go on after the barge-in
    assert [type(e).__name__ for e in log if isinstance(e, UserSpeechStarted | Transcript)] == [
        "UserSpeechStarted",
        "Transcript",
    ]
    # the next request sees only what was heard, marked interrupted, then the new turn
    second = llm.requests[1].messages
    check_chat_messages(second)
    assert second[1:] == [
        UserMessage("Count for me."),
        AssistantMessage(heard, (), True),
        UserMessage("Stop please"),
    ]
    assert len(hooks.of(BargeInEvent)) == 1
    assert any(e.interrupted for e in hooks.of(TTSEndEvent))  # synthesis was stopped


async def test_interrupt_on_request_and_with_nothing_running() -> None:
    loop, _, _ = make_loop([ScriptedResponse(text="A long answer here. " * 5)])
    async with loop:
        events = loop.events()
        await loop.interrupt()  # nothing running: nothing happens
        await loop.send_text("go")
        await collect_until(events, AgentSpeechStarted)
        await anyio.sleep(0.3)
        await loop.interrupt()
        seen = await collect_until(events, AgentSpeechEnded)
    assert isinstance(seen[0], BargeIn) or any(isinstance(e, BargeIn) for e in seen)
    assert seen[-1].interrupted
    interrupted = loop.history.messages[-1]
    assert isinstance(interrupted, AssistantMessage) and interrupted.interrupted
    assert interrupted.content == seen[-1].heard_text and interrupted.content.startswith("A")


async def test_bad_input_and_pushes_outside_the_loop_raise() -> None:
    loop, _, _ = make_loop([])
    frame = AudioFrame(bytes(640), 16000)
    with pytest.raises(RuntimeError, match="not started"):
        await loop.push_audio(frame)
    for pcm, rate in ((b"\0" * 3, 16000), (b"", 16000), (b"\0\0", 0)):
        with pytest.raises(ValueError):
            AudioFrame(pcm, rate)
    async with loop:
        with pytest.raises(TypeError):
            await loop.push_audio(b"\0\0")  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            await loop.send_text("  ")
        await loop.push_audio(AudioFrame(bytes(4 * 441), 44100, 2))  # any rate, channels, length
    with pytest.raises(RuntimeError, match="ended"):
        await loop.push_audio(frame)
    with pytest.raises(RuntimeError, match="ended"):
        await loop.send_text("hi")
    with pytest.raises(RuntimeError, match="runs once"):
        async with loop:
            pass
    assert [e async for e in loop.events()] == []  # an ended loop's iterators end at once


async def test_every_subscriber_gets_every_event_and_a_slow_one_never_blocks() -> None:
    loop, _, _ = make_loop(["Fine, thanks."])
    async with loop:
        fast = [loop.events() for _ in range(5)]
        slow = loop.events()  # never read until the turn is over
        audio = loop.audio_out()  # never read either
        await loop.send_text("How are you?")
        seen = [await collect_until(events, AgentSpeechEnded) for events in fast]
    assert all(s == seen[0] for s in seen)
    assert [e async for e in slow] == seen[0]  # buffered, in order, then ended with the loop
    frames = [f async for f in audio]
    assert len(frames) == 10  # its buffer: the oldest frames were dropped, not waited for
    assert any(isinstance(e, TextDelta) for e in seen[0])
    assert isinstance(seen[0][-1], AgentSpeechEnded)


async def test_a_sound_shorter_than_barge_in_min_speech_does_not_interrupt() -> None:
    loop, _, tts = make_loop(["One two three four five six.", "Yes?"])
    async with loop:
        events = loop.events()
        await loop.send_text("Count.")
        seen = await collect_until(events, AgentSpeechStarted)
        # 0.15 s: an utterance (min_speech 0.1), no barge-in (0.2); a word, not a filler ("hmm"
        # over the agent is no turn: test_interruptions.py)
        await say(loop, tts, "yes")
        seen += await collect_until(events, AgentSpeechEnded)
        seen += await collect_until(events, AgentSpeechEnded)
    assert not any(isinstance(e, BargeIn) for e in seen)
    ends = [e for e in seen if isinstance(e, AgentSpeechEnded)]
    assert ends == [
        AgentSpeechEnded(False, "One two three four five six."),
        AgentSpeechEnded(False, "Yes?"),
    ]
    assert loop.history.messages[2] == UserMessage("yes")  # answered after the first reply
