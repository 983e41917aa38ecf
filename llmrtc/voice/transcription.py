"""`IncrementalTranscription`: one utterance transcribed while the user is still speaking.

A finished-utterance STT (`STT.transcribe`) costs about the same whatever the length of a short
utterance (Whisper pads every input to 30 s), and today it starts only once the end of speech is
decided, `end_of_speech_silence` after the last word. Here the growing utterance is transcribed
whenever the STT is free and there is something new to hear: at each pause the VAD reports (the
pass then covers every word said so far, usually the whole utterance) and, optionally, every
`min_new_audio` seconds of new audio (partials for the screen). When the end of speech is
decided, a pass that already covered every voiced sample *is* the final transcript: it came
while the closing silence was still being waited for. Otherwise one more pass runs over all of
it.

Not yet wired into `VoiceLoop`: the loop's endpointer would `push` each VAD window with its
verdict, call `pause()` on the first unvoiced window after speech, publish each partial as
`Transcript(text, final=False)` and take `final()` instead of `stt.transcribe(utterance)`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

import anyio
import anyio.abc

from llmrtc.voice.stt import STT

__all__ = ["IncrementalTranscription"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Pass:
    """A transcription of the utterance's first `covered` bytes."""

    text: str
    covered: int


class IncrementalTranscription:
    """Transcribes one growing utterance in passes while it is spoken (see the module docstring).

    Example:
        async with IncrementalTranscription(stt, on_partial=show) as transcription:
            for window, voiced in windows:        # at `stt.sample_rate`
                transcription.push(window, voiced=voiced)
                if paused:
                    transcription.pause()
            text = await transcription.final()

    One pass runs at a time (an STT pass cannot be interrupted, so a new one never queues
    behind it); leaving the block cancels a pass still running.
    """

    def __init__(
        self,
        stt: STT,
        *,
        min_new_audio: float | None = None,
        on_partial: Callable[[str], None] | None = None,
    ) -> None:
        """Transcribe with `stt`.

        Args:
            stt: The engine; `push` takes audio at its `sample_rate`.
            min_new_audio: Also run a pass once this many seconds of new audio arrived since
                the last pass began (partials while the user speaks). None: passes only at
                pauses. A pass running when the user stops delays the final by up to one
                pass, so set it only where partials are worth that.
            on_partial: Called with each new, non-empty partial transcript (a pass's text that
                differs from the last one given).

        Raises:
            ValueError: `min_new_audio` is not a positive number of seconds.
        """
        if min_new_audio is not None and (
            isinstance(min_new_audio, bool)
            or not isinstance(min_new_audio, int | float)
            or not min_new_audio > 0
            or min_new_audio == float("inf")
        ):
            raise ValueError(
                "IncrementalTranscription(min_new_audio=...) must be a positive number of "
                f"seconds or None (passes only at pauses), got {min_new_audio!r}"
            )
        self._stt = stt
        self._bytes_per_second = 2 * stt.sample_rate
        self._min_new = (
            None if min_new_audio is None else round(min_new_audio * self._bytes_per_second)
        )
        self._on_partial = on_partial
        self._audio = bytearray()
        self._voiced_end = 0  # bytes up to the end of the last voiced audio
        self._paused = False  # a pause was reported and no pass started since
        self._last_start = 0  # bytes covered by the last pass started
        self._running: _Pass | None = None  # placeholder `covered` of the pass running
        self._done: _Pass | None = None  # the latest finished pass
        self._closed = False
        self._changed = anyio.Event()
        self._group: anyio.abc.TaskGroup | None = None
        self._partial = ""
        self.passes = 0
        """Passes run so far (finished or running), the final one included."""
        self.reused = False
        """Whether `final()` returned a pass run before it was called (no pass after it)."""

    @property
    def partial(self) -> str:
        """The latest pass's transcript ("" before the first one finished)."""
        return self._partial

    @property
    def audio_seconds(self) -> float:
        """Seconds of audio pushed so far."""
        return len(self._audio) / self._bytes_per_second

    def push(self, pcm: bytes, *, voiced: bool) -> None:
        """Append audio (mono s16le at the STT's rate) and the VAD's verdict on it.

        Raises:
            ValueError: `pcm` is not whole s16 samples.
            RuntimeError: after `final()` was called.
        """
        if len(pcm) % 2:
            raise ValueError(
                f"IncrementalTranscription.push needs whole s16 samples, got {len(pcm)} bytes"
            )
        if self._closed:
            raise RuntimeError("IncrementalTranscription.push after final(): the utterance is over")
        self._audio += pcm
        if voiced:
            self._voiced_end = len(self._audio)
        self._wake()

    def pause(self) -> None:
        """The user paused: run a pass over everything said so far as soon as the STT is free."""
        self._paused = True
        self._wake()

    async def final(self) -> str:
        """The transcript of the whole utterance: the pass that already covered every voiced
        sample if there is one (then at once, or when that pass ends), else a last pass over
        all the audio. No `push` after this.

        Raises:
            STTError: the last pass failed (a failed earlier pass is only logged).
            RuntimeError: the block was not entered.
        """
        if self._group is None:
            raise RuntimeError("IncrementalTranscription.final: use `async with` first")
        self._closed = True
        self._wake()
        ran_before = self.passes
        while True:
            done = self._done
            if done is not None and done.covered >= self._voiced_end:
                self.reused = self.passes == ran_before
                return done.text
            if self._running is None:
                # In the caller's task: its cancellation (a barge-in) cancels this pass.
                return (await self._run_pass()).text
            # A pass is running (it cannot be interrupted, and a new one would only queue
            # behind it): its result may be the final one.
            await self._wait_change()

    async def __aenter__(self) -> IncrementalTranscription:
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(self._passes)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._group is not None
        self._closed = True
        self._group.cancel_scope.cancel()
        return await self._group.__aexit__(exc_type, exc, traceback)

    # Passes ----------------------------------------------------------------------------------

    def _wake(self) -> None:
        # Every waiter holds the event current when it began waiting: set it, start a new one.
        self._changed.set()
        self._changed = anyio.Event()

    async def _wait_change(self) -> None:
        await self._changed.wait()

    def _due(self) -> bool:
        """Whether a pass over the audio so far would hear something the last one did not."""
        if self._closed or self._voiced_end <= self._last_start:
            return False  # `final` runs the last pass itself; nothing new was said
        if self._paused:
            return True
        return self._min_new is not None and len(self._audio) - self._last_start >= self._min_new

    async def _passes(self) -> None:
        while True:
            while not self._due() or self._running is not None:
                await self._wait_change()
            try:
                await self._run_pass()
            except Exception as exc:  # a partial is a nicety: the final pass still runs
                logger.debug("an incremental STT pass failed: %s", exc)

    async def _run_pass(self) -> _Pass:
        pcm = bytes(self._audio)
        self._paused = False
        self._last_start = len(pcm)
        self._running = _Pass("", len(pcm))
        self.passes += 1
        try:
            text = (await self._stt.transcribe(pcm)).strip()
        finally:
            self._running = None
            self._wake()
        finished = _Pass(text, len(pcm))
        if self._done is None or finished.covered >= self._done.covered:
            self._done = finished
            if text and text != self._partial:
                self._partial = text
                if self._on_partial is not None and not self._closed:
                    self._on_partial(text)
        return finished
