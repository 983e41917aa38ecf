"""read_wav / write_wav: 16-bit PCM WAV files in and out, with clear errors for the rest."""

from __future__ import annotations

import io
import struct
import subprocess
import wave
from pathlib import Path

import pytest

from llmrtc.voice.audio import split_frames
from llmrtc.voice.frames import AudioFrame
from llmrtc.voice.wav import read_wav, write_wav


def wav_bytes(pcm: bytes, rate: int, channels: int, width: int = 2) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(channels)
        wav.setsampwidth(width)
        wav.setframerate(rate)
        wav.writeframes(pcm)
    return buffer.getvalue()


def test_round_trip_keeps_samples_rate_and_channels(tmp_path: Path) -> None:
    pcm = bytes(range(256)) * 30
    for rate, channels in ((16000, 1), (44100, 2), (8000, 4)):
        path = tmp_path / f"a{rate}.wav"
        write_wav(path, AudioFrame(pcm, rate, channels))
        frame = read_wav(path)
        assert (frame.pcm, frame.sample_rate, frame.channels) == (pcm, rate, channels)
        assert read_wav(path.read_bytes()) == frame
        assert read_wav(str(path)) == frame


def test_frames_are_written_in_order(tmp_path: Path) -> None:
    pcm = bytes(range(256)) * 10
    path = tmp_path / "frames.wav"
    write_wav(path, iter(split_frames(pcm, 16000)))
    assert read_wav(path).pcm[: len(pcm)] == pcm
    assert read_wav(path).samples == 1280  # four 20 ms frames, the last zero-padded


def test_write_refuses_mixed_formats_and_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "mixed.wav"
    with pytest.raises(ValueError, match="frame 1 is 48000 Hz / 1 ch but frame 0 is 16000 Hz"):
        write_wav(path, [AudioFrame.silence(0.02, 16000), AudioFrame.silence(0.02, 48000)])
    with pytest.raises(ValueError, match="frame 1 is 16000 Hz / 2 ch"):
        write_wav(path, [AudioFrame.silence(0.02, 16000), AudioFrame.silence(0.02, 16000, 2)])
    with pytest.raises(ValueError, match="no audio frames"):
        write_wav(path, [])
    with pytest.raises(ValueError, match="not an AudioFrame"):
        write_wav(path, [b"\0\0"])  # type: ignore[list-item]
    assert list(tmp_path.iterdir()) == []


def test_read_refuses_what_is_not_pcm16(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="8-bit samples; llmrtc reads 16-bit PCM WAV only"):
        read_wav(wav_bytes(bytes(100), 8000, 1, width=1))
    with pytest.raises(ValueError, match="24-bit"):
        read_wav(wav_bytes(bytes(300), 8000, 1, width=3))
    # IEEE float WAV (format tag 3), written by hand: `wave` cannot write it.
    data = struct.pack("<4f", 0.0, 0.5, -0.5, 0.0)
    fmt = struct.pack("<HHIIHH", 3, 1, 16000, 64000, 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
    body += b"data" + struct.pack("<I", len(data)) + data
    float_wav = b"RIFF" + struct.pack("<I", len(body)) + body
    with pytest.raises(ValueError, match="not a readable PCM WAV"):
        read_wav(float_wav)
    with pytest.raises(ValueError, match="WAV bytes: not a readable PCM WAV"):
        read_wav(b"ID3 this is an mp3")
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    with pytest.raises(ValueError, match=r"notes\.txt: not a readable PCM WAV"):
        read_wav(bad)
    with pytest.raises(FileNotFoundError):
        read_wav(tmp_path / "missing.wav")


def test_read_refuses_truncated_and_empty_files() -> None:
    whole = wav_bytes(bytes(3200), 16000, 1)
    with pytest.raises(ValueError, match="truncated: the header promises 1600 samples"):
        read_wav(whole[:-1000])
    with pytest.raises(ValueError, match="no audio samples"):
        read_wav(wav_bytes(b"", 16000, 1))


def test_read_refuses_a_header_of_zero_hz_or_zero_channels_naming_the_file(tmp_path: Path) -> None:
    def header(rate: int, channels: int) -> bytes:
        data = bytes(8)
        fmt = struct.pack("<HHIIHH", 1, channels, rate, rate * 2 * channels, 2 * channels, 16)
        body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt
        body += b"data" + struct.pack("<I", len(data)) + data
        return b"RIFF" + struct.pack("<I", len(body)) + body

    path = tmp_path / "zero_rate.wav"
    path.write_bytes(header(0, 1))
    with pytest.raises(
        ValueError, match=r"zero_rate\.wav: the header says 0 Hz .* sample rate > 0"
    ):
        read_wav(path)
    with pytest.raises(ValueError, match=r"WAV bytes: .*0 Hz"):
        read_wav(header(0, 1))
    # `wave` itself refuses 0 channels; the message still names the file.
    path.write_bytes(header(16000, 0))
    with pytest.raises(ValueError, match=r"zero_rate\.wav: "):
        read_wav(path)


@pytest.mark.requires("espeak")
def test_reads_what_espeak_writes_to_a_file_and_to_a_pipe(tmp_path: Path) -> None:
    path = tmp_path / "hello.wav"
    subprocess.run(["espeak-ng", "-w", str(path), "Hello there."], check=True, timeout=60)
    frame = read_wav(path)
    assert frame.channels == 1 and frame.sample_rate == 22050
    assert 0.4 < frame.duration < 3.0
    # To a pipe, espeak-ng cannot seek back and leaves a placeholder size (~2 GiB).
    piped = subprocess.run(
        ["espeak-ng", "--stdout", "Hello there."], capture_output=True, check=True, timeout=60
    ).stdout
    assert struct.unpack("<I", piped[40:44])[0] >= 0x7FFF0000
    assert read_wav(piped) == frame
