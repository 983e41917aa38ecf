"""`VAD`: voice activity detection, one small interface (the loop does the endpointing)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["VAD", "VADStream"]


@runtime_checkable
class VADStream(Protocol):
    """One audio stream's detector state (a session's microphone). Not shared across streams."""

    def speech_probability(self, window: bytes) -> float:
        """The probability (0..1) that `window` holds speech.

        `window` is exactly `VAD.window_samples` mono s16le samples at `VAD.sample_rate`,
        consecutive windows of one stream in order. Cheap (well under a millisecond): it runs
        on the event loop, once per window.
        """
        ...

    def reset(self) -> None:
        """Forget the stream's state (e.g. after a long gap in the audio)."""
        ...


@runtime_checkable
class VAD(Protocol):
    """A voice activity detector; `stream()` gives each audio stream its own state.

    Example:
        stream = vad.stream()
        p = stream.speech_probability(window)   # window: vad.window_samples samples
    """

    @property
    def sample_rate(self) -> int:
        """The rate windows must have (Silero: 16000)."""
        ...

    @property
    def window_samples(self) -> int:
        """Samples per window (Silero at 16 kHz: 512, i.e. 32 ms)."""
        ...

    def stream(self) -> VADStream:
        """A fresh detector state for one stream."""
        ...
