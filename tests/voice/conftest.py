"""Shared voice test fixtures: speech synthesised at test time with espeak-ng (22.05 kHz,
converted by the library's own `llmrtc.voice.audio.resample`), and the real offline speech
models loaded once per test session.

Use them as fixtures (``--import-mode=importlib`` makes ``from tests.voice.conftest import ...``
fail):

    def test_something(spoken, frames_of) -> None:
        frame = spoken("What is the weather in Tokyo?")             # AudioFrame, 16 kHz mono
        frame = spoken("Hello there", sample_rate=48000, trail_silence=0.6)
        frames = frames_of(frame)                                    # 20 ms AudioFrames

    @pytest.mark.requires("voice_model")
    async def test_stt(whisper_stt: WhisperSTT, spoken: Speak) -> None: ...

A missing engine or model skips the test with a reason, or fails it under ``CI=true`` (the
``requires`` mechanism of tests/_requirements.py).
"""

from __future__ import annotations

import shutil
import subprocess
import wave
from collections.abc import Callable
from io import BytesIO
from typing import TYPE_CHECKING, Protocol

import pytest

from llmrtc.voice.frames import FRAME_DURATION, AudioFrame
from tests._requirements import require

if TYPE_CHECKING:
    from llmrtc.voice.providers.silero import SileroVAD
    from llmrtc.voice.providers.whisper import WhisperSTT


class Speak(Protocol):
    """The `spoken` fixture's callable."""

    def __call__(
        self,
        text: str,
        *,
        sample_rate: int = 16000,
        voice: str = "en-us",
        words_per_minute: int = 150,
        lead_silence: float = 0.0,
        trail_silence: float = 0.0,
    ) -> AudioFrame:
        """`text` spoken by espeak-ng as one mono frame at `sample_rate`, with optional digital
        silence before and after (seconds)."""
        ...


def _resample(pcm: bytes, rate_in: int, rate_out: int) -> bytes:
    if rate_in == rate_out:
        return pcm
    require("audio")  # the library's resampler runs on PyAV
    from llmrtc.voice.audio import resample

    return resample(pcm, rate_in, rate_out)


def _espeak(text: str, voice: str, words_per_minute: int) -> tuple[bytes, int]:
    """Mono s16le PCM and its rate from espeak-ng (its stdout WAV has a bogus length header,
    so frames are read to the end of the data rather than trusted by count)."""
    require("espeak")
    exe = shutil.which("espeak-ng") or "espeak-ng"
    result = subprocess.run(
        [exe, "-v", voice, "-s", str(words_per_minute), "--stdout", text],
        capture_output=True,
        check=True,
        timeout=60,
    )
    with wave.open(BytesIO(result.stdout)) as wav:
        assert wav.getsampwidth() == 2 and wav.getnchannels() == 1, wav.getparams()
        rate = wav.getframerate()
        pcm = wav.readframes(wav.getnframes())
    return pcm, rate


_SPEECH_CACHE: dict[tuple[str, str, int], tuple[bytes, int]] = {}


@pytest.fixture
def spoken() -> Speak:
    """A callable turning text into real (synthetic) speech: ``spoken(text) -> AudioFrame``."""

    def speak(
        text: str,
        *,
        sample_rate: int = 16000,
        voice: str = "en-us",
        words_per_minute: int = 150,
        lead_silence: float = 0.0,
        trail_silence: float = 0.0,
    ) -> AudioFrame:
        key = (text, voice, words_per_minute)
        if key not in _SPEECH_CACHE:
            _SPEECH_CACHE[key] = _espeak(text, voice, words_per_minute)
        pcm, rate = _SPEECH_CACHE[key]
        pcm = _resample(pcm, rate, sample_rate)
        lead = bytes(2 * round(lead_silence * sample_rate))
        trail = bytes(2 * round(trail_silence * sample_rate))
        return AudioFrame(lead + pcm + trail, sample_rate)

    return speak


def split_frames(frame: AudioFrame, duration: float = FRAME_DURATION) -> list[AudioFrame]:
    """`frame` cut into consecutive frames of `duration` seconds (the last one may be shorter)."""
    step = max(1, round(duration * frame.sample_rate)) * 2 * frame.channels
    return [
        AudioFrame(frame.pcm[i : i + step], frame.sample_rate, frame.channels)
        for i in range(0, len(frame.pcm), step)
    ]


@pytest.fixture
def frames_of() -> Callable[..., list[AudioFrame]]:
    """``frames_of(frame, duration=0.02) -> list[AudioFrame]``: a frame cut into 20 ms frames."""
    return split_frames


@pytest.fixture(scope="session")
def silero_vad() -> SileroVAD:
    """The real Silero VAD, loaded once per test session."""
    require("voice_model")
    from llmrtc.voice.providers.silero import SileroVAD

    return SileroVAD.load()


@pytest.fixture(scope="session")
def whisper_stt() -> WhisperSTT:
    """The real faster-whisper STT (Whisper base, int8), loaded once per test session."""
    require("voice_model")
    from llmrtc.voice.providers.whisper import WhisperSTT

    return WhisperSTT.load()
