"""`Reply`: how one turn is spoken. The handler's events stream in, its text is cut into
sentences, each sentence is synthesised while the one before it plays, and a barge-in cuts it
all at once. What the user heard is tracked to the word.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass

import anyio

from llmrtc.abort import AbortController
from llmrtc.agent.events import (
    AgentEvent,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
)
from llmrtc.telemetry.events import ErrorEvent, TTSEndEvent, TTSStartEvent
from llmrtc.telemetry.hooks import Hooks, emit, listeners
from llmrtc.voice._heard import WordLedger
from llmrtc.voice.config import VoiceConfig
from llmrtc.voice.events import AgentSpeechEnded, LoopEvent, SpeechError
from llmrtc.voice.frames import AudioFrame
from llmrtc.voice.playout import Playout, Segment
from llmrtc.voice.segmenter import SentenceSegmenter, SpeechChunk
from llmrtc.voice.tts import TTS

__all__ = ["Reply", "Voice"]

logger = logging.getLogger(__name__)

# A closing question: "?", the full-width one (U+FF1F, CJK) or the Arabic one (U+061F), then
# perhaps more marks ("?!", "?..") or closing quotes and brackets.
_QUESTION = re.compile(r"[?\uff1f\u061f][?!.\u2026\"'\u201d\u2019)\]]*\s*$")
"""A text ending with a question mark (closing quotes or brackets after it allowed)."""
_FILLER_POLL = 0.05
"""How often a running tool batch is checked against `filler_after` (seconds)."""


def engine_name(engine: object) -> str:
    """An engine's `name` for hooks and spans; its class name when it has none (`name` is
    only a label: a custom engine without one still works)."""
    name = getattr(engine, "name", None)
    return name if isinstance(name, str) and name else type(engine).__name__


@dataclass(eq=False)
class Voice:
    """What every reply of one loop shares."""

    tts: TTS
    playout: Playout
    config: VoiceConfig
    publish: Callable[[LoopEvent], None]
    hooks: Hooks | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        self._hooks = {
            kind: listeners(self.hooks, kind) for kind in (TTSStartEvent, TTSEndEvent, ErrorEvent)
        }

    async def report(self, event: TTSStartEvent | TTSEndEvent | ErrorEvent) -> None:
        """Send `event` to the loop's hooks (failures isolated, as for every hook)."""
        await emit(self._hooks[type(event)], event)

    async def report_error(self, error: BaseException, where: str, turn_id: str | None) -> None:
        """`on_error` for a failure the loop recovered from."""
        await self.report(
            ErrorEvent(error=error, where=where, session_id=self.session_id, turn_id=turn_id),
        )


class Reply:
    """One turn's speech: feed it the handler's events (`speak_turn`) or a fixed text (`say`),
    then `finish()` waits until it was heard and reports `AgentSpeechEnded`.

    Two abort controllers: `controller` is the handler's (a barge-in or a TTS failure stops
    the model and the tools), `_speech` stops synthesis (a barge-in only: after a TTS failure
    the apology still has to be synthesised).
    """

    def __init__(self, voice: Voice, *, turn_id: str, started_at: float) -> None:
        """A reply for turn `turn_id`; `started_at` (`time.monotonic()`) is when the user
        stopped speaking (or typed), for `time_to_first_audio_s`."""
        self.voice = voice
        self.turn_id = turn_id
        self.started_at = started_at
        self.controller = AbortController()
        self._speech = AbortController()
        self.spoken = voice.playout.open_reply()
        self.ledger = WordLedger()
        self.interrupted = False
        """A barge-in (or a TTS failure) cut the reply: the history keeps only what was heard."""
        self.barged = False
        """A barge-in (or `interrupt()`) cut the speech. Unlike `interrupted`, not set by a TTS
        failure: speech over its apology is still a barge-in."""
        self.completed_at: float | None = None
        """`time.monotonic()` when the handler's `TurnCompleted` passed or its event stream
        ended otherwise (its timers start then, while synthesis and playout may go on); None
        for a reply that ran no handler turn (an STT apology)."""
        self.ended = False
        """`AgentSpeechEnded` was published."""
        self._queue: deque[Segment] = deque()
        self._wakeup = anyio.Event()
        self._no_more = False
        self._speaking = True
        self._first_audio = True
        self._open_calls = 0
        self._batch_since: float | None = None
        self._filler_said = False
        self._hold: anyio.Event | None = None  # set while paused: the turn's events wait

    # Feeding ---------------------------------------------------------------------------------

    async def speak_turn(self, events: AsyncIterator[AgentEvent]) -> TurnCompleted | None:
        """Publish and speak a turn's events to its end (also after a barge-in: the events
        go on, nothing more is spoken). Returns its `TurnCompleted`."""
        segmenter = SentenceSegmenter()
        completed: TurnCompleted | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(self._speaker)
            filler_scope = anyio.CancelScope()
            group.start_soon(self._filler, filler_scope)
            try:
                async with aclosing(events) as stream:  # type: ignore[type-var]
                    async for event in stream:
                        self.voice.publish(event)
                        if isinstance(event, TextDelta):
                            self.ledger.add_delta(event.text)
                            self._queue_chunks(segmenter.push(event.text))
                        elif isinstance(event, ToolCallStarted):
                            # The text before the call is final and spoken, however it
                            # ends; text inside an open call or code span is dropped, and
                            # only its words leave the history (not code carried before).
                            chunks, _, dropped = segmenter.end_of_text()
                            self._queue_chunks(chunks)
                            self.ledger.skip_rest(dropped)
                            if not self._open_calls:
                                self._batch_since = time.monotonic()
                            self._open_calls += 1
                        elif isinstance(event, ToolCallFinished):
                            self._open_calls = max(0, self._open_calls - 1)
                            if not self._open_calls:
                                self._batch_since = None
                        elif isinstance(event, TurnCompleted):
                            completed = event
                            self.completed_at = time.monotonic()
                            self._queue_chunks(segmenter.flush())
                            self.ledger.skip_rest()
                        if self._hold is not None:
                            # Paused (a barge-in waiting for its transcript): take nothing
                            # more from the turn, so no new tool batch starts and the model's
                            # text waits, until it resumes or is cut.
                            await self._hold.wait()
            finally:
                # The handler's timers restart when its turn ends for any reason (an error
                # included), not only at `TurnCompleted`.
                if self.completed_at is None:
                    self.completed_at = time.monotonic()
                filler_scope.cancel()
                self._close_queue()
        return completed

    async def say(self, text: str, *, filler: bool = False) -> None:
        """Speak `text` alone (an apology when no turn could run), through the same speaker."""
        self._queue.append(self.spoken.add_segment(text, filler=filler))
        self._close_queue()
        await self._speaker()

    def say_aside(self, text: str) -> bool:
        """Speak `text` now, outside the model's answer (a tool's progress): like the filler,
        it never enters the history. Only while the turn waits on a tool batch (the user
        waits with it); False, nothing queued, otherwise: before the model's answer, or once
        the reply is cut, paused or has nothing more to speak."""
        if (
            self._batch_since is None
            or self._no_more
            or self.barged
            or self._hold is not None
            or not self._speaking
        ):
            return False
        self._queue.append(self.spoken.add_segment(text, filler=True))
        self._wake()
        return True

    def _queue_chunks(self, chunks: list[SpeechChunk]) -> None:
        for chunk in chunks:
            if not self._speaking:
                continue
            segment = self.spoken.add_segment(chunk.text.strip())
            self.ledger.add_chunk(segment, chunk.raw)
            self._queue.append(segment)
        self._wake()

    def _close_queue(self) -> None:
        self._no_more = True
        self._wake()

    def _wake(self) -> None:
        self._wakeup.set()

    # Interrupting ----------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        """`pause()`d and neither resumed nor cut yet."""
        return self._hold is not None

    @property
    def saying_last(self) -> bool:
        """The agent has nothing more to say: the turn's text is all in (its events ended, or
        a fixed text) and at most its last segment is left to play (it plays, or it played to
        its end)."""
        if self.completed_at is None and not self._no_more:
            return False
        left = [s for s in self.spoken.segments if not (s.finished or s.cleared)]
        return len(left) <= 1

    @property
    def asking_last(self) -> bool:
        """`saying_last`, and that last segment is a question (ends with "?"): a "yeah" over
        it answers the agent rather than backchannels."""
        if not self.saying_last:
            return False
        spoken = [s for s in self.spoken.segments if s.text and not s.cleared]
        return bool(spoken) and _QUESTION.search(spoken[-1].text) is not None

    def pause(self) -> None:
        """Hold the turn: its next event waits (a tool batch not started yet does not start;
        the one running goes on), and so does the filler. Synthesis of what is queued goes
        on. The caller paused the playout first (so the next frame is silence)."""
        if not self.barged and self._hold is None:
            self._hold = anyio.Event()

    def resume(self) -> None:
        """Go on after `pause` (the caller resumes the playout)."""
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.set()

    def barge_in(self, reason: str) -> str:
        """Stop the model, the tools (by their policy) and synthesis; returns what was heard.
        The caller cleared the playout first (so the next frame is silence). A paused turn
        goes on to its end (nothing more is spoken)."""
        self.interrupted = True
        self.barged = True
        self._speaking = False
        self.controller.abort(reason)
        self._speech.abort(reason)
        self.resume()
        return self.spoken.heard_text()

    def fail(self) -> bool:
        """The handler raised: drop this reply's speech not yet played (a sentence queued or
        half synthesised would hold the playout) but an error apology already synthesised.
        True if such an apology is kept (played or to play): it must not be said again."""
        apology = self.voice.config.error_text

        def is_apology(segment: Segment) -> bool:
            return segment.filler and segment.text == apology and not segment.cleared

        self.voice.playout.drop(
            [
                s
                for s in self.spoken.segments
                if not s.finished and not s.cleared and not (is_apology(s) and s.done)
            ]
        )
        self._queue.clear()
        return any(is_apology(s) for s in self.spoken.segments)

    # Finishing -------------------------------------------------------------------------------

    async def finish(self) -> None:
        """Wait until the reply was played to its end (or cut), then report
        `AgentSpeechEnded` if it had started and a barge-in has not reported it already."""
        self.spoken.close()
        await self.spoken.played()
        self.end_speech()

    def end_speech(self) -> None:
        """Publish `AgentSpeechEnded` once, if the reply had started playing."""
        if self.spoken.started and not self.ended:
            self.ended = True
            self.voice.publish(AgentSpeechEnded(self.interrupted, self.spoken.heard_text()))

    # The speaker and the filler ----------------------------------------------------------------

    async def _speaker(self) -> None:
        """Synthesise queued segments in order, one at a time (the next one is synthesised
        while the previous plays, since the playout plays from its own queue)."""
        # No cancel scope around the whole loop: a barge-in stops the synthesis running (its
        # own scope, so its end is still reported) and clears what is queued.
        while True:
            while not self._queue:
                if self._no_more:
                    return
                self._wakeup = anyio.Event()
                await self._wakeup.wait()
            segment = self._queue.popleft()
            if segment.cleared or self._speech.signal.aborted:
                continue
            if not segment.text:
                segment.finish()  # nothing speakable (code, JSON): it plays as no audio
                continue
            await self._synthesize(segment)

    async def _synthesize(self, segment: Segment) -> None:
        try:
            await self._run_synthesis(segment)
        finally:
            # Cancelled from outside (the handler raised and its task group ended the
            # speaker): an unfinished segment would stall the playout queue for good.
            if not segment.done and not segment.cleared:
                self.voice.playout.drop([segment])

    async def _run_synthesis(self, segment: Segment) -> None:
        voice = self.voice
        tts, rate = voice.tts, voice.playout.sample_rate
        from llmrtc.voice.audio import Resampler

        resampler = Resampler(rate)
        started = time.perf_counter()
        audio_samples = 0
        announced = False
        error: Exception | None = None
        with self._speech.signal.cancel_scope() as scope:
            try:
                async with aclosing(tts.synthesize(segment.text)) as chunks:  # type: ignore[type-var]
                    async for pcm in chunks:
                        if not announced:
                            announced = True
                            await self._tts_started(segment.text)
                        if pcm:
                            audio_samples += len(pcm) // 2
                            segment.append(resampler.convert(AudioFrame(pcm, tts.sample_rate)))
                segment.append(resampler.flush())
            except Exception as exc:  # a TTSError, or any engine failure: never spoken
                error = exc
        interrupted = scope.cancelled_caught or error is not None
        if not announced:
            await self._tts_started(segment.text)
        await voice.report(
            TTSEndEvent(
                session_id=voice.session_id,
                turn_id=self.turn_id,
                duration_s=time.perf_counter() - started,
                audio_duration_s=audio_samples / tts.sample_rate,
                interrupted=interrupted,
                error_type=None if error is None else type(error).__name__,
            ),
        )
        if error is None:
            segment.finish()
            return
        await self._tts_failed(segment, error)

    async def _tts_started(self, text: str) -> None:
        first, self._first_audio = self._first_audio, False
        await self.voice.report(
            TTSStartEvent(
                session_id=self.voice.session_id,
                turn_id=self.turn_id,
                text=text,
                voice=engine_name(self.voice.tts),
                time_to_first_audio_s=time.monotonic() - self.started_at if first else None,
            ),
        )

    async def _tts_failed(self, segment: Segment, error: Exception) -> None:
        """A sentence could not be synthesised: stop the turn (the history keeps what was
        heard), drop the rest of its speech, and apologise once (if TTS works again)."""
        logger.warning("turn %s: TTS failed, the agent apologises: %s", self.turn_id, error)
        self.interrupted = True
        self._speaking = False
        self.controller.abort("tts failed")
        self.voice.playout.drop([segment, *self._queue])
        self._queue.clear()
        self.voice.publish(SpeechError("tts", str(error), type(error).__name__))
        await self.voice.report_error(error, "tts", self.turn_id)
        config = self.voice.config
        if segment.text in (config.error_text, config.apology_text):
            return  # the apology itself failed: nothing more to try
        apology = self.spoken.add_segment(config.error_text, filler=True)
        self._queue.append(apology)

    async def _filler(self, scope: anyio.CancelScope) -> None:
        """Say `filler_text` once when a tool batch runs `filler_after` while nothing plays."""
        config = self.voice.config
        if not config.filler_text:
            return
        with scope:
            while not self._filler_said:
                await anyio.sleep(_FILLER_POLL)
                since = self._batch_since
                if (
                    since is not None
                    and time.monotonic() - since >= config.filler_after
                    and self.voice.playout.idle
                    and not self.controller.signal.aborted
                    and self._hold is None
                ):
                    self._filler_said = True
                    self._queue.append(self.spoken.add_segment(config.filler_text, filler=True))
                    self._wake()
