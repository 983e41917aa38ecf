"""`STT`: speech to text, one small interface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol, runtime_checkable

from llmrtc.errors import LLMRTCError

__all__ = ["STT", "STTError", "hints_prompt"]


class STTError(LLMRTCError, RuntimeError):
    """Speech-to-text failed for an utterance (the engine, its server, or bad audio).

    The message is for developers and logs; it is never spoken.
    """


@runtime_checkable
class STT(Protocol):
    """Transcribes one finished utterance.

    Engines that load a model share it across sessions and run inference off the event loop
    on a bounded worker pool (`transcribe` awaits a free worker).

    Hints: the voice loop passes what the conversation expects to hear (the current stage's
    tool words, enum values, examples and keywords: `HintingHandler.speech_hints()`) as
    `hints`. An engine that can bias its decoding with them does (OpenAI's `prompt`
    parameter); one that cannot, or where they measured no better (`WhisperSTT`: Whisper base's
    prompt raised WER), ignores them. Hints never add words the audio lacks. An engine whose
    `transcribe` has no `hints` parameter still works: the loop then never passes them.

    Example:
        text = await stt.transcribe(pcm16k, hints=["weather", "Celsius", "Tokyo"])
    """

    @property
    def sample_rate(self) -> int:
        """The rate `transcribe` expects (16000 for Whisper)."""
        ...

    @property
    def name(self) -> str:
        """The engine and model, e.g. `faster-whisper/base` (reported in hooks and spans)."""
        ...

    async def transcribe(self, pcm: bytes, *, hints: Sequence[str] = ()) -> str:
        """The final transcript of `pcm` (mono s16le at `sample_rate`); `""` for no speech.

        `hints` are words and short phrases the user is likely to say now (may be ignored).

        Raises:
            STTError: the engine failed (the loop apologises and serves the next turn).
        """
        ...


_PROMPT_CHARS: Final = 300
"""The longest prompt built from hints. Whisper reads at most 223 prompt tokens (faster-whisper
keeps the last ones); ~300 characters is ~70 tokens, enough for a stage's words, and a long
prompt costs decoding time on every utterance."""


def hints_prompt(hints: Sequence[str]) -> str | None:
    """A Whisper-style text prompt for `hints` (faster-whisper's `initial_prompt`, OpenAI's
    transcription `prompt`): the distinct hints (case-insensitive, first kept) in
    order, as a comma-separated list, cut at whole hints to about 300 characters; None for no
    hints.

    Raises:
        TypeError: `hints` is a plain string (one string is not a sequence of hints) or holds
            something else than strings.
    """
    if isinstance(hints, str | bytes):
        raise TypeError(
            f"hints must be a sequence of words or phrases, got one string {hints!r}; "
            "pass [hint] for a single hint"
        )
    seen: set[str] = set()
    kept: list[str] = []
    size = 0
    for hint in hints:
        if not isinstance(hint, str):
            raise TypeError(f"hints must be strings, got {type(hint).__name__}: {hint!r}")
        text = " ".join(hint.split())
        if not text or text.casefold() in seen:
            continue
        if size + len(text) + 2 > _PROMPT_CHARS:
            break
        seen.add(text.casefold())
        kept.append(text)
        size += len(text) + 2
    # A list that reads as text ("Weather, Celsius, Tokyo.") primes the words without teaching
    # the decoder a style (no quotes or brackets that could be copied into the transcript).
    return ", ".join(kept) + "." if kept else None
