"""OpenTelemetry spans and metrics for llmrtc, implemented as a `Hooks`.

Names follow the OpenTelemetry GenAI semantic conventions where they define something
(`execute_tool {tool}` and `chat {model}` spans, `gen_ai.*` attributes and metrics); the rest
are llmrtc's own, fixed here: `llmrtc.session`, `llmrtc.turn`, `llmrtc.stt`, `llmrtc.tts` spans,
`llmrtc.stage_transition` span events, and the `llmrtc.*` metrics.

Content (arguments, results, transcripts, messages, error texts that may quote values) is
recorded only with `capture_content=True`, and a tool's `sensitive_fields` are masked even then.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider

from llmrtc.telemetry._masking import mask_content, mask_text, sensitive_values
from llmrtc.telemetry.hooks import (
    BargeInEvent,
    ErrorEvent,
    Hooks,
    LLMEndEvent,
    LLMFirstTokenEvent,
    LLMStartEvent,
    SessionEndEvent,
    SessionStartEvent,
    STTEndEvent,
    ToolEndEvent,
    ToolStartEvent,
    TransitionEvent,
    TTSEndEvent,
    TTSStartEvent,
    TurnEndEvent,
    TurnStartEvent,
)

__all__ = ["OpenTelemetryHooks"]

_SCOPE = "llmrtc"
_FAILED_TOOL_STATUSES = frozenset({"error", "timeout", "invalid_arguments", "not_found"})


def _ns(seconds_ago: float = 0.0) -> int:
    return time.time_ns() - int(seconds_ago * 1e9)


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
            capture_content: Record arguments, results, transcripts and messages (masked by
                each tool's `sensitive_fields`). Off by default: content may be personal data.
        """
        from llmrtc import __version__

        self.capture_content = capture_content
        self._tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, __version__, meter_provider=meter_provider)
        self._tool_duration = meter.create_histogram(
            "llmrtc.tool.call.duration", unit="s", description="Tool handler run time."
        )
        # Call counts and handlers in flight are kept here and read at collection time
        # (observable instruments): a synchronous SDK metric point costs ~8 us per call.
        self._calls: dict[tuple[str, str], int] = {}
        self._in_flight: dict[str, int] = {}
        meter.create_observable_counter(
            "llmrtc.tool.calls",
            callbacks=[self._observe_calls],
            unit="{call}",
            description="Tool calls, by result status.",
        )
        meter.create_observable_up_down_counter(
            "llmrtc.tool.in_flight",
            callbacks=[self._observe_in_flight],
            unit="{call}",
            description="Tool handlers running now.",
        )
        self._tool_queue = meter.create_histogram(
            "llmrtc.tool.queue.duration",
            unit="s",
            description="Time a tool call waited for a concurrency slot.",
        )
        self._turn_duration = meter.create_histogram(
            "llmrtc.turn.duration", unit="s", description="Conversational turn duration."
        )
        self._first_audio = meter.create_histogram(
            "llmrtc.voice.time_to_first_audio",
            unit="s",
            description="End of user speech to the first audio of the answer.",
        )
        self._token_usage = meter.create_histogram(
            "gen_ai.client.token.usage", unit="{token}", description="Tokens per model request."
        )
        self._llm_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Model request duration."
        )
        self._sessions_active = meter.create_up_down_counter(
            "llmrtc.sessions.active", unit="{session}", description="Sessions open now."
        )
        self._transitions = meter.create_counter(
            "llmrtc.playbook.transitions", unit="{transition}", description="Stage transitions."
        )
        self._spans: dict[str, Span] = {}  # open spans by kind-prefixed id
        self._tool_attributes: dict[tuple[str, str], dict[str, Any]] = {}

    # Parents ------------------------------------------------------------------------------

    def _parent(self, *keys: str | None) -> Context | None:
        """The context of the first open span among `keys`, else None (the current context)."""
        for key in keys:
            if key is not None:
                span = self._spans.get(key)
                if span is not None:
                    return trace.set_span_in_context(span)
        return None

    @staticmethod
    def _turn_key(turn_id: str | None) -> str | None:
        return None if turn_id is None else f"turn:{turn_id}"

    @staticmethod
    def _session_key(session_id: str | None) -> str | None:
        return None if session_id is None else f"session:{session_id}"

    def _scope_span(self, session_id: str | None, turn_id: str | None) -> Span:
        """The turn's span, else the session's, else the current span (for span events)."""
        for key in (self._turn_key(turn_id), self._session_key(session_id)):
            if key is not None and key in self._spans:
                return self._spans[key]
        return trace.get_current_span()

    # Tools ----------------------------------------------------------------------------------

    def on_tool_start(self, event: ToolStartEvent) -> None:
        """Count the handler in flight (the span itself is written when the call ends)."""
        name = event.tool_name
        self._in_flight[name] = self._in_flight.get(name, 0) + 1

    def on_tool_end(self, event: ToolEndEvent) -> None:
        """Write the call's `execute_tool` span (every call, also those that never ran)."""
        name, status = event.tool_name, event.status
        key = (name, status)
        self._calls[key] = self._calls.get(key, 0) + 1
        if event.started:
            self._in_flight[name] -= 1
        # One SDK call per tool call: the span is created complete, spanning the handler's run
        # (start = end - duration). Setting attributes one by one after start costs ~5 us each.
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.description": event.tool_description,
            "llmrtc.tool.status": status,
        }
        if event.session_id is not None:
            attributes["gen_ai.conversation.id"] = event.session_id
        if event.stage_id is not None:
            attributes["llmrtc.stage.id"] = event.stage_id
        failed = status in _FAILED_TOOL_STATUSES
        if failed:
            attributes["error.type"] = event.error_type or status
        if self.capture_content:
            secrets = sensitive_values(event.arguments, event.sensitive_fields)
            attributes["gen_ai.tool.call.arguments"] = mask_content(
                event.arguments, event.sensitive_fields, secrets
            )
            if event.result_content is not None and status == "ok":
                attributes["gen_ai.tool.call.result"] = mask_content(
                    event.result_content, event.sensitive_fields, secrets
                )
        end_ns = time.time_ns()
        span = self._tracer.start_span(
            f"execute_tool {name}",
            context=self._parent(self._turn_key(event.turn_id)),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=end_ns - int(event.duration_s * 1e9),
        )
        if failed:
            span.set_status(Status(StatusCode.ERROR, self._error_text(event)))
        span.end(end_time=end_ns)
        if event.started:
            metric_attributes = self._tool_attributes.get(key)
            if metric_attributes is None:
                metric_attributes = {"gen_ai.tool.name": name, "llmrtc.tool.status": status}
                self._tool_attributes[key] = metric_attributes
            self._tool_duration.record(event.duration_s, metric_attributes)
            self._tool_queue.record(event.queued_s, {"gen_ai.tool.name": name})

    def _observe_calls(self, options: CallbackOptions) -> Iterable[Observation]:
        # list() copies under the GIL: the exporter thread may collect while the loop counts.
        for (name, status), count in list(self._calls.items()):
            yield Observation(count, {"gen_ai.tool.name": name, "llmrtc.tool.status": status})

    def _observe_in_flight(self, options: CallbackOptions) -> Iterable[Observation]:
        for name, count in list(self._in_flight.items()):
            yield Observation(count, {"gen_ai.tool.name": name})

    def _error_text(self, event: ToolEndEvent) -> str:
        """The status description: the error message only with consent (it may quote values)."""
        if not self.capture_content or event.error is None:
            return event.error_type or event.status
        secrets = sensitive_values(event.arguments, event.sensitive_fields)
        return mask_text(event.error, secrets)

    # Turns and model calls -------------------------------------------------------------------

    def on_turn_start(self, event: TurnStartEvent) -> None:
        """Open the `llmrtc.turn` span (child of its session's span when known)."""
        attributes: dict[str, Any] = {"llmrtc.turn.id": event.turn_id}
        if event.session_id is not None:
            attributes["gen_ai.conversation.id"] = event.session_id
        if event.stage_id is not None:
            attributes["llmrtc.stage.id"] = event.stage_id
        if self.capture_content and event.user_text is not None:
            attributes["llmrtc.turn.user_text"] = event.user_text
        self._spans[f"turn:{event.turn_id}"] = self._tracer.start_span(
            "llmrtc.turn",
            context=self._parent(self._session_key(event.session_id)),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )

    def on_turn_end(self, event: TurnEndEvent) -> None:
        """Close the turn span; record `llmrtc.turn.duration`."""
        span = self._spans.pop(f"turn:{event.turn_id}", None)
        if span is not None:
            span.set_attributes(
                {
                    "llmrtc.turn.stop_reason": event.stop_reason,
                    "llmrtc.turn.tool_calls": event.tool_calls,
                    "gen_ai.usage.input_tokens": event.input_tokens,
                    "gen_ai.usage.output_tokens": event.output_tokens,
                }
            )
            if event.stage_id is not None:
                span.set_attribute("llmrtc.stage.id", event.stage_id)
            if self.capture_content and event.text:
                span.set_attribute("llmrtc.turn.text", event.text)
            if event.error_type is not None:
                span.set_attribute("error.type", event.error_type)
                span.set_status(Status(StatusCode.ERROR, event.error_type))
            span.end()
        self._turn_duration.record(event.duration_s, {"llmrtc.turn.stop_reason": event.stop_reason})

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
            attributes["gen_ai.input.messages"] = _json(event.messages)
        self._spans[f"llm:{event.request_id}"] = self._tracer.start_span(
            f"chat {event.model}",
            context=self._parent(self._turn_key(event.turn_id)),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )

    def on_llm_first_token(self, event: LLMFirstTokenEvent) -> None:
        """Mark the first token on the chat span."""
        span = self._spans.get(f"llm:{event.request_id}")
        if span is not None:
            span.set_attribute("llmrtc.llm.time_to_first_token", event.latency_s)
            span.add_event("gen_ai.first_token")

    def on_llm_end(self, event: LLMEndEvent) -> None:
        """Close the chat span with usage; record GenAI client metrics."""
        span = self._spans.pop(f"llm:{event.request_id}", None)
        if span is not None:
            if event.response_model:
                span.set_attribute("gen_ai.response.model", event.response_model)
            if event.stop_reason:
                span.set_attribute("gen_ai.response.finish_reasons", [event.stop_reason])
            if event.input_tokens is not None:
                span.set_attribute("gen_ai.usage.input_tokens", event.input_tokens)
            if event.output_tokens is not None:
                span.set_attribute("gen_ai.usage.output_tokens", event.output_tokens)
            if self.capture_content and event.output_text:
                span.set_attribute("gen_ai.output.messages", _json([event.output_text]))
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
        self._llm_duration.record(event.duration_s, attributes)
        for kind, tokens in (("input", event.input_tokens), ("output", event.output_tokens)):
            if tokens is not None:
                self._token_usage.record(tokens, {**attributes, "gen_ai.token.type": kind})

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
        self._transitions.add(
            1, {"llmrtc.stage.from": event.from_stage, "llmrtc.stage.to": event.to_stage}
        )

    # Voice ----------------------------------------------------------------------------------

    def on_stt_end(self, event: STTEndEvent) -> None:
        """Record an `llmrtc.stt` span covering the transcription."""
        attributes: dict[str, Any] = {"llmrtc.audio.duration": event.audio_duration_s}
        if event.model:
            attributes["llmrtc.stt.model"] = event.model
        if self.capture_content and event.text:
            attributes["llmrtc.stt.text"] = event.text
        span = self._tracer.start_span(
            "llmrtc.stt",
            context=self._parent(
                self._turn_key(event.turn_id), self._session_key(event.session_id)
            ),
            attributes=attributes,
            start_time=_ns(event.duration_s),
        )
        span.end()

    def on_tts_start(self, event: TTSStartEvent) -> None:
        """Open an `llmrtc.tts` span; record time to first audio when given."""
        attributes: dict[str, Any] = {}
        if event.voice:
            attributes["llmrtc.tts.voice"] = event.voice
        if self.capture_content and event.text:
            attributes["llmrtc.tts.text"] = event.text
        self._spans[f"tts:{event.session_id}:{event.turn_id}"] = self._tracer.start_span(
            "llmrtc.tts",
            context=self._parent(
                self._turn_key(event.turn_id), self._session_key(event.session_id)
            ),
            attributes=attributes,
        )
        if event.time_to_first_audio_s is not None:
            self._first_audio.record(event.time_to_first_audio_s)

    def on_tts_end(self, event: TTSEndEvent) -> None:
        """Close the `llmrtc.tts` span."""
        span = self._spans.pop(f"tts:{event.session_id}:{event.turn_id}", None)
        if span is not None:
            span.set_attribute("llmrtc.audio.duration", event.audio_duration_s)
            span.set_attribute("llmrtc.tts.interrupted", event.interrupted)
            span.end()

    def on_barge_in(self, event: BargeInEvent) -> None:
        """Add an `llmrtc.barge_in` event to the turn (or session) span."""
        self._scope_span(event.session_id, event.turn_id).add_event("llmrtc.barge_in")

    # Sessions and errors ----------------------------------------------------------------

    def on_session_start(self, event: SessionStartEvent) -> None:
        """Open the `llmrtc.session` span; count the session active."""
        attributes: dict[str, Any] = {"gen_ai.conversation.id": event.session_id}
        if event.transport:
            attributes["llmrtc.transport"] = event.transport
        self._spans[f"session:{event.session_id}"] = self._tracer.start_span(
            "llmrtc.session", kind=SpanKind.SERVER, attributes=attributes
        )
        self._sessions_active.add(1)

    def on_session_end(self, event: SessionEndEvent) -> None:
        """Close the session span."""
        span = self._spans.pop(f"session:{event.session_id}", None)
        if span is not None:
            if event.reason:
                span.set_attribute("llmrtc.session.end_reason", event.reason)
            span.end()
            self._sessions_active.add(-1)

    def on_error(self, event: ErrorEvent) -> None:
        """Add an `exception` event (type and component; the message only with consent)."""
        attributes: dict[str, Any] = {
            "exception.type": _qualified_name(event.error),
            "llmrtc.error.where": event.where,
        }
        if self.capture_content:
            attributes["exception.message"] = str(event.error)
        self._scope_span(event.session_id, event.turn_id).add_event("exception", attributes)


def _qualified_name(error: BaseException) -> str:
    cls = type(error)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _json(value: Any) -> str:
    def plain(item: Any) -> Any:
        if hasattr(item, "model_dump"):
            return item.model_dump(mode="json")
        if isinstance(item, Mapping):
            return dict(item)
        return str(item)

    return json.dumps(value, default=plain, ensure_ascii=False)
