"""`VoiceLoop`: audio frames in, audio frames out, around a `TurnHandler`.

The input path runs in the caller's task (`push_audio`): resample to the VAD's rate, cut into
VAD windows, score each (cheap), endpoint in audio time (`llmrtc.voice.endpointing`), and
decide barge-ins on the spot. Everything slow runs in the loop's own task group: the playout
clock (`llmrtc.voice.playout`), and a worker that takes utterances, typed texts and proactive
deadlines in order, transcribes, and runs each turn as a task whose speech is a `Reply`.

Interruptions: speech over the agent first *pauses* it (silence from the next frame; the turn
takes no new events, so no tool batch starts; tools already running go on). Its transcript
decides: words make it a real barge-in (the turn is aborted, "cancel" tools with it, the
playout cleared, the history cut to what was heard); no words or only a backchannel resume the
reply where it stopped. A transcript that does not come within
`VoiceConfig.false_interruption_timeout` of the user going quiet resumes the reply too (the
user is quiet: most likely it was a noise); if it then holds words while the reply still
plays, they cut it as a barge-in. Speech over the agent too short to pause it is judged the
same way once transcribed: words cut the reply then, unless it is saying its last sentence
(it ends it, then answers them; more speech over it meanwhile cuts it at once). A backchannel
is one only while the agent goes on: over a closing question (the reply's last sentence ends
with "?") or once the reply has ended, "yeah" or "okay" answers the agent and is words.
Typed text, `interrupt()` and `abort()` are real barge-ins at once.

Preemptive generation (`VoiceConfig.preemptive_generation`): at each pause that may last
(`UtterancePaused`) while the agent is idle, the utterance so far is transcribed and a
`PreemptingHandler` starts the turn's answer on it (`llmrtc.voice._early_turn`); speech
resuming drops it, and a turn that ends at that pause takes it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from llmrtc.agent.handler import TurnHandler
from llmrtc.agent.history import ConversationHistory
from llmrtc.errors import LLMRTCError
from llmrtc.telemetry.correlation import current_session_id
from llmrtc.telemetry.events import BargeInEvent, SpeechEndEvent, SpeechStartEvent, STTEndEvent
from llmrtc.telemetry.hooks import Hooks, emit, listeners
from llmrtc.voice._broadcast import Broadcast
from llmrtc.voice._early_turn import EarlyTurn
from llmrtc.voice._turns import Hearing, TurnWorker, Typed, Utterance, hearing, new_turn_id
from llmrtc.voice.config import VoiceConfig
from llmrtc.voice.endpointing import (
    Endpointer,
    UtteranceEnded,
    UtterancePaused,
    UtteranceResumed,
    UtteranceStarted,
)
from llmrtc.voice.events import (
    AgentSpeechStarted,
    BargeIn,
    InterruptionKind,
    LoopEvent,
    UserSpeechEnded,
    UserSpeechStarted,
)
from llmrtc.voice.frames import AudioFrame
from llmrtc.voice.playout import Playout, SpokenReply
from llmrtc.voice.reply import Reply, Voice
from llmrtc.voice.speech import resolve_turn_detector
from llmrtc.voice.stt import STT
from llmrtc.voice.tts import TTS
from llmrtc.voice.vad import VAD

__all__ = ["TurnQueueFull", "VoiceLoop"]

logger = logging.getLogger(__name__)

_CHECKPOINT_WINDOWS = 8
"""`push_audio` lets other tasks run after this many VAD windows (a 30 s frame is ~940 Silero
windows: run inline in one go it would hold the event loop, and every other session's audio
clock, for hundreds of ms)."""
EVENT_BUFFER = 1000
"""Events each `events()` subscriber may lag before its oldest are dropped."""
_CLOSE_TIMEOUT = 30.0
"""Leaving the loop waits this long at most for the turn to settle ("finish" tools included)."""


class TurnQueueFull(LLMRTCError, RuntimeError):
    """`VoiceLoop.send_text` refused a typed turn: `limit` typed turns already wait.

    The loop goes on; the text was not taken. Send it again once the agent has answered
    (a `turn_completed`), or `interrupt` first to drop the waiting ones.

    Attributes:
        limit: `VoiceConfig.max_queued_texts`.
    """

    def __init__(self, limit: int) -> None:
        """Say how many typed turns wait and what to do."""
        super().__init__(
            f"{limit} typed turns already wait for the agent (the most allowed, "
            "VoiceConfig.max_queued_texts); this one was not taken: send it once the agent "
            "has answered, or interrupt to drop the waiting ones"
        )
        self.limit = limit


class _Pause:
    """A reply paused by speech over it, waiting for that speech's transcripts."""

    __slots__ = ("backchannel", "reply", "timer", "utterances")

    def __init__(self, reply: Reply, utterance: str) -> None:
        self.reply = reply
        self.utterances = {utterance}
        """Turn ids of the utterances since the pause whose transcripts are awaited."""
        self.backchannel = False
        """One of them was a backchannel (so a resume reports `backchannel`, not `false`)."""
        self.timer: anyio.CancelScope | None = None
        """`false_interruption_timeout`, running while the user is quiet."""

    def disarm(self) -> None:
        """Stop the timer (the user speaks again, or the pause was decided)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


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
        _check_engine("stt", stt, ("sample_rate", "transcribe"))
        _check_engine("tts", tts, ("sample_rate", "synthesize"))
        _check_engine("vad", vad, ("sample_rate", "window_samples", "stream"))
        self._handler = handler
        self._stt = stt
        self._vad = vad
        self.config = config if config is not None else VoiceConfig()
        self.session_id = session_id or getattr(handler, "session_id", None)
        self._hooks = {
            kind: listeners(hooks, kind)
            for kind in (SpeechStartEvent, SpeechEndEvent, STTEndEvent, BargeInEvent)
        }
        self._events: Broadcast[LoopEvent] = Broadcast(EVENT_BUFFER, "events()")
        self._playout = Playout(self.config.output_sample_rate, on_started=self._speech_started)
        self._voice = Voice(
            tts, self._playout, self.config, self._events.publish, hooks, self.session_id
        )
        self._endpointer = Endpointer(
            self.config,
            sample_rate=vad.sample_rate,
            window_samples=vad.window_samples,
            turn_detector=resolve_turn_detector(self.config, vad),
        )
        self._state = "new"
        self._group: anyio.abc.TaskGroup | None = None
        self._turns = TurnWorker(
            handler,
            stt,
            self._voice,
            input_rate=vad.sample_rate,
            in_speech=lambda: self._endpointer.in_speech,
            report=self._report,
            judge=self._judge,
            turn_starting=lambda: self._drop_early("a turn started first"),
        )
        self._utterance_turn: str | None = None
        self._utterance_over_agent = False  # it started while the agent spoke or a turn ran
        self._utterance_reply: Reply | None = None  # the reply it started over
        self._pause: _Pause | None = None
        self._late: set[str] = set()  # utterances a timed-out pause resumed without a verdict
        self._barged = False
        self._early: EarlyTurn | None = None  # the utterance's last pause, answered early
        self._push_lock = anyio.Lock()
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
        # One push at a time: the checkpoint below lets other tasks (and loops) run, and a
        # second push then must not feed its windows between this one's.
        async with self._push_lock:
            await self._push_windows(frame)

    async def _push_windows(self, frame: AudioFrame) -> None:
        resampler, chunker, stream = self._input
        for count, window in enumerate(chunker.push(resampler.convert(frame)), 1):
            if count % _CHECKPOINT_WINDOWS == 0:
                await anyio.lowlevel.checkpoint()
            decided = self._endpointer.push(window, stream.speech_probability(window))
            if isinstance(decided, UtteranceStarted):
                await self._user_started(decided)
            elif isinstance(decided, UtterancePaused):
                self._user_paused(decided)
            elif isinstance(decided, UtteranceResumed):
                self._drop_early("the user went on")
            elif isinstance(decided, UtteranceEnded):
                await self._user_ended(decided)
            if (
                not self._barged
                and self._endpointer.in_speech
                and self._endpointer.voiced_seconds >= self.config.barge_in_min_speech
                and self._busy()
            ):
                self._barged = True
                await self._speech_over_agent()

    async def send_text(self, text: str) -> None:
        """A typed turn (no STT). Typed while the agent speaks or a turn runs, it interrupts
        that turn as words spoken over it would (a real barge-in); it is answered after the
        turns queued before it.

        At most `config.max_queued_texts` typed turns wait at once (the turn running is not
        one of them); `interrupt` drops them.

        Raises:
            ValueError: `text` is empty or blank.
            TurnQueueFull: that many typed turns already wait; this one is not taken.
            RuntimeError: the loop is not running.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"send_text needs some text, got {text!r}")
        self._check_running("send_text")
        limit = self.config.max_queued_texts
        if self._turns.typed_waiting >= limit:
            raise TurnQueueFull(limit)
        self._drop_early("typed text came first")
        if self._busy():
            await self._barge_in("typed text")
        self._turns.queue(Typed(text.strip(), time.monotonic()))

    async def interrupt(self) -> None:
        """Stop and start over: do what a barge-in does (silence now, abort the turn, tools by
        their policy) and drop the typed turns still waiting. Utterances already spoken stay
        queued (a barge-in's own words are the next turn)."""
        self._check_running("interrupt")
        self._drop_early("interrupted")
        dropped = self._turns.drop_typed()
        if dropped:
            logger.debug("interrupt dropped %d waiting typed turns", dropped)
        await self._barge_in("interrupted")

    async def abort(self, reason: str = "the voice loop was aborted") -> None:
        """Stop everything now, "finish" tool calls included (a server shutting down whose
        grace is over): silence, abort the turn, cancel what still runs of it, and take no
        more input. Every started tool call still gets its one result ("aborted" for a
        stopped one) and the history stays valid. Leaving the loop then waits for nothing.
        A no-op once the loop has ended."""
        if self._state not in ("running", "closing"):
            return
        self._drop_early(reason)
        await self._barge_in(reason)
        self._turns.abort()

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
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(self._playout.run)
        group.start_soon(self._run_turns, group)
        self._state = "running"
        return self

    async def _run_turns(self, group: anyio.abc.TaskGroup) -> None:
        # The turns, and every tool batch they run, serve this session: a tool's
        # `ctx.session_id`, its hooks and the executor's duplicate detection see it even when
        # the handler was built without one (an agent factory knows no session).
        if self.session_id is not None:
            current_session_id.set(self.session_id)  # this task's own context only
        await self._turns.run(group)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        self._state = "closing"
        self._drop_early("the voice loop closed")
        self._settle_pause()
        reply = self._turns.reply
        if reply is not None:
            self._playout.clear()
            reply.barge_in("the voice loop closed")
            reply.end_speech()
        assert self._group is not None
        # Every tool gets its result and the history is cut to what was heard.
        if not await self._turns.close(_CLOSE_TIMEOUT):
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
        self._utterance_turn = new_turn_id()
        self._barged = False
        self._utterance_over_agent = self._busy()
        reply = self._turns.reply
        self._utterance_reply = reply if reply is not None and not reply.barged else None
        if self._pause is not None:  # more speech over the paused reply: wait for it too
            self._pause.utterances.add(self._utterance_turn)
            self._pause.disarm()
        self._events.publish(UserSpeechStarted(started.audio_time))
        await self._report(
            SpeechStartEvent(session_id=self.session_id, turn_id=self._utterance_turn)
        )

    def _user_paused(self, paused: UtterancePaused) -> None:
        """A pause that may last: if the agent is idle, start answering what was said so far
        (preemptive generation; see the module docstring)."""
        if (
            not self.config.preemptive_generation
            or not self._turns.preempts
            or self._early is not None
            or self._utterance_turn is None
            or self._utterance_over_agent  # judged once transcribed: it may be no turn at all
            or self._busy()
            or not self._turns.idle  # a turn first would change the history it answers
            or self._group is None
        ):
            return
        early = self._early = EarlyTurn(self._utterance_turn, paused.duration)
        backchannels = self.config.backchannels
        self._group.start_soon(
            early.run,
            lambda: self._turns.recognize(paused.pcm),
            self._handler.preempt,  # type: ignore[attr-defined]  # checked by `preempts`
            # The agent is idle: "okay" or "yeah" answers it, a turn (see `_hearing`).
            lambda text: hearing(text, backchannels) != "noise",
            lambda: self._turns.idle and not self._busy(),
        )

    def _drop_early(self, reason: str) -> None:
        early, self._early = self._early, None
        if early is not None:
            early.drop(reason)

    async def _user_ended(self, ended: UtteranceEnded) -> None:
        early, self._early = self._early, None
        if early is not None and (
            early.turn_id != self._utterance_turn or early.duration != ended.duration or ended.cut
        ):
            early.drop("the utterance went on after that pause")
            early = None
        turn_id = self._utterance_turn or new_turn_id()
        self._utterance_turn = None
        self._events.publish(UserSpeechEnded(ended.duration))
        pause = self._pause
        joined = pause is not None and turn_id in pause.utterances
        if pause is not None and joined:
            self._arm(pause)  # the user went quiet: the transcripts have this long
        over = self._utterance_over_agent or joined
        said_over = pause.reply if joined and pause is not None else self._utterance_reply
        self._utterance_reply = None
        # (A reply cut meanwhile, by typed text say, was still going on when this was said.)
        answers = said_over is None or said_over.asking_last
        self._turns.queue(
            Utterance(
                ended.pcm,
                turn_id,
                time.monotonic(),
                over_agent=over,
                over=said_over,
                answers=answers,
                early=early,
            )
        )
        await self._report(
            SpeechEndEvent(session_id=self.session_id, turn_id=turn_id, duration_s=ended.duration),
        )

    def _busy(self) -> bool:
        reply = self._turns.reply
        return (reply is not None and not reply.barged) or not self._playout.idle

    # Interruptions (see the module docstring) -------------------------------------------------

    async def _speech_over_agent(self) -> None:
        """Speech long enough to be a barge-in while the agent is busy: pause the reply until
        its transcript says what it was (or cut it now, without a timeout)."""
        if self._pause is not None:
            return  # this utterance already waits with the pause (`_user_started`)
        reply = self._turns.reply
        if (
            self.config.false_interruption_timeout is None
            or self._turns.answer_waiting  # the user already said words over it: goes on
            or reply is None
            or reply.barged
            or self._utterance_turn is None
        ):
            await self._barge_in("barge-in")
            return
        self._playout.pause()  # first: the next frame out is silence
        reply.pause()
        self._pause = _Pause(reply, self._utterance_turn)
        logger.debug("turn %s: paused by speech over it", reply.turn_id)

    def _arm(self, pause: _Pause) -> None:
        pause.disarm()
        timeout = self.config.false_interruption_timeout
        assert timeout is not None and self._group is not None
        scope = pause.timer = anyio.CancelScope()
        self._group.start_soon(self._expire, pause, scope, timeout)

    async def _expire(self, pause: _Pause, scope: anyio.CancelScope, timeout: float) -> None:
        with scope:
            await anyio.sleep(timeout)
            if self._pause is pause:
                logger.debug("no transcript within %s s of the user going quiet", timeout)
                self._late |= pause.utterances
                await self._resume(pause)

    async def _judge(self, item: Utterance, text: str | None) -> bool:
        """Decide what an utterance said over the agent was, once transcribed (`text` None:
        the STT failed). True if it makes no turn."""
        pause = self._pause
        paused = pause is not None and item.turn_id in pause.utterances
        said = self._hearing(text, item.answers)
        if pause is not None and paused:
            pause.utterances.discard(item.turn_id)
            if said == "words":
                await self._barge_in("barge-in")
                return False
            pause.backchannel = pause.backchannel or said == "backchannel"
            if not pause.utterances:
                await self._resume(pause)
            return True
        # Too short to pause the agent, or its pause timed out and the reply resumed: words
        # cut the reply now if it paused for them or has more to say (waiting for it to end
        # would also hold back the utterances after this one, a real barge-in's too); over
        # its last sentence they are answered once it ends (`_speech_over_agent` cuts it if
        # the user goes on). Noise is never a turn, a backchannel is none.
        late = item.turn_id in self._late
        self._late.discard(item.turn_id)
        if said == "words":
            reply = self._turns.reply
            finishing = reply is not None and not reply.barged and reply.saying_last
            # Only the reply it was said over is cut by it (a later one, the user never
            # heard when speaking).
            over_this = item.over is None or item.over is reply
            if self._busy() and over_this and (late or not finishing):
                await self._barge_in("barge-in")
            return False
        if said == "backchannel":
            await self._interruption(self._turns.reply, "backchannel")
        return True

    def _hearing(self, text: str | None, answers: bool) -> Hearing:
        """What a transcript holds. A backchannel is one only while the agent goes on: said
        over a closing question ("yeah") or once the reply had ended ("okay") — `answers`,
        decided when it was said — it answers the agent, and counts as words."""
        if text is None:  # the STT failed: the user said something (the agent apologises)
            return "words"
        said = hearing(text, self.config.backchannels)
        if said == "backchannel" and answers:
            return "words"
        return said

    async def _resume(self, pause: _Pause) -> None:
        """The speech over the paused reply held no words: play on where it stopped."""
        self._pause = None
        pause.disarm()
        reply = pause.reply
        if self._turns.reply is reply and not reply.barged:
            self._playout.resume()
            reply.resume()
        else:  # the turn ended meanwhile (nothing was left to play): nothing to resume
            self._playout.resume()
        await self._interruption(reply, "backchannel" if pause.backchannel else "false")

    def _settle_pause(self) -> None:
        """Forget a pause being decided (the caller cuts or ends the reply)."""
        pause, self._pause = self._pause, None
        if pause is not None:
            pause.disarm()

    async def _interruption(self, reply: Reply | None, kind: InterruptionKind) -> None:
        heard = "" if reply is None else reply.spoken.heard_text()
        self._events.publish(BargeIn(heard, kind))
        await self._report(
            BargeInEvent(
                session_id=self.session_id,
                turn_id=None if reply is None else reply.turn_id,
                kind=kind,
            )
        )

    async def _barge_in(self, reason: str) -> None:
        """A real barge-in: silence now, abort the turn (tools by their policy), cut the
        history to what was heard."""
        self._playout.clear()  # first: the next frame out is silence
        self._settle_pause()
        reply = self._turns.reply
        if reply is None or reply.barged:
            return
        heard = reply.barge_in(reason)
        self._events.publish(BargeIn(heard))
        reply.end_speech()
        await self._report(BargeInEvent(session_id=self.session_id, turn_id=reply.turn_id))

    def _speech_started(self, spoken: SpokenReply, text: str) -> None:
        self._events.publish(AgentSpeechStarted(text))

    async def _report(
        self, event: SpeechStartEvent | SpeechEndEvent | STTEndEvent | BargeInEvent
    ) -> None:
        await emit(self._hooks[type(event)], event)


def _check_engine(role: str, engine: object, members: tuple[str, ...]) -> None:
    """Refuse an engine missing a member the loop needs, now rather than mid-session."""
    missing = [name for name in members if not hasattr(engine, name)]
    if missing:
        raise TypeError(
            f"VoiceLoop {role}={type(engine).__name__} lacks {', '.join(missing)}: a {role} "
            f"engine needs {', '.join(members)} (see llmrtc.voice.{role}.{role.upper()})"
        )
    for name in members:
        if name.endswith("rate") or name.endswith("samples"):
            value = getattr(engine, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise TypeError(
                    f"VoiceLoop {role}={type(engine).__name__}.{name} must be a positive int, "
                    f"got {value!r}"
                )
        elif not callable(getattr(engine, name)):
            raise TypeError(f"VoiceLoop {role}={type(engine).__name__}.{name} must be callable")
