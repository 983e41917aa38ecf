"""Reading and writing 16-bit PCM WAV files as `AudioFrame`s (stdlib `wave`, no numpy)."""

from __future__ import annotations

import io
import os
import wave
from collections.abc import Iterable
from pathlib import Path

from llmrtc.voice.frames import AudioFrame

__all__ = ["read_wav", "write_wav"]

_STREAMED_SIZE = 0x7FFF0000
"""A data size this large is a streaming writer's placeholder, not a real length."""


def read_wav(source: str | os.PathLike[str] | bytes) -> AudioFrame:
    """The whole audio of a 16-bit PCM WAV file, as one frame (any rate, any channels).

    Args:
        source: A path, or the file's bytes.

    Raises:
        FileNotFoundError: the path does not exist.
        ValueError: not a WAV file, not 16-bit PCM (e.g. float, 8-bit, 24-bit or compressed),
            a header with a sample rate or channel count of 0, truncated, or holding no
            samples; the message names the file and what is allowed.
            (A size left as a placeholder by a writer streaming to a pipe is not an error:
            the data is read to its end.)
    """
    if isinstance(source, bytes | bytearray):
        name, stream = "WAV bytes", io.BytesIO(source)
    else:
        name = os.fspath(source)
        stream = io.BytesIO(Path(name).read_bytes())
    try:
        with wave.open(stream, "rb") as wav:
            width, rate, channels = wav.getsampwidth(), wav.getframerate(), wav.getnchannels()
            frames = wav.getnframes()
            pcm = wav.readframes(frames)
    except (wave.Error, EOFError) as error:
        raise ValueError(
            f"{name}: not a readable PCM WAV file ({error}); llmrtc reads 16-bit PCM WAV only"
        ) from error
    if width != 2:
        raise ValueError(
            f"{name}: {8 * width}-bit samples; llmrtc reads 16-bit PCM WAV only "
            "(convert with e.g. `ffmpeg -i in.wav -c:a pcm_s16le out.wav`)"
        )
    # A hand-made or corrupt header can say 0 Hz or 0 channels (`wave` accepts both); say so
    # here, naming the file, rather than let AudioFrame refuse it without saying where from.
    if rate <= 0 or channels <= 0:
        raise ValueError(
            f"{name}: the header says {rate} Hz and {channels} channel(s); a WAV file needs a "
            "sample rate > 0 and at least 1 channel"
        )
    whole = len(pcm) - len(pcm) % (2 * channels)
    # Writers that stream to a pipe (espeak-ng --stdout, ffmpeg to "-") cannot go back to fill
    # in the sizes and leave a placeholder near 2 GiB: read such data to its end. Any other
    # shortfall is a file cut short.
    streamed = 2 * channels * frames >= _STREAMED_SIZE
    if whole < 2 * channels * frames and not streamed:
        raise ValueError(
            f"{name}: truncated: the header promises {frames} samples per channel, the file "
            f"holds {whole // (2 * channels)}"
        )
    if not whole:
        raise ValueError(f"{name}: holds no audio samples")
    return AudioFrame(pcm[:whole], rate, channels)


def write_wav(path: str | os.PathLike[str], audio: AudioFrame | Iterable[AudioFrame]) -> None:
    """Write `audio` (one frame, or frames in order) as a 16-bit PCM WAV file.

    The file is written to a temporary name and moved into place, so a failure leaves no
    half-written WAV behind.

    Raises:
        ValueError: there are no frames, a frame is not an `AudioFrame`, or the frames differ
            in sample rate or channel count (resample them first: `llmrtc.voice.audio`).
    """
    frames = [audio] if isinstance(audio, AudioFrame) else list(audio)
    if not frames:
        raise ValueError(f"write_wav({os.fspath(path)!r}): no audio frames to write")
    first = frames[0]
    for index, frame in enumerate(frames):
        if not isinstance(frame, AudioFrame):
            raise ValueError(
                f"write_wav: item {index} is {type(frame).__name__}, not an AudioFrame"
            )
        if (frame.sample_rate, frame.channels) != (first.sample_rate, first.channels):
            raise ValueError(
                f"write_wav: frame {index} is {frame.sample_rate} Hz / {frame.channels} ch but "
                f"frame 0 is {first.sample_rate} Hz / {first.channels} ch; one file has one "
                "format (resample with llmrtc.voice.audio.Resampler first)"
            )
    target = Path(path)
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with wave.open(str(temporary), "wb") as wav:
            wav.setnchannels(first.channels)
            wav.setsampwidth(2)
            wav.setframerate(first.sample_rate)
            for frame in frames:
                wav.writeframesraw(frame.pcm)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
