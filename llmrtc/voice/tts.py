"""`TTS`: text to speech, one small interface that streams."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from llmrtc.errors import LLMRTCError

__all__ = ["TTS", "TTSError"]


class TTSError(LLMRTCError, RuntimeError):
    """Text-to-speech failed for a piece of text (never spoken: for developers and logs)."""


@runtime_checkable
class TTS(Protocol):
    """Speaks a piece of text (a sentence) as a stream of audio chunks.

    Synthesis never runs on the event loop thread (a subprocess or worker thread does it).
    Closing the iterator early (barge-in) stops the synthesis of that text.

    Example:
        async with aclosing(tts.synthesize("Hello there.")) as chunks:
            async for pcm in chunks:       # mono s16le at tts.sample_rate
                playout.add(pcm)
    """

    @property
    def sample_rate(self) -> int:
        """The rate of the audio `synthesize` yields."""
        ...

    @property
    def name(self) -> str:
        """The engine and voice, e.g. `piper/joe-us` (reported in hooks and spans)."""
        ...

    def synthesize(self, text: str) -> AsyncIterator[bytes]:
        """Stream `text` as mono s16le chunks at `sample_rate` (each a whole number of
        samples), first chunk as soon as it exists.

        Raises:
            TTSError: the engine failed (raised from the iteration).
        """
        ...
