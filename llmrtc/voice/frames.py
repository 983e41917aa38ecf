"""`AudioFrame`: a piece of PCM audio, the unit everything in `llmrtc.voice` passes around."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FRAME_DURATION", "AudioFrame"]

FRAME_DURATION = 0.02
"""Seconds per outbound frame: WebRTC (Opus) sends one 20 ms frame every 20 ms."""


@dataclass(frozen=True, slots=True)
class AudioFrame:
    """PCM audio: signed 16-bit little-endian samples, interleaved when `channels > 1`.

    Any rate, channel count and length is accepted where audio goes in; the loop resamples.

    Example:
        frame = AudioFrame(pcm, sample_rate=16000)        # 320 samples = 640 bytes = 20 ms
        frame.samples, frame.duration                     # (320, 0.02)

    Raises:
        ValueError: `pcm` is not bytes, is empty, or its length is not a whole number of
            samples (2 bytes times `channels`); `sample_rate` or `channels` is not a positive int.
    """

    pcm: bytes
    """The samples: s16le, interleaved by channel."""
    sample_rate: int
    """Samples per second per channel, e.g. 16000 or 48000."""
    channels: int = 1
    """1 (mono) or more, interleaved."""

    def __post_init__(self) -> None:
        pcm = self.pcm
        if isinstance(pcm, bytearray | memoryview):
            object.__setattr__(self, "pcm", bytes(pcm))
        elif not isinstance(pcm, bytes):
            raise ValueError(f"AudioFrame.pcm must be bytes (s16le PCM), got {type(pcm).__name__}")
        for name in ("sample_rate", "channels"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"AudioFrame.{name} must be a positive int, got {value!r}")
        width = 2 * self.channels
        if not self.pcm:
            raise ValueError("AudioFrame.pcm is empty: a frame holds at least one sample")
        if len(self.pcm) % width:
            raise ValueError(
                f"AudioFrame.pcm has {len(self.pcm)} bytes, not a whole number of s16 samples "
                f"for {self.channels} channel(s) (a multiple of {width} bytes)"
            )

    @property
    def samples(self) -> int:
        """Samples per channel."""
        return len(self.pcm) // (2 * self.channels)

    @property
    def duration(self) -> float:
        """Seconds of audio."""
        return self.samples / self.sample_rate

    @classmethod
    def silence(cls, duration: float, sample_rate: int, channels: int = 1) -> AudioFrame:
        """A frame of `duration` seconds of digital silence (at least one sample)."""
        samples = max(1, round(duration * sample_rate))
        return cls(bytes(2 * samples * channels), sample_rate, channels)

    def __repr__(self) -> str:
        return (
            f"AudioFrame({self.samples} samples, {self.sample_rate} Hz, "
            f"{self.channels} ch, {self.duration * 1000:.1f} ms)"
        )
