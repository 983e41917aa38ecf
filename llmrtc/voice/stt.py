"""`STT`: speech to text, one small interface."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from llmrtc.errors import LLMRTCError

__all__ = ["STT", "STTError"]


class STTError(LLMRTCError, RuntimeError):
    """Speech-to-text failed for an utterance (the engine, its server, or bad audio).

    The message is for developers and logs; it is never spoken.
    """


@runtime_checkable
class STT(Protocol):
    """Transcribes one finished utterance.

    Engines that load a model share it across sessions and run inference off the event loop
    on a bounded worker pool (`transcribe` awaits a free worker).

    Example:
        text = await stt.transcribe(pcm16k)
    """

    @property
    def sample_rate(self) -> int:
        """The rate `transcribe` expects (16000 for Whisper)."""
        ...

    @property
    def name(self) -> str:
        """The engine and model, e.g. `faster-whisper/base` (reported in hooks and spans)."""
        ...

    async def transcribe(self, pcm: bytes) -> str:
        """The final transcript of `pcm` (mono s16le at `sample_rate`); `""` for no speech.

        Raises:
            STTError: the engine failed (the loop apologises and serves the next turn).
        """
        ...
