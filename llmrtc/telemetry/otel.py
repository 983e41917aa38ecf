"""OpenTelemetry spans and metrics for llmrtc, implemented as a `Hooks`.

Names follow the OpenTelemetry GenAI semantic conventions where they define something
(`execute_tool {tool}` and `chat {model}` spans, `gen_ai.*` attributes and metrics); the rest
are llmrtc's own, fixed here: `llmrtc.session`, `llmrtc.turn`, `llmrtc.stt`, `llmrtc.tts` spans,
`llmrtc.stage_transition`, `llmrtc.tool.progress`, `llmrtc.tool.retry` and `llmrtc.tool.breaker`
span events, and the `llmrtc.*` metrics.

The tool policies on an `execute_tool` span: `llmrtc.tool.attempts` (handler runs, set when more
than 1), an `llmrtc.tool.retry` event per retry (`llmrtc.tool.retry.attempt`, the failed one;
`llmrtc.tool.retry.delay`, seconds; `error.type`; `llmrtc.tool.retry.error`, the text, only with
content capture), `llmrtc.tool.reused_from` (the earlier call whose result answered this one),
`llmrtc.tool.approval` (`approved` or `denied`, when approval was asked), and an
`llmrtc.tool.breaker` event on the call whose outcome moved its tool's breaker
(`llmrtc.tool.breaker.from`, `.state`, `.failures`). Status `unavailable` (breaker open) is an
ERROR; `denied` and `duplicate`, like `aborted`, are not (refused on purpose, nothing failed).
Metrics: `llmrtc.tool.calls` counts every status, with `llmrtc.tool.reused=true` on reuses;
`llmrtc.tool.breaker.state` (gauge per tool: 0 closed, 1 half_open, 2 open) and
`llmrtc.tool.breaker.transitions` (counter by tool and the state changed to).

What is content, recorded only with `capture_content=True` (and with a tool's
`sensitive_fields` masked even then, by key and wherever their values reappear): tool arguments
and results, transcripts, spoken and model texts, messages, a transition's reason, and error
*texts*: exception messages and the source lines of a stack trace (a message may quote an
argument or carry a connection string). Never content, always recorded: names, ids, statuses,
exception types, the frames of a stack trace (file, line, function), durations, token counts.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from llmrtc.telemetry._otel_content import exception_attributes, messages_json
from llmrtc.telemetry._otel_instruments import CACHE_READ_TOKENS, instruments_for
from llmrtc.telemetry._otel_tools import ToolSpans
from llmrtc.telemetry._otel_voice import VoiceSpans, interruption_attributes
from llmrtc.telemetry.events import (
    BargeInEvent,
    BreakerChangeEvent,
    ErrorEvent,
    LLMEndEvent,
    LLMFirstTokenEvent,
    LLMStartEvent,
    ModelFallbackEvent,
    SessionEndEvent,
    SessionStartEvent,
    SpeechEndEvent,
    STTEndEvent,
    ToolEndEvent,
    ToolProgressEvent,
    ToolRetryEvent,
    ToolStartEvent,
    TransitionEvent,
    TTSEndEvent,
    TTSStartEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from llmrtc.telemetry.hooks import Hooks

__all__ = ["OpenTelemetryHooks"]

_SCOPE = "llmrtc"


class OpenTelemetryHooks(Hooks):
    """Spans and metrics for tools, turns, model calls, playbooks, voice and sessions.

    It never installs a global provider: pass yours, or it uses the API's current global ones.

    Example:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        executor = ToolExecutor(registry, hooks=OpenTelemetryHooks(tracer_provider=provider))

    Spans are parented by ids, not by whatever span happens to be current: a tool or model call
    of a known turn is a child of that turn's span, a turn of a known session a child of the
    session's span; otherwise the caller's current span is the parent. Parallel tool calls are
    therefore siblings, never children of each other.

    A tool call's `execute_tool` span opens when its handler is about to run and is the
    current span while it runs (through `tool_call_context`), so the spans the handler creates
    itself (an HTTP client's, a database driver's), in async and sync handlers alike, are its
    children. A call that never ran (unknown tool, bad arguments, aborted while queued) gets
    its span when it ends. A handler's exception is an `exception` event on its span.
    """

    hook_timeout = 0.1  # every method is sync and quick; the bound is only a safety net

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        capture_content: bool = False,
    ) -> None:
        """Create the hooks.

        Args:
            tracer_provider: Where spans go; None uses the global tracer provider.
            meter_provider: Where metrics go; None uses the global meter provider.
            capture_content: Record content (see the module's docstring for what that is),
                masked by each tool's `sensitive_fields`. Off by default: content may be
                personal data or a secret.
        """
        self.capture_content = capture_content
        self._tracer = trace.get_tracer(_SCOPE, _version(), tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, _version(), meter_provider=meter_provider)
        self._m = instruments_for(meter)
        # key -> (span, session id, the context with the span current: a parent for children)
        self._spans: dict[str, tuple[Span, str | None, Context]] = {}
        self._tools = ToolSpans(self._tracer, self._m)
        self._voice = VoiceSpans(
            self._tracer, self._m, lambda session_id: self._parent(_session_key(session_id))
        )
        self._tts = self._voice.tts  # per session/turn: the open TTS spans, oldest first

    # Spans by id -------------------------------------------------------------------------

    def _open(self, key: str, span: Span, session_id: str | None) -> None:
        self._spans[key] = (span, session_id, trace.set_span_in_context(span))

    def _close(self, key: str) -> Span | None:
        entry = self._spans.pop(key, None)
        return None if entry is None else entry[0]

    def _parent(self, *keys: str | None) -> Context | None:
        """The context of the first open span among `keys`, else None (the current context)."""
        for key in keys:
            if key is not None:
                entry = self._spans.get(key)
                if entry is not None:
                    return entry[2]
        return None

    def _scope_parent(self, session_id: str | None, turn_id: str | None) -> Context | None:
        """Parent for work of a turn: the turn's span, else the session's, else the current."""
        return self._parent(_turn_key(turn_id), _session_key(session_id))

    def _scope_span(self, session_id: str | None, turn_id: str | None) -> Span:
        """The turn's span, else the session's, else the current span (for span events)."""
        for key in (_turn_key(turn_id), _session_key(session_id)):
            if key is not None and key in self._spans:
                return self._spans[key][0]
        return trace.get_current_span()

    # Tools ----------------------------------------------------------------------------------

    def on_tool_start(self, event: ToolStartEvent) -> None:
        """Open the call's `execute_tool` span; count the handler in flight."""
        self._tools.start(event, self._scope_parent(event.session_id, event.turn_id))

    def tool_call_context(self, event: ToolStartEvent) -> AbstractContextManager[object] | None:
        """Make the call's `execute_tool` span current while its handler runs."""
        return self._tools.current(event)

    def on_tool_end(self, event: ToolEndEvent) -> None:
        """Finish the call's `execute_tool` span with its outcome, and an `exception` event
        if the handler raised (a call that never ran gets its whole span now); count the
        call, record its run and queue time."""
        self._tools.end(event, self._scope_parent, self.capture_content)

    def on_tool_progress(self, event: ToolProgressEvent) -> None:
        """Add an `llmrtc.tool.progress` event to the call's `execute_tool` span; its
        `llmrtc.tool.progress.message` only with content capture (masked)."""
        self._tools.progress(event, self.capture_content)

    def on_tool_retry(self, event: ToolRetryEvent) -> None:
        """Add an `llmrtc.tool.retry` event to the call's `execute_tool` span (attempt, delay,
        `error.type`); the error text (`llmrtc.tool.retry.error`) only with content capture
        (masked)."""
        self._tools.retry(event, self.capture_content)

    def on_breaker_change(self, event: BreakerChangeEvent) -> None:
        """Set the tool's `llmrtc.tool.breaker.state` gauge, count the change in
        `llmrtc.tool.breaker.transitions`, and add an `llmrtc.tool.breaker` event to the
        causing call's `execute_tool` span if it is still open."""
        self._tools.breaker_change(event)

    # Turns and model calls -------------------------------------------------------------------

    def on_turn_start(self, event: TurnStartEvent) -> None:
        """Open the `llmrtc.turn` span (child of its session's span when known). A voice
        turn whose STT was reported before it started begins when that STT began, with the
        `llmrtc.stt` span as its child."""
        attributes: dict[str, Any] = {"llmrtc.turn.id": event.turn_id}
        if event.session_id is not None:
            attributes["gen_ai.conversation.id"] = event.session_id
        if event.stage_id is not None:
            attributes["llmrtc.stage.id"] = event.stage_id
        if self.capture_content and event.user_text is not None:
            attributes["llmrtc.turn.user_text"] = event.user_text
        utterance = self._voice.turn_start(event.session_id, event.turn_id)
        span = self._tracer.start_span(
            "llmrtc.turn",
            context=self._parent(_session_key(event.session_id)),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=utterance.start_ns if utterance and utterance.transcribed else None,
        )
        self._open(f"turn:{event.turn_id}", span, event.session_id)
        if utterance is not None:
            self._voice.write_stt(utterance, self._spans[f"turn:{event.turn_id}"][2])

    def on_turn_end(self, event: TurnEndEvent) -> None:
        """Close the turn span; record `llmrtc.turn.duration`."""
        span = self._close(f"turn:{event.turn_id}")
        if span is not None:
            span.set_attributes(
                {
                    "llmrtc.turn.stop_reason": event.stop_reason,
                    "llmrtc.turn.tool_calls": event.tool_calls,
                    "gen_ai.usage.input_tokens": event.input_tokens,
                    "gen_ai.usage.output_tokens": event.output_tokens,
                }
            )
            # llmrtc.stage.id stays the stage the turn started in; a change is its event.
            if self.capture_content and event.text:
                span.set_attribute("llmrtc.turn.text", event.text)
            if event.error_type is not None:
                span.set_attribute("error.type", event.error_type)
                span.set_status(Status(StatusCode.ERROR, event.error_type))
            span.end()
            self._voice.turn_end(event.session_id, event.turn_id, span)
        self._m.turn_duration.record(
            event.duration_s, {"llmrtc.turn.stop_reason": event.stop_reason}
        )

    def on_llm_start(self, event: LLMStartEvent) -> None:
        """Open the `chat {model}` span (child of its turn's span when known)."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": event.provider,
            "gen_ai.request.model": event.model,
        }
        if event.temperature is not None:
            attributes["gen_ai.request.temperature"] = event.temperature
        if event.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = event.max_tokens
        if event.tool_names:
            attributes["llmrtc.llm.tools"] = list(event.tool_names)
        if event.session_id is not None:
            attributes["gen_ai.conversation.id"] = event.session_id
        if self.capture_content and event.messages:
            attributes["gen_ai.input.messages"] = messages_json(event.messages)
        span = self._tracer.start_span(
            f"chat {event.model}",
            context=self._scope_parent(event.session_id, event.turn_id),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        self._open(f"llm:{event.request_id}", span, event.session_id)

    def on_llm_first_token(self, event: LLMFirstTokenEvent) -> None:
        """Mark the first token on the chat span."""
        entry = self._spans.get(f"llm:{event.request_id}")
        if entry is not None:
            entry[0].set_attribute("llmrtc.llm.time_to_first_token", event.latency_s)
            entry[0].add_event("llmrtc.llm.first_token")

    def on_llm_end(self, event: LLMEndEvent) -> None:
        """Close the chat span with usage; record GenAI client metrics."""
        span = self._close(f"llm:{event.request_id}")
        if span is not None:
            if event.response_model:
                span.set_attribute("gen_ai.response.model", event.response_model)
            if event.stop_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [event.stop_reason])
            if event.input_tokens is not None:
                span.set_attribute("gen_ai.usage.input_tokens", event.input_tokens)
            if event.output_tokens is not None:
                span.set_attribute("gen_ai.usage.output_tokens", event.output_tokens)
            if event.cached_input_tokens is not None:
                # The GenAI conventions' name: of the input tokens, those served from the
                # server's prompt cache (a warm prefix), counted within input_tokens too.
                span.set_attribute(
                    "gen_ai.usage.cache_read.input_tokens", event.cached_input_tokens
                )
            if self.capture_content and event.output_text:
                output = [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": event.output_text}],
                        "finish_reason": event.stop_reason or "stop",
                    }
                ]
                span.set_attribute("gen_ai.output.messages", json.dumps(output))
            if event.error_type is not None:
                span.set_attribute("error.type", event.error_type)
                span.set_status(Status(StatusCode.ERROR, event.error_type))
            span.end()
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": event.provider,
            "gen_ai.request.model": event.model,
        }
        if event.error_type is not None:
            attributes["error.type"] = event.error_type
        self._m.llm_duration.record(event.duration_s, attributes)
        for kind, tokens in (
            ("input", event.input_tokens),
            ("output", event.output_tokens),
            (CACHE_READ_TOKENS, event.cached_input_tokens),
        ):
            if tokens is not None:
                self._m.token_usage.record(tokens, {**attributes, "gen_ai.token.type": kind})

    # Playbooks ------------------------------------------------------------------------------

    def on_transition(self, event: TransitionEvent) -> None:
        """Add a `llmrtc.stage_transition` event to the turn span; count the transition."""
        attributes: dict[str, Any] = {
            "llmrtc.stage.from": event.from_stage,
            "llmrtc.stage.to": event.to_stage,
            "llmrtc.transition.id": event.transition_id,
        }
        if event.condition is not None:
            attributes["llmrtc.transition.condition"] = event.condition
        if self.capture_content and event.reason:
            attributes["llmrtc.transition.reason"] = event.reason
        self._scope_span(event.session_id, event.turn_id).add_event(
            "llmrtc.stage_transition", attributes
        )
        self._m.transitions.add(
            1, {"llmrtc.stage.from": event.from_stage, "llmrtc.stage.to": event.to_stage}
        )

    # Voice ----------------------------------------------------------------------------------

    def on_speech_end(self, event: SpeechEndEvent) -> None:
        """Keep how long the user spoke (`llmrtc.speech.duration` on the utterance's STT
        span)."""
        self._voice.speech_end(event)

    def on_stt_end(self, event: STTEndEvent) -> None:
        """Record an `llmrtc.stt` span covering the transcription: in the tree of the turn it
        starts, also when that turn starts only after it (see `on_turn_start`)."""
        self._voice.stt_end(event, self._parent(_turn_key(event.turn_id)), self.capture_content)

    def on_tts_start(self, event: TTSStartEvent) -> None:
        """Open an `llmrtc.tts` span, a child of its turn (also of a turn that already ended:
        speech may lag the model); record time to first audio when given."""
        parent = self._parent(_turn_key(event.turn_id))
        if parent is None:
            parent = self._voice.ended_turn(event.session_id, event.turn_id)
        if parent is None:
            parent = self._parent(_session_key(event.session_id))
        self._voice.tts_start(event, parent, self.capture_content)

    def on_tts_end(self, event: TTSEndEvent) -> None:
        """Close the oldest open `llmrtc.tts` span of that turn (chunks finish in order)."""
        self._voice.tts_end(event, self.capture_content)

    def on_model_fallback(self, event: ModelFallbackEvent) -> None:
        """An LLM-backed tool moves to its next model: an event on its `execute_tool` span
        (current while the handler runs). The failure text is for logs, not recorded."""
        trace.get_current_span().add_event(
            "llmrtc.tool.model_fallback",
            {
                "llmrtc.tool.failed_model": event.failed_model,
                "llmrtc.tool.next_model": event.next_model,
                "llmrtc.tool.model_attempt": event.attempt,
            },
        )

    def on_barge_in(self, event: BargeInEvent) -> None:
        """Add an `llmrtc.barge_in` event to the turn span (or, once the turn ended while its
        speech still played, to the session span, naming the turn), with what it turned out to
        be (`llmrtc.interruption.kind`)."""
        attributes = interruption_attributes(event)
        self._scope_span(event.session_id, event.turn_id).add_event("llmrtc.barge_in", attributes)

    # Sessions and errors ----------------------------------------------------------------

    def on_session_start(self, event: SessionStartEvent) -> None:
        """Open the `llmrtc.session` span; count the session active."""
        attributes: dict[str, Any] = {"gen_ai.conversation.id": event.session_id}
        if event.transport:
            attributes["llmrtc.transport"] = event.transport
        span = self._tracer.start_span(
            "llmrtc.session", kind=SpanKind.SERVER, attributes=attributes
        )
        self._open(f"session:{event.session_id}", span, event.session_id)
        self._m.sessions_active.add(1)

    def on_session_end(self, event: SessionEndEvent) -> None:
        """Close the session span, and whatever of that session is still open (marked
        incomplete), so nothing of a finished session stays in memory."""
        for key, (span, session_id, _) in list(self._spans.items()):
            if session_id == event.session_id and not key.startswith("session:"):
                del self._spans[key]
                span.set_attribute("llmrtc.incomplete", True)
                span.end()
        self._tools.abandon(event.session_id)
        self._voice.end_session(event.session_id)
        session_span = self._close(f"session:{event.session_id}")
        if session_span is not None:
            if event.reason:
                session_span.set_attribute("llmrtc.session.end_reason", event.reason)
            session_span.end()
            self._m.sessions_active.add(-1)

    def on_error(self, event: ErrorEvent) -> None:
        """Add an `exception` event to the turn (or session) span: type, component and frames;
        the message and source lines only with consent."""
        attributes = exception_attributes(event.error, capture_content=self.capture_content)
        attributes["llmrtc.error.where"] = event.where
        self._scope_span(event.session_id, event.turn_id).add_event("exception", attributes)


def _turn_key(turn_id: str | None) -> str | None:
    return None if turn_id is None else f"turn:{turn_id}"


def _session_key(session_id: str | None) -> str | None:
    return None if session_id is None else f"session:{session_id}"


def _version() -> str:
    from llmrtc._version import __version__

    return __version__
