"""Endpointing in audio time: the state machine alone, and a loop fed faster than real time."""

from __future__ import annotations

import time

import anyio
import pytest

from llmrtc.voice.config import VoiceConfig
from llmrtc.voice.endpointing import (
    Endpointer,
    UtteranceEnded,
    UtterancePaused,
    UtteranceResumed,
    UtteranceStarted,
)

WINDOW = 512
LOUD = b"\x10\x27" * WINDOW  # 10000
QUIET = bytes(2 * WINDOW)


def feed(endpointer: Endpointer, pattern: str, *, pauses: bool = False) -> list[object]:
    """`pattern`: one char per window, `v` voiced, `.` unvoiced. The starts and ends decided
    (and the pauses and resumptions with `pauses`)."""
    out = []
    for index, mark in enumerate(pattern):
        event = endpointer.push(LOUD if mark == "v" else QUIET, 1.0 if mark == "v" else 0.0)
        if event is not None and (pauses or isinstance(event, UtteranceStarted | UtteranceEnded)):
            out.append((index, event))
    return out


def test_each_pause_that_may_end_the_turn_is_reported_once_and_so_is_speech_after_it() -> None:
    # Fixed silence (0.5 s = 16 windows); min_end_silence 0.2 s = 3 200 samples = 7 windows.
    config = VoiceConfig(turn_detector=None)
    endpointer = Endpointer(config, sample_rate=16000, window_samples=WINDOW)
    pattern = "v" * 10 + "." * 9 + "v" * 5 + "." * 3 + "v" * 5 + "." * 20
    events = feed(endpointer, pattern, pauses=True)
    kinds = [type(event).__name__ for _, event in events]
    assert kinds == [
        "UtteranceStarted",
        "UtterancePaused",  # the 7th unvoiced window of the first gap
        "UtteranceResumed",
        # a 3-window gap is no pause that may end a turn: nothing reported
        "UtterancePaused",
        "UtteranceEnded",
    ]
    (_, first_pause), (resumed_at, _) = events[1], events[2]
    assert events[1][0] == 10 + 6 and resumed_at == 10 + 9
    assert isinstance(first_pause, UtterancePaused)
    assert first_pause.duration == 10 * WINDOW / 16000
    assert len(first_pause.pcm) == 2 * WINDOW * (10 + 7)  # the speech and the pause so far
    last_pause, ended = events[3][1], events[4][1]
    assert isinstance(last_pause, UtterancePaused) and isinstance(ended, UtteranceEnded)
    # No speech after the last pause: the end has its duration (the loop's test for reuse).
    assert last_pause.duration == ended.duration
    assert ended.pcm.startswith(last_pause.pcm)
    assert first_pause.duration != ended.duration


def test_a_pause_is_not_reported_when_the_turn_ends_first() -> None:
    # end_of_speech_silence shorter than min_end_silence (allowed without a detector).
    config = VoiceConfig(turn_detector=None, end_of_speech_silence=0.1)
    endpointer = Endpointer(config, sample_rate=16000, window_samples=WINDOW)
    events = feed(endpointer, "v" * 10 + "." * 20, pauses=True)
    assert [type(e).__name__ for _, e in events] == ["UtteranceStarted", "UtteranceEnded"]
    assert not any(isinstance(e, UtteranceResumed) for _, e in events)


def test_the_frame_arithmetic_of_the_docstring() -> None:
    endpointer = Endpointer(VoiceConfig(), sample_rate=16000, window_samples=WINDOW)
    events = feed(endpointer, "...." + "v" * 10 + "." * 20)
    (start_at, started), (end_at, ended) = events
    assert isinstance(started, UtteranceStarted) and isinstance(ended, UtteranceEnded)
    assert start_at == 4 + 3  # 0.1 s = 1600 samples: the 4th voiced window (128 ms)
    assert started.audio_time == pytest.approx(4 * WINDOW / 16000)
    assert end_at == 4 + 10 + 15  # 0.5 s = 15.6 windows: the 16th unvoiced window ends it
    assert ended.duration == pytest.approx(10 * WINDOW / 16000)
    # pre-roll (0.3 s = 10 windows, only 4 before the speech) + speech + closing silence
    assert len(ended.pcm) == 2 * WINDOW * (4 + 10 + 16)
    assert not ended.cut


def test_short_sounds_do_not_start_an_utterance_and_long_ones_are_cut() -> None:
    config = VoiceConfig(max_utterance=1.0)
    endpointer = Endpointer(config, sample_rate=16000, window_samples=WINDOW)
    assert feed(endpointer, "vv....vv....") == []  # clicks: 64 ms each
    assert not endpointer.in_speech
    events = feed(endpointer, "v" * 40)
    kinds = [type(e).__name__ for _, e in events]
    # cut 1 s (32 windows) after speech began; the user goes on: a new one 4 windows later
    assert kinds == ["UtteranceStarted", "UtteranceEnded", "UtteranceStarted"]
    assert events[1][1].cut  # type: ignore[attr-defined]
    assert events[1][0] == 31 and events[2][0] == 31 + 4


def test_voiced_seconds_count_the_utterance_for_barge_in() -> None:
    endpointer = Endpointer(VoiceConfig(), sample_rate=16000, window_samples=WINDOW)
    feed(endpointer, "v" * 7)
    assert endpointer.in_speech
    assert endpointer.voiced_seconds == pytest.approx(7 * WINDOW / 16000)  # >= 0.2: barge-in


def test_a_wrong_window_size_is_refused() -> None:
    endpointer = Endpointer(VoiceConfig(), sample_rate=16000, window_samples=WINDOW)
    with pytest.raises(ValueError, match="expected 1024"):
        endpointer.push(b"\0\0", 0.0)


@pytest.mark.anyio
async def test_pushing_50x_faster_than_real_time_endpoints_the_same() -> None:
    from llmrtc.agent.runner import TurnRunner
    from llmrtc.execution.executor import ToolExecutor
    from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
    from llmrtc.tools.registry import ToolRegistry
    from llmrtc.voice import VoiceLoop
    from llmrtc.voice.audio import split_frames
    from llmrtc.voice.events import Transcript, UserSpeechEnded, UserSpeechStarted

    async def speak(pace: float) -> list[object]:
        tts = FakeTTS()
        said = tts.render("What is the weather in Tokyo?") + bytes(2 * 24000)
        runner = TurnRunner(
            ScriptedLLM(["Sunny."]), ToolExecutor(ToolRegistry()), system_prompt="x"
        )
        async with VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD()) as loop:
            events = loop.events()
            started = time.monotonic()
            for index, frame in enumerate(split_frames(said, 24000)):
                await anyio.sleep_until(started + index * 0.02 * pace)
                await loop.push_audio(frame)
            seen: list[object] = []
            with anyio.fail_after(10):
                async for event in events:
                    if isinstance(event, UserSpeechStarted | UserSpeechEnded | Transcript):
                        seen.append(event)
                    if isinstance(event, Transcript):
                        return seen
        raise AssertionError("no transcript")

    real_time = await speak(1.0)
    fast = await speak(1 / 50)
    assert real_time == fast
    assert fast[2] == Transcript("What is the weather in Tokyo?")


def test_the_vad_threshold_decides_what_is_voiced() -> None:
    strict = Endpointer(VoiceConfig(vad_threshold=0.7), sample_rate=16000, window_samples=WINDOW)
    loose = Endpointer(VoiceConfig(vad_threshold=0.5), sample_rate=16000, window_samples=WINDOW)
    for endpointer in (strict, loose):
        for _ in range(5):
            endpointer.push(LOUD, 0.6)
    assert not strict.in_speech and loose.in_speech


def test_non_default_min_speech_and_end_of_speech_silence() -> None:
    config = VoiceConfig(min_speech=0.2, end_of_speech_silence=0.25)
    endpointer = Endpointer(config, sample_rate=16000, window_samples=WINDOW)
    events = feed(endpointer, "v" * 10 + "." * 10)
    (start_at, started), (end_at, ended) = events
    assert isinstance(started, UtteranceStarted) and isinstance(ended, UtteranceEnded)
    assert start_at == 6  # 0.2 s = 3200 samples: the 7th voiced window (6.25 needed)
    assert end_at == 10 + 7  # 0.25 s = 4000 samples = 7.8 windows: the 8th unvoiced one
