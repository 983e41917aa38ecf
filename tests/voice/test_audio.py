"""Resampling, channel mixing and chunking (llmrtc.voice.audio) on real signals."""

from __future__ import annotations

import pytest

from tests._requirements import require

# PyAV and numpy come with the audio extra.
require("audio")
import numpy as np

from llmrtc.voice.audio import (
    PCMChunker,
    Resampler,
    mix_to_mono,
    resample,
    rms,
    split_frames,
)
from llmrtc.voice.frames import AudioFrame


def tone(freq: float, rate: int, seconds: float = 1.0, amplitude: float = 10000.0) -> bytes:
    t = np.arange(round(rate * seconds)) / rate
    return (np.sin(2 * np.pi * freq * t) * amplitude).astype("<i2").tobytes()


def samples(pcm: bytes) -> np.ndarray:
    return np.frombuffer(pcm, dtype="<i2").astype(np.float64)


def peak_frequency(pcm: bytes, rate: int) -> float:
    x = samples(pcm)
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[int(np.argmax(spectrum))])


def stereo(left: bytes, right: bytes) -> bytes:
    out = np.empty(len(left), dtype="<i2")
    out[0::2] = np.frombuffer(left, dtype="<i2")
    out[1::2] = np.frombuffer(right, dtype="<i2")
    return out.tobytes()


@pytest.mark.parametrize(
    ("from_rate", "to_rate"),
    [(48000, 16000), (16000, 48000), (22050, 48000), (44100, 16000), (24000, 48000), (8000, 16000)],
)
def test_resample_keeps_pitch_level_and_length(from_rate: int, to_rate: int) -> None:
    out = resample(tone(440, from_rate), from_rate, to_rate)
    assert abs(len(out) // 2 - to_rate) <= 2  # one second in, one second out
    assert abs(peak_frequency(out, to_rate) - 440) < 3
    # Level kept: a sine of amplitude A has RMS A/sqrt(2).
    assert rms(out) == pytest.approx(10000 / np.sqrt(2), rel=0.02)


def test_resample_filters_what_the_new_rate_cannot_carry() -> None:
    # 12 kHz cannot exist at 16 kHz: a real resampler removes it instead of aliasing it to 4 kHz.
    out = resample(tone(12000, 48000), 48000, 16000)
    assert rms(out) < 10000 / np.sqrt(2) / 100  # more than 40 dB down


def test_streamed_20ms_frames_equal_the_one_shot_result() -> None:
    pcm = tone(300, 48000) + tone(1000, 48000)
    stream = Resampler(16000)
    pieces = [stream.convert(frame) for frame in split_frames(pcm, 48000)]
    pieces.append(stream.flush())
    streamed = b"".join(pieces)
    whole = resample(pcm, 48000, 16000)
    assert len(streamed) == len(whole)
    assert np.max(np.abs(samples(streamed) - samples(whole))) <= 1
    # Steady output: every 20 ms in gives (about) 20 ms out, nothing held back for long.
    assert all(abs(len(p) // 2 - 320) <= 20 for p in pieces[1:-1])


def test_stream_has_no_seams_between_frames() -> None:
    # Resampling frame by frame without state makes a click at every boundary; with state the
    # signal stays as smooth as the tone itself.
    streamed = Resampler(16000)
    out = b"".join(streamed.convert(f) for f in split_frames(tone(200, 48000), 48000))
    jumps = np.abs(np.diff(samples(out)))
    assert jumps.max() < 2 * np.pi * 200 / 16000 * 10000 * 1.1


def test_stereo_is_mixed_to_the_mean_of_its_channels() -> None:
    left = tone(440, 48000, 0.2)
    silent = bytes(len(left))
    both = resample(stereo(left, left), 48000, 16000, channels=2)
    one = resample(stereo(left, silent), 48000, 16000, channels=2)
    assert rms(both) == pytest.approx(10000 / np.sqrt(2), rel=0.02)
    assert rms(one) == pytest.approx(rms(both) / 2, rel=0.02)


def test_stereo_at_the_same_rate_is_only_mixed() -> None:
    left = tone(440, 16000, 0.1)
    out = Resampler(16000).convert(AudioFrame(stereo(left, left), 16000, 2))
    assert abs(len(out) - len(left)) <= 64


def test_more_channels_are_averaged() -> None:
    a, b = tone(440, 16000, 0.1), bytes(3200)
    four = np.stack([samples(x) for x in (a, a, b, b)], axis=1).astype("<i2").tobytes()
    assert mix_to_mono(four, 4) == (samples(a) // 2).astype("<i2").tobytes()
    out = resample(four, 16000, 48000, channels=4)
    assert rms(out) == pytest.approx(rms(a) / 2, rel=0.02)


def test_mono_at_the_target_rate_passes_through_untouched() -> None:
    pcm = tone(440, 16000, 0.02)
    resampler = Resampler(16000)
    assert resampler.convert(AudioFrame(pcm, 16000)) == pcm
    assert resampler.flush() == b""


def test_input_format_may_change_mid_stream() -> None:
    resampler = Resampler(16000)
    parts = [
        AudioFrame(stereo(tone(440, 48000, 0.5), tone(440, 48000, 0.5)), 48000, 2),
        AudioFrame(tone(440, 22050, 0.5), 22050),
        AudioFrame(tone(440, 16000, 0.5), 16000),
        AudioFrame(tone(440, 44100, 0.5), 44100),
    ]
    out = b"".join(resampler.convert(p) for p in parts) + resampler.flush()
    # Two seconds of input in four formats: two seconds out (each switch flushed the old tail).
    assert abs(len(out) // 2 - 32000) <= 8
    assert abs(peak_frequency(out, 16000) - 440) < 3


def test_flush_returns_the_tail_and_starts_afresh() -> None:
    resampler = Resampler(16000)
    head = resampler.convert(AudioFrame(tone(440, 48000, 0.02), 48000))
    tail = resampler.flush()
    assert len(head) + len(tail) == 640  # 20 ms at 16 kHz, exactly
    assert tail
    assert resampler.flush() == b""
    again = resampler.convert(AudioFrame(tone(440, 48000, 0.02), 48000)) + resampler.flush()
    assert len(again) == 640


def test_resample_edge_cases_and_errors() -> None:
    assert resample(b"", 48000, 16000) == b""
    with pytest.raises(ValueError, match="from_rate"):
        resample(b"\0\0", 0, 16000)
    with pytest.raises(ValueError, match="to_rate"):
        resample(b"\0\0", 16000, -1)
    with pytest.raises(ValueError, match="channels"):
        resample(b"\0\0", 16000, 8000, channels=0)
    with pytest.raises(ValueError, match="rate"):
        Resampler(0)
    with pytest.raises(TypeError, match="AudioFrame"):
        Resampler(16000).convert(b"\0\0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="whole s16 frames"):
        mix_to_mono(b"\0\0\0\0\0\0", 2)
    assert Resampler(24000).rate == 24000


def test_split_frames_pads_the_last_frame() -> None:
    pcm = bytes(range(256)) * 6  # 1536 bytes = 768 samples at 16 kHz
    frames = split_frames(pcm, 16000)
    assert [f.samples for f in frames] == [320, 320, 320]
    assert b"".join(f.pcm for f in frames)[: len(pcm)] == pcm
    assert frames[-1].pcm[len(pcm) - 1280 :] == bytes(1920 - len(pcm))
    assert all(f.sample_rate == 16000 and f.channels == 1 for f in frames)
    assert [f.samples for f in split_frames(bytes(4800), 48000, duration=0.01)] == [480] * 5
    assert split_frames(b"", 16000) == []


def test_split_frames_errors() -> None:
    with pytest.raises(ValueError, match="even"):
        split_frames(b"\0", 16000)
    with pytest.raises(ValueError, match="duration"):
        split_frames(b"\0\0", 16000, duration=0)
    with pytest.raises(ValueError, match="one sample"):
        split_frames(b"\0\0", 16000, duration=1e-6)
    with pytest.raises(ValueError, match="sample_rate"):
        split_frames(b"\0\0", 0)


def test_chunker_recuts_any_lengths_into_exact_chunks() -> None:
    chunker = PCMChunker(1024)
    data = bytes(range(256)) * 20
    out: list[bytes] = []
    for size in (10, 1000, 2, 3000, 988):
        piece, data = data[:size], data[size:]
        out += chunker.push(piece)
    assert [len(c) for c in out] == [1024] * 4
    assert b"".join(out) == (bytes(range(256)) * 20)[:4096]
    assert chunker.pending == 5000 - 4096
    tail = chunker.flush()
    assert len(tail) == 1024 and tail.endswith(bytes(1024 - 904))
    assert chunker.pending == 0 and chunker.flush() == b""
    chunker.push(b"\1\1")
    assert chunker.flush(pad=False) == b"\1\1"
    chunker.push(b"\1\1")
    chunker.clear()
    assert chunker.pending == 0 and chunker.size == 1024
    with pytest.raises(ValueError, match="even"):
        PCMChunker(3)


def test_rms() -> None:
    assert rms(b"") == 0.0
    assert rms(bytes(640)) == 0.0
    assert rms(np.full(100, -1000, dtype="<i2").tobytes()) == pytest.approx(1000)
    with pytest.raises(ValueError, match="even"):
        rms(b"\0")
