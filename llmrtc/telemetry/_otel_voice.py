"""The voice spans of `OpenTelemetryHooks`: `llmrtc.stt` and `llmrtc.tts`, in their turn's tree.

A voice loop reports an utterance before the turn that answers it exists: the user stops
speaking (`on_speech_end`), STT finishes (`on_stt_end`), and only then does the turn start
(`on_turn_start`), all with the turn id the loop chose when the user started speaking. So the
utterance is kept here as a pending record per (session, turn id) until its turn starts; the
turn span then starts when the transcription started, and the `llmrtc.stt` span is written as
its child with its exact times. TTS chunks may still be synthesised after their turn ended
(the model finished before the speech did): the contexts of recently ended turns are kept so
those chunks stay children of their turn.

Nothing grows without bound: at most `MAX_PENDING` utterances wait per session (an older one
is dropped when a newer one comes; its STT span is then written under the session), at most
`MAX_ENDED_TURNS` ended turns are remembered in all, and a session's end drops all of it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from llmrtc.telemetry._otel_instruments import Instruments
from llmrtc.telemetry.events import (
    BargeInEvent,
    SpeechEndEvent,
    STTEndEvent,
    TTSEndEvent,
    TTSStartEvent,
)

MAX_PENDING = 4
"""Utterances per session whose turn has not started yet (a few may queue behind a running
turn after barge-ins)."""
MAX_ENDED_TURNS = 256
"""Ended turns, across sessions, whose late TTS chunks still become their children."""

_Key = tuple[str | None, str]  # (session id, turn id)

SessionParent = Callable[[str | None], Context | None]
"""`(session_id) -> the session span's context` (None: the current context)."""


def interruption_attributes(event: BargeInEvent) -> dict[str, Any]:
    """The attributes of an `llmrtc.barge_in` span event: the turn and what the speech over
    the agent turned out to be (`llmrtc.interruption.kind`: `barge_in`, `false` or
    `backchannel`)."""
    attributes: dict[str, Any] = {"llmrtc.interruption.kind": event.kind}
    if event.turn_id is not None:
        attributes["llmrtc.turn.id"] = event.turn_id
    return attributes


class PendingUtterance:
    """What was reported of an utterance whose turn has not started yet."""

    __slots__ = ("attributes", "end_ns", "error_type", "speech_s", "start_ns")

    def __init__(self) -> None:
        self.speech_s: float | None = None  # from on_speech_end
        self.start_ns = 0  # the STT's times (0: no STT reported yet)
        self.end_ns = 0
        self.attributes: dict[str, Any] = {}
        self.error_type: str | None = None

    @property
    def transcribed(self) -> bool:
        """Whether its STT ended (there is a span to write)."""
        return self.end_ns != 0


class VoiceSpans:
    """The pending utterances, open TTS spans and recently ended turns of one hooks object."""

    __slots__ = ("_ended", "_instruments", "_pending", "_session_parent", "_tracer", "tts")

    def __init__(
        self, tracer: Tracer, instruments: Instruments, session_parent: SessionParent
    ) -> None:
        self._tracer = tracer
        self._instruments = instruments
        self._session_parent = session_parent
        self._pending: dict[str | None, OrderedDict[str, PendingUtterance]] = {}
        self._ended: OrderedDict[_Key, Context] = OrderedDict()
        self.tts: dict[str, list[Span]] = {}
        """Per `"{session}:{turn}"`: the open TTS spans of that turn, oldest first."""

    # Utterances ------------------------------------------------------------------------------

    def _pending_for(self, session_id: str | None, turn_id: str) -> PendingUtterance:
        """The pending record of that utterance, made if new (dropping the oldest past the
        bound)."""
        waiting = self._pending.setdefault(session_id, OrderedDict())
        record = waiting.get(turn_id)
        if record is None:
            record = waiting[turn_id] = PendingUtterance()
            while len(waiting) > MAX_PENDING:
                _, dropped = waiting.popitem(last=False)
                self.write_stt(dropped, self._session_parent(session_id))
        return record

    def speech_end(self, event: SpeechEndEvent) -> None:
        """Keep how long the user spoke, for the STT span of that utterance."""
        if event.turn_id is not None:
            self._pending_for(event.session_id, event.turn_id).speech_s = event.duration_s

    def stt_end(self, event: STTEndEvent, turn: Context | None, content: bool) -> None:
        """Record the STT of an utterance: as a child of `turn` when that turn's span is open,
        pending until the turn starts when it has a turn id, else under its session."""
        end_ns = time.time_ns()
        record = (
            self._pending_for(event.session_id, event.turn_id)
            if event.turn_id is not None
            else PendingUtterance()
        )
        record.start_ns = end_ns - int(event.duration_s * 1e9)
        record.end_ns = end_ns
        attributes = record.attributes = {"llmrtc.audio.duration": event.audio_duration_s}
        if event.model:
            attributes["llmrtc.stt.model"] = event.model
        if content and event.text:
            attributes["llmrtc.stt.text"] = event.text
        record.error_type = event.error_type
        if event.turn_id is None:
            self.write_stt(record, self._session_parent(event.session_id))
        elif turn is not None:  # the turn already runs: nothing to wait for
            self.write_stt(self._take(event.session_id, event.turn_id), turn)

    def turn_start(self, session_id: str | None, turn_id: str) -> PendingUtterance | None:
        """The utterance that starts this turn, if one was reported (taken out of pending)."""
        return self._take(session_id, turn_id)

    def _take(self, session_id: str | None, turn_id: str) -> PendingUtterance | None:
        waiting = self._pending.get(session_id)
        if waiting is None:
            return None
        record = waiting.pop(turn_id, None)
        if not waiting:
            del self._pending[session_id]
        return record

    def write_stt(self, record: PendingUtterance | None, parent: Context | None) -> None:
        """Write the utterance's `llmrtc.stt` span under `parent`, if its STT was reported."""
        if record is None or not record.transcribed:
            return  # speech with no transcription (yet): no span
        attributes = record.attributes
        if record.speech_s is not None:
            attributes["llmrtc.speech.duration"] = record.speech_s
        if record.error_type is not None:
            attributes["error.type"] = record.error_type
        span = self._tracer.start_span(
            "llmrtc.stt",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=record.start_ns,
        )
        if record.error_type is not None:
            span.set_status(Status(StatusCode.ERROR, record.error_type))
        span.end(end_time=record.end_ns)

    # Turns -----------------------------------------------------------------------------------

    def turn_end(self, session_id: str | None, turn_id: str, span: Span) -> None:
        """Remember an ended turn, so its late TTS chunks still join its tree."""
        key = (session_id, turn_id)
        self._ended[key] = trace.set_span_in_context(span)
        self._ended.move_to_end(key)
        while len(self._ended) > MAX_ENDED_TURNS:
            self._ended.popitem(last=False)

    def ended_turn(self, session_id: str | None, turn_id: str | None) -> Context | None:
        """The context of a recently ended turn (a parent for its late chunks), else None."""
        return None if turn_id is None else self._ended.get((session_id, turn_id))

    # TTS -------------------------------------------------------------------------------------

    def tts_start(self, event: TTSStartEvent, parent: Context | None, content: bool) -> None:
        """Open an `llmrtc.tts` span for a chunk; record time to first audio when given."""
        attributes: dict[str, Any] = {}
        if event.voice:
            attributes["llmrtc.tts.voice"] = event.voice
        if content and event.text:
            attributes["llmrtc.tts.text"] = event.text
        if event.time_to_first_audio_s is not None:
            attributes["llmrtc.voice.time_to_first_audio"] = event.time_to_first_audio_s
            self._instruments.first_audio.record(event.time_to_first_audio_s)
        span = self._tracer.start_span(
            "llmrtc.tts", context=parent, kind=SpanKind.INTERNAL, attributes=attributes
        )
        self.tts.setdefault(f"{event.session_id}:{event.turn_id}", []).append(span)

    def tts_end(self, event: TTSEndEvent, content: bool) -> None:
        """Close the oldest open `llmrtc.tts` span of that turn (chunks finish in order)."""
        key = f"{event.session_id}:{event.turn_id}"
        open_spans = self.tts.get(key)
        if not open_spans:
            return
        span = open_spans.pop(0)
        if not open_spans:
            del self.tts[key]
        attributes: dict[str, Any] = {
            "llmrtc.audio.duration": event.audio_duration_s,
            "llmrtc.tts.duration": event.duration_s,
            "llmrtc.tts.interrupted": event.interrupted,
        }
        if content and event.text:
            attributes["llmrtc.tts.text"] = event.text
        if event.error_type is not None:
            attributes["error.type"] = event.error_type
            span.set_status(Status(StatusCode.ERROR, event.error_type))
        span.set_attributes(attributes)
        span.end()

    # Sessions --------------------------------------------------------------------------------

    def end_session(self, session_id: str | None) -> None:
        """Forget the session (call it before its span ends): its waiting utterances' STT
        spans are written under the session (their turn never started), its open TTS spans
        end marked incomplete."""
        parent = self._session_parent(session_id)
        for record in self._pending.pop(session_id, {}).values():
            self.write_stt(record, parent)
        prefix = f"{session_id}:"
        for key in [k for k in self.tts if k.startswith(prefix)]:
            for span in self.tts.pop(key):
                span.set_attribute("llmrtc.incomplete", True)
                span.end()
        for ended in [k for k in self._ended if k[0] == session_id]:
            del self._ended[ended]
