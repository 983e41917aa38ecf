"""Ending turns by meaning with a fake turn detector: complete ends early, incomplete waits, a
slow or failing detector falls back to the fixed silence, and the loop resolves the default."""

from __future__ import annotations

import logging
import threading
import time

import anyio
import pytest

from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.tools import ToolRegistry
from llmrtc.voice import AudioFrame, UserSpeechEnded, VoiceConfig, VoiceLoop
from llmrtc.voice.endpointing import Endpointer, UtteranceEnded
from llmrtc.voice.speech import resolve_turn_detector
from llmrtc.voice.turn_detector import TurnDetector

WINDOW = 512
LOUD = b"\x10\x27" * WINDOW
QUIET = bytes(2 * WINDOW)
MIN_END = 7  # 0.2 s = 6.25 windows
FIXED_END = 16  # 0.5 s = 15.6 windows
MAX_END = 63  # 2.0 s = 62.5 windows


class FakeDetector:
    """Says `probability` (or raises `error`), after `gate` opens when one is given."""

    def __init__(
        self,
        probability: float = 1.0,
        *,
        error: Exception | None = None,
        gate: threading.Event | None = None,
        sample_rate: int = 16000,
    ) -> None:
        self.probability = probability
        self.error = error
        self.gate = gate
        self.sample_rate = sample_rate
        self.asked: list[bytes] = []

    def completion_probability(self, pcm: bytes) -> float:
        self.asked.append(pcm)
        if self.gate is not None:
            self.gate.wait(10)
        if self.error is not None:
            raise self.error
        return self.probability


def endpointer(detector: TurnDetector | None, **config: float) -> Endpointer:
    return Endpointer(
        VoiceConfig(turn_detector=detector, **config),  # type: ignore[arg-type]
        sample_rate=16000,
        window_samples=WINDOW,
        turn_detector=detector,
    )


def speak(ep: Endpointer, windows: int) -> None:
    for _ in range(windows):
        assert not isinstance(ep.push(LOUD, 1.0), UtteranceEnded)


def pause(ep: Endpointer, windows: int) -> int | None:
    """Up to `windows` unvoiced windows, 5 ms apart (the detector answers on its thread);
    the count of windows that ended the utterance, or None."""
    for index in range(1, windows + 1):
        if isinstance(ep.push(QUIET, 0.0), UtteranceEnded):
            return index
        time.sleep(0.005)
    return None


def test_a_complete_turn_ends_soon_after_min_end_silence() -> None:
    detector = FakeDetector(0.9)
    ep = endpointer(detector)
    speak(ep, 20)
    ended_at = pause(ep, 40)
    assert ended_at is not None and MIN_END <= ended_at < FIXED_END
    assert len(detector.asked) == 1
    # Asked after min_end_silence: the pre-roll, the speech and 7 windows of silence.
    assert len(detector.asked[0]) == 2 * WINDOW * (20 + MIN_END)
    judgement = ep.last_judgement
    assert judgement is not None and judgement.complete and judgement.probability == 0.9
    assert judgement.cpu_seconds >= 0 and judgement.wall_seconds >= 0


def test_an_incomplete_turn_waits_for_max_end_silence() -> None:
    ep = endpointer(FakeDetector(0.1))
    speak(ep, 20)
    assert pause(ep, MAX_END) == MAX_END
    assert ep.last_judgement is not None and not ep.last_judgement.complete


def test_speech_after_an_incomplete_pause_continues_the_same_utterance() -> None:
    detector = FakeDetector(0.1)
    ep = endpointer(detector)
    speak(ep, 20)
    assert pause(ep, 30) is None  # 0.96 s: the fixed silence would have cut here
    speak(ep, 10)
    detector.probability = 0.9
    ended_at = pause(ep, 40)
    assert ended_at is not None and ended_at < FIXED_END
    assert len(detector.asked) == 2  # each pause was judged once


def test_the_min_and_max_end_silence_are_configurable() -> None:
    ep = endpointer(FakeDetector(0.1), min_end_silence=0.1, max_end_silence=1.0)
    speak(ep, 20)
    assert pause(ep, 40) == 32  # 1.0 s = 31.25 windows
    detector = FakeDetector(0.9)
    ep = endpointer(detector, min_end_silence=0.3, end_of_speech_silence=0.6)
    speak(ep, 20)
    ended_at = pause(ep, 40)
    assert ended_at is not None and 10 <= ended_at < 19  # asked at 0.3 s (10 windows)


def test_a_failing_detector_falls_back_to_the_fixed_silence_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ep = endpointer(FakeDetector(error=RuntimeError("model broke")))
    with caplog.at_level(logging.DEBUG, logger="llmrtc.voice.endpointing"):
        for _ in range(2):
            speak(ep, 20)
            assert pause(ep, 40) == FIXED_END
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "model broke" in warnings[0].getMessage()


@pytest.mark.parametrize("answer", [1.5, float("nan"), True])
def test_a_detector_answering_nonsense_counts_as_failed(answer: float) -> None:
    ep = endpointer(FakeDetector(answer))
    speak(ep, 20)
    assert pause(ep, 40) == FIXED_END
    assert ep.last_judgement is None


def test_a_slow_detector_falls_back_to_the_fixed_silence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = threading.Event()
    ep = endpointer(FakeDetector(0.1, gate=gate))
    try:
        with caplog.at_level(logging.WARNING, logger="llmrtc.voice.endpointing"):
            speak(ep, 20)
            assert pause(ep, 40) == FIXED_END
        assert any("had not answered" in r.getMessage() for r in caplog.records)
    finally:
        gate.set()


def test_one_question_in_flight_per_stream(caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()
    detector = FakeDetector(0.9, gate=gate)
    ep = endpointer(detector)
    try:
        with caplog.at_level(logging.WARNING, logger="llmrtc.voice.endpointing"):
            for _ in range(2):  # the first question still runs when the second pause comes
                speak(ep, 20)
                assert pause(ep, 40) == FIXED_END
        assert len(detector.asked) == 1
        assert any("still judging" in r.getMessage() for r in caplog.records)
    finally:
        gate.set()
    time.sleep(0.05)
    speak(ep, 20)  # once it has answered, pauses are judged again
    ended_at = pause(ep, 40)
    assert ended_at is not None and ended_at < FIXED_END and len(detector.asked) == 2


def test_a_detector_at_another_rate_gets_resampled_audio() -> None:
    pytest.importorskip("av")
    detector = FakeDetector(0.9, sample_rate=8000)
    ep = endpointer(detector)
    speak(ep, 20)
    assert pause(ep, 40) is not None
    assert abs(len(detector.asked[0]) - WINDOW * (20 + MIN_END)) <= 64


def test_without_a_detector_the_fixed_silence_ends_the_turn() -> None:
    ep = endpointer(None)
    speak(ep, 20)
    assert pause(ep, 40) == FIXED_END
    # Without a detector the fixed silence may be as short as one likes.
    short = endpointer(None, end_of_speech_silence=0.1)
    speak(short, 20)
    assert pause(short, 40) == 4  # 0.1 s = 3.1 windows


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"min_end_silence": 0}, "min_end_silence"),
        ({"min_end_silence": 1.0, "max_end_silence": 0.5}, "min_end_silence <= max_end_silence"),
        ({"max_end_silence": float("inf")}, "max_end_silence"),
        ({"end_of_speech_silence": 0.2, "turn_detector": FakeDetector()}, "longer than min_end"),
        ({"turn_detector": "smart_turn"}, "turn_detector"),
        ({"turn_detector": object()}, "turn_detector"),
    ],
)
def test_bad_turn_settings_are_refused(fields: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        VoiceConfig(**fields)  # type: ignore[arg-type]


def test_the_default_resolves_to_no_detector_for_a_custom_stack(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import llmrtc.voice.speech as speech

    detector = FakeDetector()
    assert resolve_turn_detector(VoiceConfig(turn_detector=detector), FakeVAD()) is detector
    assert resolve_turn_detector(VoiceConfig(turn_detector=None), FakeVAD()) is None
    speech._said.discard("custom")
    with caplog.at_level(logging.INFO, logger="llmrtc.voice.speech"):
        assert resolve_turn_detector(VoiceConfig(), FakeVAD()) is None
        assert resolve_turn_detector(VoiceConfig(), FakeVAD()) is None
    said = [r for r in caplog.records if "not open_default_speech()'s" in r.getMessage()]
    assert len(said) == 1  # once per process, not per session


@pytest.mark.anyio
async def test_a_voice_loop_ends_a_complete_turn_by_the_detector() -> None:
    pytest.importorskip("av")
    detector = FakeDetector(0.95)
    runner = TurnRunner(
        ScriptedLLM(["Sure."]), ToolExecutor(ToolRegistry([])), system_prompt="Be brief."
    )
    config = VoiceConfig(turn_detector=detector)
    tts = FakeTTS()
    loop = VoiceLoop(runner, stt=FakeSTT(["hello"], tts=tts), tts=tts, vad=FakeVAD(), config=config)
    seen: list[object] = []

    async def watch() -> None:
        async for event in loop.events():
            seen.append(event)

    async with loop, anyio.create_task_group() as group:
        group.start_soon(watch)
        await anyio.sleep(0.01)
        loud = AudioFrame(b"\x10\x27" * 320, sample_rate=16000)
        for _ in range(30):
            await loop.push_audio(loud)
        silent_frames = 0
        while silent_frames < 40 and not any(isinstance(e, UserSpeechEnded) for e in seen):
            await loop.push_audio(AudioFrame.silence(0.02, 16000))
            silent_frames += 1
            await anyio.sleep(0.01)
        group.cancel_scope.cancel()
    assert any(isinstance(e, UserSpeechEnded) for e in seen)
    assert silent_frames < 25  # 0.5 s of 20 ms frames: it ended before the fixed silence
    assert detector.asked


def test_a_short_fixed_silence_stays_valid_with_the_default_detector_setting() -> None:
    # Valid before turn detectors existed: the default "speech" may resolve to no detector, so
    # only a detector given explicitly makes a short end_of_speech_silence an error.
    assert VoiceConfig(end_of_speech_silence=0.2).end_of_speech_silence == 0.2
    assert resolve_turn_detector(VoiceConfig(end_of_speech_silence=0.15), FakeVAD()) is None


def test_a_smart_turn_that_cannot_load_leaves_speech_working(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Another pipecat-ai version (its file is not the one we verify), a damaged file: the
    # speech stack opens without a detector, it never fails for it.
    import llmrtc.packaged_models as packaged_models
    import llmrtc.voice.speech as speech
    from llmrtc.voice.providers import smart_turn

    def wrong_version() -> None:
        raise smart_turn.VoiceModelError("pipecat-ai 1.15.0 is installed; 1.14.0 is needed")

    monkeypatch.setattr(packaged_models, "missing_distributions", lambda names: [])
    monkeypatch.setattr(smart_turn.SmartTurnDetector, "load", staticmethod(wrong_version))
    with caplog.at_level(logging.WARNING, logger="llmrtc.voice.speech"):
        assert speech._load_turn_detector() is None
    assert "cannot be loaded" in caplog.text and "1.14.0 is needed" in caplog.text


def kinds_of_pause(ep: Endpointer, windows: int) -> list[str]:
    """What `windows` unvoiced windows (5 ms apart) decided, by kind."""
    out = []
    for _ in range(windows):
        event = ep.push(QUIET, 0.0)
        if event is not None:
            out.append(type(event).__name__)
            if isinstance(event, UtteranceEnded):
                break
        time.sleep(0.005)
    return out


def test_a_pause_judged_unfinished_is_reported_one_judged_finished_is_not() -> None:
    # Preemptive generation starts at the report; never while the detector judges (on two
    # cores Whisper then delayed its answer past the fixed silence and cut the sentence).
    ep = endpointer(FakeDetector(0.1))
    speak(ep, 20)
    assert kinds_of_pause(ep, 20) == ["UtterancePaused"]
    assert ep.last_judgement is not None and not ep.last_judgement.complete
    assert type(ep.push(LOUD, 1.0)).__name__ == "UtteranceResumed"
    ep = endpointer(FakeDetector(0.9))
    speak(ep, 20)
    assert kinds_of_pause(ep, 40) == ["UtteranceEnded"]


def test_a_pause_the_detector_cannot_judge_is_reported_and_ends_by_the_fixed_silence() -> None:
    ep = endpointer(FakeDetector(error=RuntimeError("model gone")))
    speak(ep, 20)
    assert kinds_of_pause(ep, 40) == ["UtterancePaused", "UtteranceEnded"]
    # While it judges (slow), nothing is reported: the fixed silence ends the pause.
    gate = threading.Event()
    ep = endpointer(FakeDetector(0.1, gate=gate))
    speak(ep, 20)
    try:
        assert kinds_of_pause(ep, 40) == ["UtteranceEnded"]
    finally:
        gate.set()
