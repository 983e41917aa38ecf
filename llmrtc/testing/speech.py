"""Fake speech engines for fast, exact tests of voice logic: `FakeVAD`, `FakeSTT`, `FakeTTS`.

`FakeTTS` speaks each word as a pure tone of its own frequency, one `seconds_per_char` per
character (spaces are silence), so the duration of every word is known exactly and "what
was heard" can be asserted to the word. `FakeSTT(tts=fake_tts)` decodes that audio back into
the words (by counting zero crossings of each tone burst), so a test can "say" a sentence to a
`VoiceLoop` by pushing `FakeTTS` audio into it. `FakeVAD` calls any loud window speech.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import AsyncIterator, Sequence

import anyio

from llmrtc.voice.stt import STTError
from llmrtc.voice.tts import TTSError

__all__ = ["FakeSTT", "FakeTTS", "FakeVAD"]

_AMPLITUDE = 8000
_BASE_HZ = 300.0
_STEP_HZ = 40.0
_MAX_HZ = 6000.0  # well under the Nyquist frequency of 16 kHz audio
_CHUNK_SECONDS = 0.1


def _samples(pcm: bytes) -> array[int]:
    values = array("h")
    values.frombytes(pcm)
    return values


class _FakeVADStream:
    def __init__(self, vad: FakeVAD) -> None:
        self._vad = vad

    def speech_probability(self, window: bytes) -> float:
        values = _samples(window)
        if not values:
            return 0.0
        level = math.sqrt(sum(v * v for v in values) / len(values))
        return 1.0 if level >= self._vad.threshold else 0.0

    def reset(self) -> None:
        """Nothing to forget: every window is judged alone."""


class FakeVAD:
    """Energy VAD: a window is speech (probability 1.0) when its RMS level reaches `threshold`,
    else silence (0.0). Deterministic, no model.

    Example:
        loop = VoiceLoop(handler, stt=FakeSTT(["hi"]), tts=FakeTTS(), vad=FakeVAD())
    """

    def __init__(
        self, *, threshold: float = 500.0, sample_rate: int = 16000, window_samples: int = 512
    ) -> None:
        """Args:
        threshold: RMS level (s16 sample units) from which a window is speech.
        sample_rate: The rate windows come at.
        window_samples: Samples per window.
        """
        self.threshold = threshold
        self._sample_rate = sample_rate
        self._window_samples = window_samples

    @property
    def sample_rate(self) -> int:
        """The rate windows must have."""
        return self._sample_rate

    @property
    def window_samples(self) -> int:
        """Samples per window."""
        return self._window_samples

    def stream(self) -> _FakeVADStream:
        """A detector for one stream (stateless)."""
        return _FakeVADStream(self)


class FakeTTS:
    """Deterministic speech: every word a tone of its own frequency, `seconds_per_char` per
    character (a space is that much silence). The text `"Hi there."` lasts 9 * 0.05 s.

    Example:
        tts = FakeTTS()
        tts.fail_next()                 # the next synthesize() raises TTSError
        ...
        assert tts.spoken == ["Hello there."]
    """

    name = "fake-tts"

    def __init__(
        self, *, sample_rate: int = 24000, seconds_per_char: float = 0.05, delay: float = 0.0
    ) -> None:
        """Args:
        sample_rate: The rate of the audio it yields.
        seconds_per_char: Audio per character of the text.
        delay: Seconds of "synthesis" before each 0.1 s chunk (a slow engine).
        """
        self._sample_rate = sample_rate
        self.seconds_per_char = seconds_per_char
        self.delay = delay
        self.spoken: list[str] = []
        """Every text synthesised (or started), in order."""
        self._failures = 0
        self._vocabulary: dict[str, int] = {}

    @property
    def sample_rate(self) -> int:
        """The rate of the audio `synthesize` yields."""
        return self._sample_rate

    def fail_next(self, count: int = 1) -> None:
        """Make the next `count` calls of `synthesize` raise `TTSError` (before any audio)."""
        self._failures += count

    def frequency(self, word: str) -> float:
        """The tone `word` is spoken with (a new word gets the next free frequency)."""
        index = self._vocabulary.setdefault(word, len(self._vocabulary))
        frequency = _BASE_HZ + _STEP_HZ * index
        if frequency > _MAX_HZ:
            raise ValueError("FakeTTS knows too many words; use a new FakeTTS per test")
        return frequency

    def word_at(self, frequency: float) -> str | None:
        """The word spoken at `frequency` (within half a step), if any."""
        index = round((frequency - _BASE_HZ) / _STEP_HZ)
        for word, known in self._vocabulary.items():
            if known == index and abs(frequency - (_BASE_HZ + _STEP_HZ * index)) < _STEP_HZ / 2:
                return word
        return None

    def render(self, text: str) -> bytes:
        """All of `text`'s audio at once (mono s16le at `sample_rate`)."""
        rate = self._sample_rate
        per_char = round(self.seconds_per_char * rate)
        out = array("h")
        for piece in re.split(r"(\s+)", text):
            if not piece:
                continue
            length = per_char * len(piece)
            if piece.isspace():
                out.extend(array("h", bytes(2 * length)))
                continue
            step = 2 * math.pi * self.frequency(piece) / rate
            ramp = max(1, min(length // 4, rate // 200))  # 5 ms fades: no clicks
            for i in range(length):
                gain = min(1.0, (i + 1) / ramp, (length - i) / ramp)
                out.append(int(_AMPLITUDE * gain * math.sin(step * i)))
        return out.tobytes()

    async def synthesize(self, text: str) -> AsyncIterator[bytes]:
        """Stream `text`'s audio in 0.1 s chunks.

        Raises:
            TTSError: when `fail_next` asked for it.
        """
        self.spoken.append(text)
        if self._failures:
            self._failures -= 1
            raise TTSError(f"FakeTTS: scripted failure for {text!r}")
        pcm = self.render(text)
        size = 2 * round(_CHUNK_SECONDS * self._sample_rate)
        for start in range(0, len(pcm), size):
            await anyio.sleep(self.delay)
            yield pcm[start : start + size]


class FakeSTT:
    """Scripted transcripts, or the words `FakeTTS` audio holds.

    Each `transcribe` returns the next entry of `transcripts` (an exception entry is raised
    instead); once they are used up, with `tts` given, it decodes `FakeTTS` tones back into
    words; without it, it fails loudly.

    Example:
        stt = FakeSTT(["What's the weather?", STTError("engine crashed")])
        stt = FakeSTT(tts=tts)         # "hears" what FakeTTS said
    """

    name = "fake-stt"

    def __init__(
        self,
        transcripts: Sequence[str | BaseException] = (),
        *,
        tts: FakeTTS | None = None,
        sample_rate: int = 16000,
    ) -> None:
        """Args:
        transcripts: Answers in order (an exception is raised when its turn comes).
        tts: Decode this `FakeTTS`'s tones once the transcripts are used up.
        sample_rate: The rate `transcribe` expects.
        """
        self._script = list(transcripts)
        self._tts = tts
        self._sample_rate = sample_rate
        self.utterances: list[bytes] = []
        """The audio of every `transcribe` call, in order."""
        self.hints: list[tuple[str, ...]] = []
        """The `hints` of every `transcribe` call, in order (what the loop expected to hear)."""

    @property
    def sample_rate(self) -> int:
        """The rate `transcribe` expects."""
        return self._sample_rate

    async def transcribe(self, pcm: bytes, *, hints: Sequence[str] = ()) -> str:
        """The next scripted transcript, or the decoded `FakeTTS` words; `hints` are recorded
        in `self.hints`, not used.

        Raises:
            STTError: a scripted failure (or what the script holds), or nothing left to say.
        """
        self.utterances.append(pcm)
        self.hints.append(tuple(hints))
        await anyio.sleep(0)
        if self._script:
            entry = self._script.pop(0)
            if isinstance(entry, BaseException):
                raise entry
            return entry
        if self._tts is None:
            raise STTError(
                f"FakeSTT: transcribe call {len(self.utterances)} has no scripted transcript"
            )
        return " ".join(self._decode(pcm))

    def _decode(self, pcm: bytes) -> list[str]:
        """Cut the audio into tone bursts and name each by its zero-crossing frequency."""
        assert self._tts is not None
        values = _samples(pcm)
        rate = self._sample_rate
        gap = max(2, rate // 250)  # 4 ms below the level ends a burst
        words: list[str] = []
        start: int | None = None
        quiet = 0
        for i, value in enumerate(values):
            if abs(value) >= 1000:
                if start is None:
                    start = i
                quiet = 0
            elif start is not None:
                quiet += 1
                if quiet >= gap:
                    words += self._name(values, start, i - quiet + 1)
                    start = None
        if start is not None:
            words += self._name(values, start, len(values))
        return words

    def _name(self, values: array[int], start: int, end: int) -> list[str]:
        assert self._tts is not None
        crossings = [i for i in range(start + 1, end) if (values[i - 1] < 0) != (values[i] < 0)]
        if len(crossings) < 3:
            return []
        frequency = (len(crossings) - 1) * self._sample_rate / (2 * (crossings[-1] - crossings[0]))
        word = self._tts.word_at(frequency)
        return [word] if word is not None else []
