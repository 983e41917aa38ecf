"""SileroVAD on the real Silero model: speech vs silence vs noise, per-stream state, the
`VAD` contract. Speech is synthesised at test time by espeak-ng (the `spoken` fixture)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import pytest

from llmrtc.voice.frames import AudioFrame
from llmrtc.voice.vad import VAD, VADStream

if TYPE_CHECKING:
    from llmrtc.voice.providers.silero import SileroVAD

# Tests that take the `silero_vad` fixture load the real model: they carry `voice_model`.
voice_model = pytest.mark.requires("voice_model")

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."


def windows(pcm: bytes, window_samples: int = 512) -> list[bytes]:
    """Consecutive whole windows of `pcm` (a short tail is dropped)."""
    size = 2 * window_samples
    return [pcm[i : i + size] for i in range(0, len(pcm) - size + 1, size)]


def probabilities(stream: VADStream, pcm: bytes) -> list[float]:
    return [stream.speech_probability(w) for w in windows(pcm)]


def white_noise(seconds: float, level: float, seed: int = 0) -> bytes:
    """Gaussian white noise at `level` (RMS as a fraction of full scale), 16 kHz s16le."""
    import numpy as np

    rng = np.random.default_rng(seed)
    samples = rng.normal(0.0, level * 32767, round(seconds * 16000))
    return bytes(np.clip(samples, -32768, 32767).astype("<i2").tobytes())


@pytest.fixture
def speech(spoken: Any) -> AudioFrame:
    frame: AudioFrame = spoken(SENTENCE, lead_silence=0.5, trail_silence=0.5)
    return frame


@voice_model
def test_contract(silero_vad: SileroVAD) -> None:
    assert isinstance(silero_vad, VAD)
    assert (silero_vad.sample_rate, silero_vad.window_samples) == (16000, 512)
    assert isinstance(silero_vad.stream(), VADStream)


@voice_model
def test_load_shares_one_model(silero_vad: SileroVAD) -> None:
    from llmrtc.voice.providers.silero import SileroVAD

    again = SileroVAD.load()
    assert again is silero_vad
    # Streams are distinct states over the same loaded session.
    a, b = again.stream(), again.stream()
    assert a is not b
    assert a._session is b._session is silero_vad._session


@voice_model
def test_speech_is_detected_and_silence_is_not(silero_vad: SileroVAD, speech: AudioFrame) -> None:
    p = probabilities(silero_vad.stream(), speech.pcm)
    # 0.5 s of lead silence = 15 whole windows; the same at the end.
    lead, body, trail = p[:15], p[15:-16], p[-10:]
    assert max(lead) < 0.1, lead
    assert max(trail) < 0.1, trail
    voiced = sum(x > 0.5 for x in body) / len(body)
    assert voiced > 0.8, (voiced, body)


@voice_model
def test_noise_is_not_speech(silero_vad: SileroVAD) -> None:
    for level in (0.01, 0.1):
        p = probabilities(silero_vad.stream(), white_noise(2.0, level))
        assert max(p) < 0.5, (level, max(p))


@voice_model
def test_speech_in_noise_is_detected(silero_vad: SileroVAD, speech: AudioFrame) -> None:
    import numpy as np

    clean = np.frombuffer(speech.pcm, dtype="<i2").astype(np.int32)
    noise = np.frombuffer(white_noise(speech.duration, 0.01, seed=1), dtype="<i2")
    mixed = np.clip(clean + noise[: len(clean)], -32768, 32767).astype("<i2").tobytes()
    p = probabilities(silero_vad.stream(), mixed)
    assert sum(x > 0.5 for x in p[15:-16]) / len(p[15:-16]) > 0.7


@voice_model
def test_streams_keep_their_own_state(silero_vad: SileroVAD, speech: AudioFrame) -> None:
    alone = probabilities(silero_vad.stream(), speech.pcm)
    a, b = silero_vad.stream(), silero_vad.stream()
    noise = windows(white_noise(speech.duration, 0.05))
    interleaved = []
    for window, other in zip(windows(speech.pcm), noise, strict=False):
        interleaved.append(a.speech_probability(window))
        b.speech_probability(other)
    assert interleaved == pytest.approx(alone, abs=1e-5)


@voice_model
def test_reset_forgets_the_state(silero_vad: SileroVAD, speech: AudioFrame) -> None:
    fresh = probabilities(silero_vad.stream(), speech.pcm)
    stream = silero_vad.stream()
    probabilities(stream, white_noise(1.0, 0.1))
    probabilities(stream, speech.pcm[: len(speech.pcm) // 2])
    stream.reset()
    assert probabilities(stream, speech.pcm) == pytest.approx(fresh, abs=1e-5)


@voice_model
def test_streams_in_threads_match_one_by_one(silero_vad: SileroVAD, speech: AudioFrame) -> None:
    expected = probabilities(silero_vad.stream(), speech.pcm)
    results: list[list[float]] = [[] for _ in range(4)]

    def run(i: int) -> None:
        results[i] = probabilities(silero_vad.stream(), speech.pcm)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for got in results:
        assert got == pytest.approx(expected, abs=1e-5)


@voice_model
def test_wrong_window_size_is_a_clear_error(silero_vad: SileroVAD) -> None:
    stream = silero_vad.stream()
    for bad in (b"", bytes(1022), bytes(1025), bytes(2048)):
        with pytest.raises(ValueError, match="512 mono s16le samples"):
            stream.speech_probability(bad)


def test_missing_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmrtc.voice.providers import silero
    from llmrtc.voice.providers._whisper_model import VoiceModelError

    monkeypatch.setattr(silero, "_PACKAGE", "llmrtc-no-such-silero-package")
    with pytest.raises(VoiceModelError, match=r'pip install "llmrtc\[voice\]"'):
        silero._model_path()
