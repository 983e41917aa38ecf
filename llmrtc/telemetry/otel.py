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
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation
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
    error_type_name,
)

__all__ = ["OpenTelemetryHooks"]

_SCOPE = "llmrtc"
_FAILED_TOOL_STATUSES = frozenset({"error", "timeout", "invalid_arguments", "not_found"})


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
        self.capture_content = capture_content
        self._tracer = trace.get_tracer(_SCOPE, _version(), tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, _version(), meter_provider=meter_provider)
        self._m = _instruments_for(meter)
        self._spans: dict[str, tuple[Span, str | None]] = {}  # key -> (span, session id)
        self._tts: dict[str, list[Span]] = {}  # per session/turn: a stack of open TTS spans

    # Spans by id -------------------------------------------------------------------------

    def _open(self, key: str, span: Span, session_id: str | None) -> None:
        self._spans[key] = (span, session_id)

    def _close(self, key: str) -> Span | None:
        entry = self._spans.pop(key, None)
        return None if entry is None else entry[0]

    def _parent(self, *keys: str | None) -> Context | None:
        """The context of the first open span among `keys`, else None (the current context)."""
        for key in keys:
            if key is not None and key in self._spans:
                return trace.set_span_in_context(self._spans[key][0])
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
        """Count the handler in flight (the span itself is written when the call ends)."""
        in_flight = self._m.in_flight
        in_flight[event.tool_name] = in_flight.get(event.tool_name, 0) + 1

    def on_tool_end(self, event: ToolEndEvent) -> None:
        """Write the call's `execute_tool` span (every call, also those that never ran)."""
        name, status = event.tool_name, event.status
        # A name the model invented is unbounded: metrics get one bucket for all of them.
        metric_name = _UNKNOWN_TOOL if status == "not_found" else name
        instruments = self._m
        key = (metric_name, status)
        instruments.calls[key] = instruments.calls.get(key, 0) + 1
        if event.started:
            instruments.in_flight[name] -= 1
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
            context=self._scope_parent(event.session_id, event.turn_id),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=end_ns - int(event.duration_s * 1e9),
        )
        if failed:
            span.set_status(Status(StatusCode.ERROR, self._error_text(event)))
        span.end(end_time=end_ns)
        if event.started:
            instruments.tool_duration.record(event.duration_s, instruments.attributes(key))
            instruments.tool_queue.record(event.queued_s, {"gen_ai.tool.name": name})

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
        span = self._tracer.start_span(
            "llmrtc.turn",
            context=self._parent(_session_key(event.session_id)),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._open(f"turn:{event.turn_id}", span, event.session_id)

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
            attributes["gen_ai.input.messages"] = _messages_json(event.messages)
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
        for kind, tokens in (("input", event.input_tokens), ("output", event.output_tokens)):
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

    def on_stt_end(self, event: STTEndEvent) -> None:
        """Record an `llmrtc.stt` span covering the transcription."""
        attributes: dict[str, Any] = {"llmrtc.audio.duration": event.audio_duration_s}
        if event.model:
            attributes["llmrtc.stt.model"] = event.model
        if self.capture_content and event.text:
            attributes["llmrtc.stt.text"] = event.text
        end_ns = time.time_ns()
        span = self._tracer.start_span(
            "llmrtc.stt",
            context=self._scope_parent(event.session_id, event.turn_id),
            attributes=attributes,
            start_time=end_ns - int(event.duration_s * 1e9),
        )
        span.end(end_time=end_ns)

    def on_tts_start(self, event: TTSStartEvent) -> None:
        """Open an `llmrtc.tts` span; record time to first audio when given."""
        attributes: dict[str, Any] = {}
        if event.voice:
            attributes["llmrtc.tts.voice"] = event.voice
        if self.capture_content and event.text:
            attributes["llmrtc.tts.text"] = event.text
        span = self._tracer.start_span(
            "llmrtc.tts",
            context=self._scope_parent(event.session_id, event.turn_id),
            attributes=attributes,
        )
        self._tts.setdefault(f"{event.session_id}:{event.turn_id}", []).append(span)
        if event.time_to_first_audio_s is not None:
            self._m.first_audio.record(event.time_to_first_audio_s)

    def on_tts_end(self, event: TTSEndEvent) -> None:
        """Close the oldest open `llmrtc.tts` span of that turn (chunks finish in order)."""
        key = f"{event.session_id}:{event.turn_id}"
        open_spans = self._tts.get(key)
        if not open_spans:
            return
        span = open_spans.pop(0)
        if not open_spans:
            del self._tts[key]
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
        span = self._tracer.start_span(
            "llmrtc.session", kind=SpanKind.SERVER, attributes=attributes
        )
        self._open(f"session:{event.session_id}", span, event.session_id)
        self._m.sessions_active.add(1)

    def on_session_end(self, event: SessionEndEvent) -> None:
        """Close the session span, and whatever of that session is still open (marked
        incomplete), so nothing of a finished session stays in memory."""
        for key, (span, session_id) in list(self._spans.items()):
            if session_id == event.session_id and not key.startswith("session:"):
                del self._spans[key]
                span.set_attribute("llmrtc.incomplete", True)
                span.end()
        for key in [k for k in self._tts if k.startswith(f"{event.session_id}:")]:
            for span in self._tts.pop(key):
                span.set_attribute("llmrtc.incomplete", True)
                span.end()
        session_span = self._close(f"session:{event.session_id}")
        if session_span is not None:
            if event.reason:
                session_span.set_attribute("llmrtc.session.end_reason", event.reason)
            session_span.end()
            self._m.sessions_active.add(-1)

    def on_error(self, event: ErrorEvent) -> None:
        """Add an `exception` event (type and component; the message only with consent)."""
        attributes: dict[str, Any] = {
            "exception.type": error_type_name(event.error),
            "llmrtc.error.where": event.where,
        }
        if self.capture_content:
            attributes["exception.message"] = str(event.error)
        self._scope_span(event.session_id, event.turn_id).add_event("exception", attributes)


def _turn_key(turn_id: str | None) -> str | None:
    return None if turn_id is None else f"turn:{turn_id}"


def _session_key(session_id: str | None) -> str | None:
    return None if session_id is None else f"session:{session_id}"


def _version() -> str:
    from llmrtc import __version__

    return __version__


def _messages_json(messages: Any) -> str:
    """Messages in the GenAI conventions' shape: `[{"role", "parts": [{"type", ...}]}]`."""
    out: list[dict[str, Any]] = []
    for message in messages:
        data = message.model_dump(mode="json") if hasattr(message, "model_dump") else message
        if not isinstance(data, Mapping):
            out.append({"role": "user", "parts": [{"type": "text", "content": str(data)}]})
            continue
        parts: list[dict[str, Any]] = []
        if data.get("content"):
            kind = "tool_call_response" if data.get("role") == "tool" else "text"
            part: dict[str, Any] = {"type": kind, "content": data["content"]}
            if kind == "tool_call_response":
                part["id"] = data.get("call_id")
            parts.append(part)
        for call in data.get("tool_calls") or ():
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("call_id"),
                    "name": call.get("name"),
                    "arguments": call.get("arguments"),
                }
            )
        out.append({"role": data.get("role", "user"), "parts": parts})
    return json.dumps(out, default=str, ensure_ascii=False)


# Instruments, shared per meter ----------------------------------------------------------------

_UNKNOWN_TOOL = "_unknown"
# Bucket boundaries: the GenAI conventions' advice for operation durations and token counts;
# tool calls and queue waits are mostly milliseconds, so their scale starts lower.
_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                     40.96, 81.92]  # fmt: skip
_TOOL_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                 10.0, 30.0, 60.0]  # fmt: skip
_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                  16777216, 67108864]  # fmt: skip


class _Instruments:
    """One set of instruments per meter, shared by every `OpenTelemetryHooks` on it (one per
    session is the common pattern: separate observable callbacks would each report their own
    partial counts under the same metric name)."""

    def __init__(self, meter: Meter) -> None:
        # Call counts and handlers in flight are kept here and read at collection time
        # (observable instruments): a synchronous SDK metric point costs ~8 us per call.
        self.calls: dict[tuple[str, str], int] = {}
        self.in_flight: dict[str, int] = {}
        self._attributes: dict[tuple[str, str], dict[str, str]] = {}
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
        self.tool_duration = meter.create_histogram(
            "llmrtc.tool.call.duration",
            unit="s",
            description="Tool handler run time.",
            explicit_bucket_boundaries_advisory=_TOOL_BUCKETS,
        )
        self.tool_queue = meter.create_histogram(
            "llmrtc.tool.queue.duration",
            unit="s",
            description="Time a tool call waited for a concurrency slot.",
            explicit_bucket_boundaries_advisory=_TOOL_BUCKETS,
        )
        self.turn_duration = meter.create_histogram(
            "llmrtc.turn.duration",
            unit="s",
            description="Conversational turn duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.first_audio = meter.create_histogram(
            "llmrtc.voice.time_to_first_audio",
            unit="s",
            description="End of user speech to the first audio of the answer.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens per model request.",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.llm_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Model request duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.sessions_active = meter.create_up_down_counter(
            "llmrtc.sessions.active", unit="{session}", description="Sessions open now."
        )
        self.transitions = meter.create_counter(
            "llmrtc.playbook.transitions", unit="{transition}", description="Stage transitions."
        )

    def attributes(self, key: tuple[str, str]) -> dict[str, str]:
        """The (cached) metric attributes for a tool name and status."""
        attributes = self._attributes.get(key)
        if attributes is None:
            attributes = {"gen_ai.tool.name": key[0], "llmrtc.tool.status": key[1]}
            self._attributes[key] = attributes
        return attributes

    def _observe_calls(self, options: CallbackOptions) -> Iterable[Observation]:
        # list() copies under the GIL: the exporter thread may collect while the loop counts.
        for (name, status), count in list(self.calls.items()):
            yield Observation(count, {"gen_ai.tool.name": name, "llmrtc.tool.status": status})

    def _observe_in_flight(self, options: CallbackOptions) -> Iterable[Observation]:
        for name, count in list(self.in_flight.items()):
            yield Observation(count, {"gen_ai.tool.name": name})


_instruments_lock = threading.Lock()
_instruments: dict[int, tuple[Meter, _Instruments]] = {}


def _instruments_for(meter: Meter) -> _Instruments:
    with _instruments_lock:
        entry = _instruments.get(id(meter))
        if entry is None or entry[0] is not meter:
            entry = (meter, _Instruments(meter))
            _instruments[id(meter)] = entry
        return entry[1]
