"""`VoiceLoop`: audio frames in, audio frames out, around a `TurnHandler`.

The input path runs in the caller's task (`push_audio`): resample to the VAD's rate, cut into
VAD windows, score each (cheap), endpoint in audio time (`llmrtc.voice.endpointing`), and
decide barge-ins on the spot. Everything slow runs in the loop's own task group: the playout
clock (`llmrtc.voice.playout`), and a worker that takes utterances, typed texts and proactive
deadlines in order, transcribes, and runs each turn as a task whose speech is a `Reply`.
"""

from __future__ import annotations

import inspect
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
import anyio.abc

from llmrtc.agent.events import AgentEvent
from llmrtc.agent.handler import TurnHandler
from llmrtc.agent.history import ConversationHistory
from llmrtc.telemetry.hooks import (
    BargeInEvent,
    Hooks,
    SpeechEndEvent,
    SpeechStartEvent,
    STTEndEvent,
    emit,
    hooks_for,
)
from llmrtc.voice._broadcast import Broadcast
from llmrtc.voice._heard import cut_to_heard
from llmrtc.voice.config import VoiceConfig
from llmrtc.voice.endpointing import Endpointer, UtteranceEnded, UtteranceStarted
from llmrtc.voice.events import (
    AgentSpeechStarted,
    BargeIn,
    LoopEvent,
    SpeechError,
    Transcript,
    UserSpeechEnded,
    UserSpeechStarted,
)
from llmrtc.voice.frames import AudioFrame
from llmrtc.voice.playout import Playout, SpokenReply
from llmrtc.voice.reply import Reply, Voice
from llmrtc.voice.stt import STT
from llmrtc.voice.tts import TTS
from llmrtc.voice.vad import VAD

__all__ = ["VoiceLoop"]

logger = logging.getLogger(__name__)

EVENT_BUFFER = 1000
"""Events each `events()` subscriber may lag before its oldest are dropped."""
_CLOSE_TIMEOUT = 30.0
"""Leaving the loop waits this long at most for the turn to settle ("finish" tools included)."""


@dataclass(frozen=True)
class _Utterance:
    pcm: bytes  # at the VAD's rate
    turn_id: str
    ended_at: float  # time.monotonic() when the end of speech was decided


@dataclass(frozen=True)
class _Typed:
    text: str
    at: float


@dataclass(frozen=True)
class _Deadline:
    at: float


def _new_turn_id() -> str:
    return f"turn_{uuid.uuid4().hex[:12]}"


def _takes_turn_id(method: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "turn_id" or p.kind is p.VAR_KEYWORD for p in parameters)


class VoiceLoop:
    """A transport-free voice session around a `TurnHandler` (`TurnRunner`,
    `PlaybookOrchestrator`): push microphone frames in, take 20 ms frames out.

    Example:
        async with VoiceLoop(handler, stt=speech.stt, tts=speech.tts, vad=speech.vad) as loop:
            events = loop.events()
            await loop.push_audio(AudioFrame(pcm, sample_rate=48000))
            async for frame in loop.audio_out():
                send(frame)

    Call `push_audio` from one task at a time (its frames are one stream, in order).
    """

    def __init__(
        self,
        handler: TurnHandler,
        *,
        stt: STT,
        tts: TTS,
        vad: VAD,
        config: VoiceConfig | None = None,
        hooks: Hooks | None = None,
        session_id: str | None = None,
    ) -> None:
        """Create a loop (it starts with `async with`).

        Args:
            handler: Answers the turns; its `history` is `loop.history`.
            stt: Transcribes each finished utterance.
            tts: Speaks the replies, sentence by sentence.
            vad: Scores input windows for speech (each loop has its own `vad.stream()`).
            config: Turn-taking, barge-in and output settings (`VoiceConfig()` by default).
            hooks: Observers of speech, STT, TTS, barge-ins and recovered errors (pass the
                handler's hooks too to see everything in one place).
            session_id: Carried by hook events; by default the handler's `session_id`.
        """
        self._handler = handler
        self._stt = stt
        self._vad = vad
        self.config = config if config is not None else VoiceConfig()
        self.session_id = session_id or getattr(handler, "session_id", None)
        self._hooks = {
            name: hooks_for([hooks], name)
            for name in ("on_speech_start", "on_speech_end", "on_stt_end", "on_barge_in")
        }
        self._turn_id_ok = _takes_turn_id(handler.run_turn)
        self._timeout_turn_id_ok = _takes_turn_id(handler.run_timeout_turn)
        self._events: Broadcast[LoopEvent] = Broadcast(EVENT_BUFFER, "events()")
        self._playout = Playout(self.config.output_sample_rate, on_started=self._speech_started)
        self._voice = Voice(
            tts, self._playout, self.config, self._events.publish, hooks, self.session_id
        )
        self._endpointer = Endpointer(
            self.config, sample_rate=vad.sample_rate, window_samples=vad.window_samples
        )
        self._state = "new"
        self._group: anyio.abc.TaskGroup | None = None
        self._items: deque[_Utterance | _Typed] = deque()
        self._wakeup: anyio.Event | None = None
        self._reply: Reply | None = None
        self._job_idle: anyio.Event | None = None
        self._utterance_turn: str | None = None
        self._barged = False
        self._fired_deadline: float | None = None
        self._input: Any = None  # (Resampler, PCMChunker, VADStream) once started

    # Public API ------------------------------------------------------------------------------

    @property
    def history(self) -> ConversationHistory:
        """The handler's conversation history."""
        return self._handler.history

    def events(self) -> AsyncIterator[LoopEvent]:
        """Every event from now on: voice events and the handler's `AgentEvent`s, in order.

        Each subscriber has its own buffer of `EVENT_BUFFER` events; one that falls further
        behind loses its oldest (never blocking audio). The iterator ends when the loop ends.
        """
        return self._events.subscribe()

    def audio_out(self) -> AsyncIterator[AudioFrame]:
        """One 20 ms mono frame at `config.output_sample_rate` every 20 ms from now on
        (silence while the agent is quiet). A consumer more than 10 frames behind loses the
        oldest. The iterator ends when the loop ends."""
        return self._playout.frames()

    async def push_audio(self, frame: AudioFrame) -> None:
        """Feed microphone audio: any rate, channels and length, in order.

        Raises:
            TypeError: `frame` is not an `AudioFrame` (its constructor checks the audio).
            RuntimeError: the loop has not started (`async with`) or has ended.
        """
        if not isinstance(frame, AudioFrame):
            raise TypeError(f"push_audio takes an AudioFrame, got {type(frame).__name__}")
        self._check_running("push_audio")
        resampler, chunker, stream = self._input
        for window in chunker.push(resampler.convert(frame)):
            decided = self._endpointer.push(window, stream.speech_probability(window))
            if isinstance(decided, UtteranceStarted):
                await self._user_started(decided)
            elif isinstance(decided, UtteranceEnded):
                await self._user_ended(decided)
            if (
                not self._barged
                and self._endpointer.in_speech
                and self._endpointer.voiced_seconds >= self.config.barge_in_min_speech
                and self._busy()
            ):
                self._barged = True
                await self._barge_in("barge-in")

    async def send_text(self, text: str) -> None:
        """A typed turn (no STT), answered after the turns queued before it.

        Raises:
            ValueError: `text` is empty or blank.
            RuntimeError: the loop is not running.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"send_text needs some text, got {text!r}")
        self._check_running("send_text")
        self._queue(_Typed(text.strip(), time.monotonic()))

    async def interrupt(self) -> None:
        """Do what a barge-in does: silence now, abort the turn (tools by their policy)."""
        self._check_running("interrupt")
        await self._barge_in("interrupted")

    # Lifetime --------------------------------------------------------------------------------

    async def __aenter__(self) -> VoiceLoop:
        if self._state != "new":
            raise RuntimeError("a VoiceLoop runs once; make a new one for another session")
        from llmrtc.voice.audio import PCMChunker, Resampler

        self._input = (
            Resampler(self._vad.sample_rate),
            PCMChunker(2 * self._vad.window_samples),
            self._vad.stream(),
        )
        self._job_idle = anyio.Event()
        self._job_idle.set()
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(self._playout.run)
        group.start_soon(self._worker)
        self._state = "running"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        self._state = "closing"
        self._items.clear()
        reply = self._reply
        if reply is not None:
            self._playout.clear()
            reply.barge_in("the voice loop closed")
            reply.end_speech()
        assert self._group is not None and self._job_idle is not None
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT) as waited:
            await self._job_idle.wait()  # every tool gets its result, the history is cut
        if waited.cancelled_caught:
            logger.warning("the turn did not settle within %s s of closing", _CLOSE_TIMEOUT)
        self._group.cancel_scope.cancel()
        try:
            return await self._group.__aexit__(exc_type, exc, traceback)
        finally:
            self._state = "closed"
            self._playout.close()
            self._events.close()

    def _check_running(self, what: str) -> None:
        if self._state == "new":
            raise RuntimeError(f"VoiceLoop.{what}: the loop has not started (use `async with`)")
        if self._state != "running":
            raise RuntimeError(f"VoiceLoop.{what}: the loop has ended")

    # Input -----------------------------------------------------------------------------------

    async def _user_started(self, started: UtteranceStarted) -> None:
        self._utterance_turn = _new_turn_id()
        self._barged = False
        self._events.publish(UserSpeechStarted(started.audio_time))
        await self._report(
            "on_speech_start",
            SpeechStartEvent(session_id=self.session_id, turn_id=self._utterance_turn),
        )

    async def _user_ended(self, ended: UtteranceEnded) -> None:
        turn_id = self._utterance_turn or _new_turn_id()
        self._utterance_turn = None
        self._events.publish(UserSpeechEnded(ended.duration))
        self._queue(_Utterance(ended.pcm, turn_id, time.monotonic()))
        await self._report(
            "on_speech_end",
            SpeechEndEvent(session_id=self.session_id, turn_id=turn_id, duration_s=ended.duration),
        )

    def _busy(self) -> bool:
        reply = self._reply
        return (reply is not None and not reply.interrupted) or not self._playout.idle

    async def _barge_in(self, reason: str) -> None:
        self._playout.clear()  # first: the next frame out is silence
        reply = self._reply
        if reply is None or reply.interrupted:
            return
        heard = reply.barge_in(reason)
        self._events.publish(BargeIn(heard))
        reply.end_speech()
        await self._report(
            "on_barge_in", BargeInEvent(session_id=self.session_id, turn_id=reply.turn_id)
        )

    def _speech_started(self, spoken: SpokenReply, text: str) -> None:
        self._events.publish(AgentSpeechStarted(text))

    async def _report(self, name: str, event: object) -> None:
        await emit(self._hooks[name], name, event)

    # The worker: utterances, typed texts and deadlines, in order -------------------------------

    def _queue(self, item: _Utterance | _Typed) -> None:
        self._items.append(item)
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    async def _worker(self) -> None:
        while True:
            item = await self._next_item()
            if isinstance(item, _Utterance):
                text = await self._transcribe(item)
                await self._idle()
                if text is None:
                    self._start_job(item.turn_id, item.ended_at, apology=True)
                elif text:
                    self._start_job(item.turn_id, item.ended_at, user_text=text)
            elif isinstance(item, _Typed):
                await self._idle()
                self._start_job(_new_turn_id(), item.at, user_text=item.text)
            else:
                self._start_job(_new_turn_id(), item.at, timeout=True)

    async def _next_item(self) -> _Utterance | _Typed | _Deadline:
        while True:
            if self._items:
                return self._items.popleft()
            timeout = math.inf
            assert self._job_idle is not None
            if self._job_idle.is_set() and not self._endpointer.in_speech:
                deadline = self._handler.next_deadline()
                # A deadline a timeout turn did not move is not run again.
                if deadline is not None and deadline != self._fired_deadline:
                    now = time.monotonic()
                    if now >= deadline:
                        self._fired_deadline = deadline
                        return _Deadline(now)
                    timeout = deadline - now
            self._wakeup = anyio.Event()
            with anyio.move_on_after(timeout):
                await self._wakeup.wait()
            self._wakeup = None

    async def _idle(self) -> None:
        """Wait for the previous turn to end (its "finish" tools' results in the history)."""
        assert self._job_idle is not None
        await self._job_idle.wait()

    async def _transcribe(self, item: _Utterance) -> str | None:
        """The utterance's transcript ("" for no words), or None when the STT failed."""
        stt = self._stt
        pcm = item.pcm
        if stt.sample_rate != self._vad.sample_rate:
            from llmrtc.voice.audio import resample

            pcm = resample(pcm, self._vad.sample_rate, stt.sample_rate)
        started = time.perf_counter()
        try:
            text = (await stt.transcribe(pcm)).strip()
        except Exception as exc:  # STTError or any engine failure: apologise, go on
            logger.warning("turn %s: STT failed, the agent apologises: %s", item.turn_id, exc)
            self._events.publish(SpeechError("stt", str(exc), type(exc).__name__))
            await self._voice.report_error(exc, "stt", item.turn_id)
            return None
        self._events.publish(Transcript(text, True))
        await self._report(
            "on_stt_end",
            STTEndEvent(
                session_id=self.session_id,
                turn_id=item.turn_id,
                text=text,
                duration_s=time.perf_counter() - started,
                audio_duration_s=len(pcm) / 2 / stt.sample_rate,
                model=stt.name,
            ),
        )
        return text

    # Turns -----------------------------------------------------------------------------------

    def _start_job(
        self,
        turn_id: str,
        started_at: float,
        *,
        user_text: str | None = None,
        timeout: bool = False,
        apology: bool = False,
    ) -> None:
        if self._state != "running":
            return
        reply = Reply(self._voice, turn_id=turn_id, started_at=started_at)
        self._reply = reply
        self._job_idle = anyio.Event()
        assert self._group is not None
        self._group.start_soon(self._job, reply, user_text, timeout, apology)

    async def _job(self, reply: Reply, user_text: str | None, timeout: bool, apology: bool) -> None:
        history = self._handler.history
        before = {id(m) for m in history.messages}
        try:
            if apology:
                await reply.say(self.config.apology_text)
            else:
                try:
                    await reply.speak_turn(self._turn_events(reply, user_text, timeout))
                except Exception as exc:  # a handler bug: the history is valid, apologise
                    logger.exception("turn %s failed; the agent apologises", reply.turn_id)
                    await self._voice.report_error(exc, "voice.turn", reply.turn_id)
                    if not reply.interrupted:
                        await reply.say(self.config.apology_text, filler=True)
            await reply.finish()
            if reply.interrupted:
                playout = self._playout
                heard = reply.ledger.heard(playout.seconds_per_char, playout.sample_rate)
                cut_to_heard(history, before, heard, reply.ledger.total_words)
        finally:
            if self._reply is reply:
                self._reply = None
            assert self._job_idle is not None
            self._job_idle.set()
            self._wake()

    def _turn_events(
        self, reply: Reply, user_text: str | None, timeout: bool
    ) -> AsyncIterator[AgentEvent]:
        signal = reply.controller.signal
        handler = self._handler
        if timeout:
            if self._timeout_turn_id_ok:
                return handler.run_timeout_turn(abort_signal=signal, turn_id=reply.turn_id)  # type: ignore[call-arg]
            return handler.run_timeout_turn(abort_signal=signal)
        if self._turn_id_ok:
            return handler.run_turn(user_text, abort_signal=signal, turn_id=reply.turn_id)  # type: ignore[call-arg]
        return handler.run_turn(user_text, abort_signal=signal)
