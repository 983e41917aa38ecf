"""The turn worker of a `VoiceLoop`: utterances, typed texts and proactive deadlines, in order.

An utterance is transcribed while the turn before it may still be settling (a "finish" tool
running after a barge-in); the turn itself starts only once that one ended, so the tool's real
result is in the history before the next model request. Each turn runs as a task of the loop's
task group, speaking through a `Reply`; after a barge-in its history is cut to what was heard.

Proactive turns: `handler.next_deadline()` is due while the user is silent and no turn runs
or plays. The handler's timer starts when its turn ends (`TurnCompleted`, or its events end
for any other reason, an error included), while the reply may play on for seconds, and user
speech that made no turn (no words, or an STT failure and its apology) does not restart it.
So the timeout the handler set (deadline minus that start) is counted again from when the line
last went quiet: the agent stopped speaking or the user did.

Update turns: the worker reads the handler's `late_results()` (the final results of background
calls, `ToolDefinition(background=True)`). One that lands while no turn runs or plays and the
user is silent starts an update turn (`run_update_turn`) at once: the agent tells the user. One
that lands while the user speaks, while a turn runs or while another update turn is spoken
waits: the next model request carries it (the user's turn, or the update turn run once the
line is quiet again); nothing is said over the agent or the user, and nothing is dropped.
"""

from __future__ import annotations

import inspect
import logging
import math
import re
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal, cast

import anyio
import anyio.abc

from llmrtc.agent.events import AgentEvent
from llmrtc.agent.handler import BackgroundHandler, TurnHandler
from llmrtc.agent.history import ConversationHistory
from llmrtc.execution.observers import context_hooks, observe_tools
from llmrtc.telemetry.events import STTEndEvent, ToolProgressEvent
from llmrtc.telemetry.hooks import CompositeHooks, Hooks
from llmrtc.voice._early_turn import EarlyTurn
from llmrtc.voice._heard import cut_to_heard
from llmrtc.voice.events import SpeechError, Transcript
from llmrtc.voice.reply import Reply, Voice, engine_name
from llmrtc.voice.stt import STT

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Utterance:
    """A finished utterance, waiting for its transcript."""

    pcm: bytes  # at the VAD's rate
    turn_id: str
    ended_at: float  # time.monotonic() when the end of speech was decided
    over_agent: bool = False
    """It started while the agent spoke or a turn ran: its transcript is judged (a
    backchannel or noise is no turn; see `VoiceLoop`) before it may start one."""
    over: Reply | None = None
    """The reply it was said over (None: the agent was idle when it started)."""
    answers: bool = True
    """When it ended, the agent was asking its closing question, had finished, or was idle:
    a backchannel word ("yeah") in it answers the agent. Decided when it was said, not when
    its transcript arrives (the reply may have ended or moved on by then)."""
    early: EarlyTurn | None = None
    """Its last pause's transcript and early answer (preemptive generation): no speech came
    after that pause, so that transcript is this utterance's."""


@dataclass(frozen=True)
class Typed:
    """A typed turn (`send_text`)."""

    text: str
    at: float


@dataclass(frozen=True)
class _Deadline:
    at: float


@dataclass(frozen=True)
class _Update:
    """Late results of background calls landed while the line is quiet: the agent tells them."""

    at: float


_Kind = Literal["user", "timeout", "update", "progress"]
"""What a turn answers: the user's words, the handler's proactive deadline, late results; or
a tool's progress, spoken without the handler (`VoiceConfig.speak_progress`)."""
_LATE_POLL = 0.25
"""While a late result waits for the user to go quiet, how often (s) the worker looks again."""
_LATE_CHECK = 1.0
"""While idle, how often (s) the worker asks the handler whether late results wait that its
`late_results()` iterator did not see (an application took them from that queue)."""

Hearing = Literal["words", "noise", "backchannel"]
"""What a transcript of speech over the agent holds."""

_FILLERS = frozenset({"uh", "um", "uhm", "umm", "hm", "hmm", "mm", "mmm", "er", "erm", "ah", "eh"})
"""Sounds that are not words (Whisper writes them for breaths, coughs and hesitations)."""
_ANNOTATION = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*")
"""What STT engines write for non-speech: "[coughs]", "(door closes)", "*sniff*"."""
_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)*")


_SPELLINGS = {"ok": ("okay",), "mhm": ("mm", "hmm"), "mhmm": ("mm", "hmm"), "mmhm": ("mm", "hmm")}
"""One spelling for words STT engines write several ways (Whisper writes "Mhm." for mm-hmm)."""


def _tokens(text: str) -> list[str]:
    words = _TOKEN.findall(_ANNOTATION.sub(" ", text.lower().replace("-", " ")))
    return [part for word in words for part in _SPELLINGS.get(word, (word,))]


def hearing(text: str, backchannels: tuple[str, ...]) -> Hearing:
    """Judge a transcript: `"noise"` (nothing but fillers, annotations and punctuation),
    `"backchannel"` (besides those, only phrases of `backchannels`, as `VoiceConfig`
    describes), else `"words"`."""
    tokens = _tokens(text)
    phrases = sorted({tuple(_tokens(p)) for p in backchannels} - {()}, key=len, reverse=True)
    found: Hearing = "noise"
    at = 0
    while at < len(tokens):
        # Phrases first: "uh-huh" and "mm-hmm" are made of filler sounds.
        match = next((p for p in phrases if tuple(tokens[at : at + len(p)]) == p), None)
        if match is not None:
            found = "backchannel"
            at += len(match)
        elif tokens[at] in _FILLERS:
            at += 1
        else:
            return "words"
    return found


def new_turn_id() -> str:
    """A fresh turn id, shaped like the runner's own."""
    return f"turn_{uuid.uuid4().hex[:12]}"


def _single(error: Exception) -> Exception:
    """The one exception inside (nested) single-exception groups: what a task group re-raised."""
    while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _accepts(method: Callable[..., Any], keyword: str) -> bool:
    """Whether `method` takes `keyword` (by name or through `**kwargs`): handlers and engines
    written before a keyword was added keep working without it."""
    try:
        parameters = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in parameters)


def _clean_hints(hints: object) -> tuple[str, ...]:
    """`speech_hints()`'s answer as a tuple of non-empty strings: a bare string is one hint,
    anything else that is not a string is dropped (logged), so a handler's mistake costs the
    hints, never the turn."""
    if isinstance(hints, str):
        hints = (hints,)
    if not isinstance(hints, Iterable):
        logger.warning("speech_hints() returned %s, not strings; no hints", type(hints).__name__)
        return ()
    kept = tuple(hint.strip() for hint in hints if isinstance(hint, str) and hint.strip())
    return kept


class _ProgressVoice(Hooks):
    """Hears the tools' progress for `VoiceConfig.speak_progress` (added to every tool batch
    of the loop's turns through `observe_tools`, next to what the caller observes)."""

    def __init__(self, speak: Callable[[str], None]) -> None:
        self._speak = speak

    def on_tool_progress(self, event: ToolProgressEvent) -> None:
        """Offer the message to be spoken (it is only if the line is free)."""
        self._speak(event.message)


class TurnWorker:
    """Runs a loop's turns one after another (see the module docstring)."""

    def __init__(
        self,
        handler: TurnHandler,
        stt: STT,
        voice: Voice,
        *,
        input_rate: int,
        in_speech: Callable[[], bool],
        report: Callable[[STTEndEvent], Awaitable[None]],
        judge: Callable[[Utterance, str | None], Awaitable[bool]],
        turn_starting: Callable[[], None] = lambda: None,
    ) -> None:
        self._handler = handler
        self._judge = judge
        self._stt = stt
        self._voice = voice
        self._input_rate = input_rate
        self._in_speech = in_speech
        self._report = report
        self._turn_id_ok = _accepts(handler.run_turn, "turn_id")
        self._timeout_turn_id_ok = _accepts(handler.run_timeout_turn, "turn_id")
        self._preemption_ok = _accepts(handler.run_turn, "preemption") and callable(
            getattr(handler, "preempt", None)
        )
        # A handler written before background calls existed has no late results to tell.
        update = getattr(handler, "run_update_turn", None)
        self._updates_ok = callable(update) and callable(getattr(handler, "late_results", None))
        self._update_turn_id_ok = self._updates_ok and _accepts(update, "turn_id")  # type: ignore[arg-type]
        self._late_due = False  # a late result landed since the last update turn started
        self._progress_said: float | None = None  # when a progress message was last spoken
        # An engine written before `hints` existed (`transcribe(self, pcm)`) is never given them.
        self._hints_ok = _accepts(stt.transcribe, "hints")
        self._items: deque[Utterance | Typed] = deque()
        self._wakeup: anyio.Event | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._idle: anyio.Event | None = None
        self._fired_deadline: float | None = None
        # When the handler's timer last started (its turn's TurnCompleted) and when the line
        # last went quiet (the agent's speech or the user's utterance ended): see the docstring.
        self._timer_start: float | None = None
        self._quiet_since: float | None = None
        self._accepting = True
        self._held: Typed | None = None  # taken from the queue, waiting for the turn before
        self._working = False  # an item is taken from the queue and its turn not started yet
        self._turn_starting = turn_starting  # a turn starts: the history is about to change
        self._turn_scope: anyio.CancelScope | None = None
        self.reply: Reply | None = None
        """The reply of the turn running (or still playing), if any."""
        self.answer_waiting = False
        """Words said over the agent wait to be answered once its reply ends (it was saying
        its last sentence: see `VoiceLoop`)."""

    def queue(self, item: Utterance | Typed) -> None:
        """Add work after what is queued."""
        if self._accepting:
            self._items.append(item)
            self._wake()

    @property
    def preempts(self) -> bool:
        """Whether the handler can start a turn's answer early (`PreemptingHandler`)."""
        return self._preemption_ok

    @property
    def idle(self) -> bool:
        """No turn runs or waits, nothing is queued: a turn on the utterance being spoken
        would start at once, on the history as it is now."""
        return (
            self._idle is not None
            and self._idle.is_set()
            and not self._items
            and self._held is None
            and not self._working
            and self._accepting
        )

    @property
    def typed_waiting(self) -> int:
        """Typed turns queued and not started yet."""
        return sum(isinstance(item, Typed) for item in self._items) + (self._held is not None)

    def drop_typed(self) -> int:
        """Forget the typed turns not started yet (utterances stay: the user said them);
        returns how many were dropped."""
        dropped = self.typed_waiting
        if dropped:
            self._items = deque(item for item in self._items if not isinstance(item, Typed))
            self._held = None
        return dropped

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    async def run(self, group: anyio.abc.TaskGroup) -> None:
        """Take the work in order, forever (turns run as tasks of `group`)."""
        self._group = group
        self._idle = anyio.Event()
        self._idle.set()
        if self._updates_ok:
            group.start_soon(self._hear_late_results)
        while True:
            self._working = False
            item = await self._next_item()
            self._working = True
            if isinstance(item, Utterance):
                self._quiet_since = max(self._quiet_since or 0.0, item.ended_at)
                text = await self._transcribe(item)
                # Speech over the agent: the loop decides whether it was an interruption
                # (it then aborts the turn before this one waits for it) or nothing to answer.
                if item.over_agent and await self._judge(item, text):
                    if item.early is not None:
                        item.early.drop("no turn")
                    continue
                self.answer_waiting = bool(item.over_agent and text)
                try:
                    await self._idle.wait()
                finally:
                    self.answer_waiting = False
                early = item.early if text else None
                if item.early is not None and early is None:
                    item.early.drop("no words to answer")
                if text is None:
                    self._start(item.turn_id, item.ended_at, say=self._voice.config.apology_text)
                elif text:
                    self._start(item.turn_id, item.ended_at, user_text=text, early=early)
            elif isinstance(item, Typed):
                self._held = item
                try:
                    await self._idle.wait()
                finally:
                    held, self._held = self._held, None
                if held is not None:  # else dropped meanwhile (`drop_typed`)
                    self._start(new_turn_id(), item.at, user_text=item.text)
            elif isinstance(item, _Update):
                self._start(new_turn_id(), item.at, kind="update")
            else:
                self._start(new_turn_id(), item.at, kind="timeout")

    async def _hear_late_results(self) -> None:
        """Note each late result as it lands (its delivery to the model does not depend on
        this: the next model request carries it) and wake the worker to tell it."""
        async for result in cast(BackgroundHandler, self._handler).late_results():
            logger.info(
                "the background call %s (%s) ended %s; the agent tells the user when the line "
                "is quiet",
                result.call_id,
                result.tool_name,
                result.status,
            )
            self._late_due = True
            self._wake()

    def abort(self) -> None:
        """Take no more work and cancel the turn running, "finish" tool calls included (each
        still gets its one result: the runner settles a cancelled turn)."""
        self._accepting = False
        self._items.clear()
        self._held = None
        if self._turn_scope is not None:
            self._turn_scope.cancel()

    async def close(self, timeout: float) -> bool:
        """Take no more work and wait (at most `timeout` s, shielded) for the turn running to
        settle. The caller has already cut its speech and aborted it. False if it timed out."""
        self._accepting = False
        self._items.clear()
        self._held = None
        if self._idle is None:
            return True
        with anyio.CancelScope(shield=True), anyio.move_on_after(timeout) as waited:
            await self._idle.wait()
        return not waited.cancelled_caught

    async def _next_item(self) -> Utterance | Typed | _Deadline | _Update:
        assert self._idle is not None
        while True:
            if self._items:
                return self._items.popleft()
            timeout = math.inf
            if self._updates_ok and self._idle.is_set():
                # Woken by `late_results()`; or, as that queue yields each result once (an
                # application reading it too takes some), found by asking the handler.
                waiting = getattr(self._handler, "late_results_waiting", None)
                if self._late_due or waiting:
                    if self._in_speech():
                        # Speech that makes no utterance (too short) wakes nobody: look again.
                        timeout = _LATE_POLL
                    else:
                        self._late_due = False
                        # A turn since (the user's) may have carried them to the model already.
                        if waiting is None or waiting:
                            return _Update(time.monotonic())
                elif waiting is not None:
                    timeout = _LATE_CHECK
            if self._idle.is_set() and not self._in_speech():
                deadline = self._handler.next_deadline()
                # A deadline a timeout turn did not move is not run again.
                if deadline is not None and deadline != self._fired_deadline:
                    now = time.monotonic()
                    due = deadline
                    if self._timer_start is not None and self._quiet_since is not None:
                        due = max(due, self._quiet_since + deadline - self._timer_start)
                    if now >= due:
                        self._fired_deadline = deadline
                        return _Deadline(now)
                    timeout = min(timeout, due - now)
            self._wakeup = anyio.Event()
            with anyio.move_on_after(timeout):
                await self._wakeup.wait()
            self._wakeup = None

    async def recognize(self, pcm: bytes) -> str:
        """Transcribe `pcm` (mono s16le at the loop's input rate) with the handler's speech
        hints; raises what the engine raises."""
        stt = self._stt
        if stt.sample_rate != self._input_rate:
            from llmrtc.voice.audio import resample

            pcm = resample(pcm, self._input_rate, stt.sample_rate)
        # What the handler expects to hear now (a `HintingHandler`: its current stage's tool
        # words and keywords) biases the recogniser. A handler without the method, or one whose
        # method fails, gives no hints; an engine gets `hints=` only when there are some.
        hints: tuple[str, ...] = ()
        speech_hints = getattr(self._handler, "speech_hints", None)
        if self._hints_ok and callable(speech_hints):
            try:
                hints = _clean_hints(speech_hints())
            except Exception:
                logger.exception("speech_hints() failed; no hints")
        transcript = stt.transcribe(pcm, hints=hints) if hints else stt.transcribe(pcm)
        return str(await transcript).strip()

    async def _transcribe(self, item: Utterance) -> str | None:
        """The utterance's transcript ("" for no words), or None when the STT failed. An
        utterance heard early (its last pause's transcript) is not transcribed again."""
        stt, voice = self._stt, self._voice
        audio_seconds = len(item.pcm) / 2 / self._input_rate
        model = engine_name(stt)
        early = item.early
        started = time.perf_counter()
        try:
            # Heard early (its last pause, no speech since): that pass is this utterance's.
            text = None if early is None else await early.transcript()
            if text is None:  # not heard early (or dropped before it was): transcribe now
                text = await self.recognize(item.pcm)
                took = time.perf_counter() - started
            else:
                took = early.stt_seconds if early is not None else 0.0
            ended = STTEndEvent(
                session_id=voice.session_id,
                turn_id=item.turn_id,
                text=text,
                duration_s=took,
                audio_duration_s=audio_seconds,
                model=model,
            )
        except Exception as exc:  # STTError or any engine failure: apologise, go on
            logger.warning("turn %s: STT failed, the agent apologises: %s", item.turn_id, exc)
            voice.publish(SpeechError("stt", str(exc), type(exc).__name__))
            failed_early = early is not None and early.error is exc
            await self._report(
                STTEndEvent(
                    session_id=voice.session_id,
                    turn_id=item.turn_id,
                    duration_s=early.stt_seconds
                    if failed_early and early is not None
                    else time.perf_counter() - started,
                    audio_duration_s=audio_seconds,
                    model=model,
                    error_type=type(exc).__name__,
                ),
            )
            await voice.report_error(exc, "stt", item.turn_id)
            return None
        voice.publish(Transcript(text, True))
        await self._report(ended)
        return text

    def _start(
        self,
        turn_id: str,
        started_at: float,
        *,
        user_text: str | None = None,
        kind: _Kind = "user",
        say: str | None = None,
        early: EarlyTurn | None = None,
    ) -> None:
        if not self._accepting:
            if early is not None:
                early.drop("the loop takes no more turns")
            return
        # An answer started early for an utterance still being said was on the history before
        # this turn: it no longer fits (and would hold the model server meanwhile).
        self._turn_starting()
        reply = Reply(self._voice, turn_id=turn_id, started_at=started_at)
        self.reply = reply
        self._idle = anyio.Event()
        assert self._group is not None
        self._group.start_soon(self._turn, reply, user_text, kind, say, early)

    async def _turn(
        self,
        reply: Reply,
        user_text: str | None,
        kind: _Kind,
        say: str | None,
        early: EarlyTurn | None,
    ) -> None:
        with anyio.CancelScope() as scope, self._observing():
            self._turn_scope = scope
            try:
                await self._run_turn(reply, user_text, kind, say, early)
            finally:
                if early is not None:  # not taken (the turn failed first): stop it
                    early.drop("the turn ended")

    def _observing(self) -> AbstractContextManager[None]:
        """With `speak_progress`: the turn's tool batches (background calls they start too)
        also report progress to the loop, besides the hooks the caller observes them with."""
        if not self._voice.config.speak_progress:
            return nullcontext()
        listener = _ProgressVoice(self.progress)
        outer = context_hooks.get()
        return observe_tools(listener if outer is None else CompositeHooks([outer, listener]))

    def progress(self, message: str) -> None:
        """A tool reported progress: with `speak_progress`, say it if nothing plays, the user
        is silent and none was said in the last `progress_interval` — inside the reply of a
        turn waiting on its tools, or as a reply of its own while the agent is idle."""
        config = self._voice.config
        now = time.monotonic()
        if (
            not config.speak_progress
            or not message
            or (
                self._progress_said is not None
                and now - self._progress_said < config.progress_interval
            )
            or self._in_speech()
            or not self._voice.playout.idle
        ):
            return
        reply = self.reply
        if reply is not None:
            if reply.say_aside(message):
                self._progress_said = now
        elif self.idle:
            self._progress_said = now
            self._start(new_turn_id(), now, kind="progress", say=message)

    async def _run_turn(
        self,
        reply: Reply,
        user_text: str | None,
        kind: _Kind,
        say: str | None,
        early: EarlyTurn | None = None,
    ) -> None:
        history = self._handler.history
        before = {id(m) for m in history.messages}
        config = self._voice.config
        try:
            if say is not None:  # no handler turn: an apology, or a tool's progress
                await reply.say(say, filler=kind == "progress")
            else:
                try:
                    await reply.speak_turn(self._events(reply, user_text, kind, early))
                except Exception as exc:  # a handler bug: its history is valid; apologise
                    error = _single(exc)
                    logger.exception("turn %s failed; the agent apologises", reply.turn_id)
                    self._voice.publish(SpeechError("turn", str(error), type(error).__name__))
                    await self._voice.report_error(error, "voice.turn", reply.turn_id)
                    # An apology a TTS failure already queued is not said twice.
                    apologised = reply.fail()
                    if not reply.barged and not apologised:
                        await reply.say(config.error_text, filler=True)
            await reply.finish()
            self._quiet_since = time.monotonic()  # the agent stopped speaking
            if reply.completed_at is not None:
                self._timer_start = reply.completed_at
            if reply.interrupted or reply.ledger.unspoken:
                await self._cut_to_heard(reply, history, before, interrupted=reply.interrupted)
        except anyio.get_cancelled_exc_class():
            # Aborted (`abort`, or the loop cancelled): the turn skipped the cut above, and the
            # history would keep text the user never heard, unmarked. Cut it to what was
            # played, as after a barge-in; shielded, as the cancellation is still delivered.
            with anyio.CancelScope(shield=True):
                reply.spoken.close()
                reply.end_speech()
                await self._cut_to_heard(reply, history, before, interrupted=True)
            raise
        finally:
            if self._turn_scope is not None and self.reply is reply:
                self._turn_scope = None
            if self.reply is reply:
                self.reply = None
            assert self._idle is not None
            self._idle.set()
            self._wake()

    async def _cut_to_heard(
        self, reply: Reply, history: ConversationHistory, before: set[int], *, interrupted: bool
    ) -> None:
        """Leave the turn's assistant messages holding only what the user heard."""
        ledger = reply.ledger
        playout = self._voice.playout
        heard = (
            ledger.heard(playout.unfinished_seconds_per_char, playout.sample_rate)
            if interrupted
            else ledger.all_but_unspoken()
        )
        try:
            cut_to_heard(history, before, heard, ledger.total_words, interrupted=interrupted)
        except Exception as exc:  # never end the session over it: the history is valid
            logger.exception("turn %s: the history keeps the whole answer", reply.turn_id)
            await self._voice.report_error(exc, "voice.history", reply.turn_id)

    def _events(
        self, reply: Reply, user_text: str | None, kind: _Kind, early: EarlyTurn | None
    ) -> AsyncIterator[AgentEvent]:
        signal = reply.controller.signal
        handler = self._handler
        if kind == "update":
            updating = cast(BackgroundHandler, handler)  # checked by `_updates_ok`
            if self._update_turn_id_ok:
                return updating.run_update_turn(abort_signal=signal, turn_id=reply.turn_id)  # type: ignore[call-arg]
            return updating.run_update_turn(abort_signal=signal)
        if kind == "timeout":
            if self._timeout_turn_id_ok:
                return handler.run_timeout_turn(abort_signal=signal, turn_id=reply.turn_id)  # type: ignore[call-arg]
            return handler.run_timeout_turn(abort_signal=signal)
        # Keywords a handler written before them lacks are left out (`_accepts`).
        extra: dict[str, Any] = {}
        if self._turn_id_ok:
            extra["turn_id"] = reply.turn_id
        preemption = early.preemption if early is not None else None
        if preemption is not None and self._preemption_ok and preemption.user_text == user_text:
            extra["preemption"] = preemption
        return handler.run_turn(user_text, abort_signal=signal, **extra)
