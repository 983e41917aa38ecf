"""The `execute_tool {name}` spans of `OpenTelemetryHooks`: opened as a handler is about to
run, current while it runs, finished with the call's outcome; written whole for a call that
never ran. Also the tool metrics (counts, in flight, run and queue time) and what the tool
policies add to both: retries (`llmrtc.tool.retry` span events, `llmrtc.tool.attempts`), reuses
(`llmrtc.tool.reused_from`), approval (`llmrtc.tool.approval`) and circuit breakers (the
`llmrtc.tool.breaker.*` metrics, and an `llmrtc.tool.breaker` event on the causing call's span).

Statuses: `error`, `timeout`, `invalid_arguments`, `not_found` and `unavailable` (an open
breaker) are failures (span status ERROR, `error.type`); `aborted`, `denied` and `duplicate` are
not: the call was stopped or refused on purpose (a barge-in, a user's no, a policy), nothing
failed."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from llmrtc.telemetry._masking import mask_content, mask_text, sensitive_values
from llmrtc.telemetry._otel_content import exception_attributes
from llmrtc.telemetry._otel_instruments import BREAKER_STATE_VALUES, UNKNOWN_TOOL, Instruments
from llmrtc.telemetry.events import (
    BreakerChangeEvent,
    ToolEndEvent,
    ToolProgressEvent,
    ToolRetryEvent,
    ToolStartEvent,
)

_FAILED_STATUSES = frozenset({"error", "timeout", "invalid_arguments", "not_found", "unavailable"})
# What a span still open when its session ends gets: the call's end was never reported.
_ABANDONED: dict[str, Any] = {"llmrtc.tool.status": "aborted", "llmrtc.incomplete": True}

ParentOf = Callable[[str | None, str | None], Context | None]
"""`(session_id, turn_id) -> the parent context` (None: the current context)."""


class ToolSpans:
    """The open tool spans of one `OpenTelemetryHooks`, by execution id."""

    __slots__ = ("_constants", "_instruments", "_open", "_tracer")

    def __init__(self, tracer: Tracer, instruments: Instruments) -> None:
        self._tracer = tracer
        self._instruments = instruments
        # execution id -> (span, its start event: session, call id, arguments to mask by)
        self._open: dict[str, tuple[Span, ToolStartEvent]] = {}
        # Per tool (name, description): the span name and the attributes every call shares.
        # Only tools that ran are cached (names the model invents are unbounded).
        self._constants: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}

    def start(self, event: ToolStartEvent, parent: Context | None) -> None:
        """Open the call's span (a child of `parent`); count the handler in flight."""
        name = event.tool_name
        in_flight = self._instruments.in_flight
        in_flight[name] = in_flight.get(name, 0) + 1
        constants = self._constants.get((name, event.tool_description))
        if constants is None:
            constants = self._constants[name, event.tool_description] = _constants(
                name, event.tool_description
            )
        span_name, shared = constants
        attributes = {**shared, "gen_ai.tool.call.id": event.call_id}
        if event.session_id is not None:
            attributes["gen_ai.conversation.id"] = event.session_id
        if event.stage_id is not None:
            attributes["llmrtc.stage.id"] = event.stage_id
        if event.background:
            attributes["llmrtc.tool.background"] = True
        span = self._tracer.start_span(
            span_name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes
        )
        self._open[event.execution_id] = (span, event)

    def current(self, event: ToolStartEvent) -> CurrentSpan | None:
        """A context making the call's open span current, or None if it has none."""
        entry = self._open.get(event.execution_id)
        return None if entry is None else CurrentSpan(entry[0])

    def progress(self, event: ToolProgressEvent, capture_content: bool) -> None:
        """An `llmrtc.tool.progress` event on the call's open span (found by execution id, so
        also for a background call whose turn ended); the message is content."""
        entry = self._open.get(event.execution_id)
        if entry is None:
            return  # no span (hooks added after it started): nothing to attach it to
        attributes: dict[str, Any] = {"gen_ai.tool.call.id": event.call_id}
        if capture_content:
            secrets = sensitive_values(event.arguments, event.sensitive_fields)
            attributes["llmrtc.tool.progress.message"] = mask_text(event.message, secrets)
        entry[0].add_event("llmrtc.tool.progress", attributes)

    def retry(self, event: ToolRetryEvent, capture_content: bool) -> None:
        """An `llmrtc.tool.retry` event on the call's open span (found by execution id): the
        failed attempt, the delay before the next (s) and `error.type`; the error text is
        content (it may quote an argument), recorded masked and only with capture."""
        entry = self._open.get(event.execution_id)
        if entry is None:
            return  # no span (hooks added after it started): nothing to attach it to
        attributes: dict[str, Any] = {
            "gen_ai.tool.call.id": event.call_id,
            "llmrtc.tool.retry.attempt": event.attempt,
            "llmrtc.tool.retry.delay": event.delay_s,
            "error.type": event.error_type,
        }
        if capture_content:
            start = entry[1]
            secrets = sensitive_values(start.arguments, start.sensitive_fields)
            attributes["llmrtc.tool.retry.error"] = mask_text(event.error, secrets)
        entry[0].add_event("llmrtc.tool.retry", attributes)

    def breaker_change(self, event: BreakerChangeEvent) -> None:
        """Keep the tool's breaker state for `llmrtc.tool.breaker.state`, count the change, and
        put an `llmrtc.tool.breaker` event on the causing call's span while it is open (a call
        that never ran has none yet: its span, written at its end, shows its status)."""
        name, state = event.tool_name, event.new_state
        self._instruments.breaker_states[name] = BREAKER_STATE_VALUES[state]
        self._instruments.breaker_transitions.add(
            1, {"gen_ai.tool.name": name, "llmrtc.tool.breaker.state": state}
        )
        if event.call_id is None:
            return
        for span, start in self._open.values():  # a few open calls; breaker changes are rare
            if start.call_id == event.call_id and start.session_id == event.session_id:
                span.add_event(
                    "llmrtc.tool.breaker",
                    {
                        "llmrtc.tool.breaker.from": event.old_state,
                        "llmrtc.tool.breaker.state": state,
                        "llmrtc.tool.breaker.failures": event.failures,
                    },
                )
                return

    def end(self, event: ToolEndEvent, parent_of: ParentOf, capture_content: bool) -> None:
        """Finish the call's span with its outcome (write it whole if it never opened); count
        the call, record its run and queue time."""
        name, status = event.tool_name, event.status
        instruments = self._instruments
        # A name the model invented is unbounded: metrics get one bucket for all of them.
        key = (UNKNOWN_TOOL if status == "not_found" else name, status)
        if event.reused_from is None:
            instruments.calls[key] = instruments.calls.get(key, 0) + 1
        else:  # answered by an earlier call's result: counted apart (llmrtc.tool.reused=true)
            instruments.reused[key] = instruments.reused.get(key, 0) + 1
        if event.started:
            instruments.in_flight[name] -= 1
        failed = status in _FAILED_STATUSES
        # Everything known only now is set at once (the SDK takes a lock per call).
        attributes: dict[str, Any] = {"llmrtc.tool.status": status}
        if failed:
            attributes["error.type"] = event.error_type or status
        if event.attempts > 1:
            attributes["llmrtc.tool.attempts"] = event.attempts
        if event.reused_from is not None:
            attributes["llmrtc.tool.reused_from"] = event.reused_from
        if event.approval is not None:
            attributes["llmrtc.tool.approval"] = event.approval
        usage = event.model_usage
        if usage is not None:  # an LLM-backed tool: which model answered, and its cost
            attributes["gen_ai.response.model"] = usage.model
            attributes["llmrtc.tool.model_attempts"] = usage.attempts
            if usage.input_tokens is not None:
                attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
            if usage.output_tokens is not None:
                attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
        secrets: list[str] = []
        if capture_content:
            secrets = sensitive_values(event.arguments, event.sensitive_fields)
            attributes["gen_ai.tool.call.arguments"] = mask_content(
                event.arguments, event.sensitive_fields, secrets
            )
            if event.reasoning is not None:  # model text, like the arguments: content
                attributes["llmrtc.tool.call.reasoning"] = mask_text(event.reasoning, secrets)
            if event.result_content is not None and status == "ok":
                attributes["gen_ai.tool.call.result"] = mask_content(
                    event.result_content, event.sensitive_fields, secrets
                )
        entry = self._open.pop(event.execution_id, None)
        if entry is not None:
            span = entry[0]
            if len(attributes) == 1:  # the common case; the SDK's set_attribute is 2x cheaper
                span.set_attribute("llmrtc.tool.status", status)
            else:
                span.set_attributes(attributes)
        else:  # it never ran: one span covering the time it took to be refused or aborted
            end_ns = time.time_ns()
            span = self._tracer.start_span(
                f"execute_tool {name}",
                context=parent_of(event.session_id, event.turn_id),
                kind=SpanKind.INTERNAL,
                attributes={**_call_attributes(event), **attributes},
                start_time=end_ns - int(event.duration_s * 1e9),
            )
        if failed:
            # The description is the error sent to the model: content, as it may quote values.
            text = event.error_type or status
            if capture_content and event.error is not None:
                text = mask_text(event.error, secrets)
            span.set_status(Status(StatusCode.ERROR, text))
        if event.exception is not None:
            span.add_event(
                "exception",
                exception_attributes(
                    event.exception, capture_content=capture_content, secrets=secrets
                ),
            )
        span.end()
        if event.started:
            instruments.tool_duration.record(event.duration_s, instruments.attributes(key))
            instruments.tool_queue.record(event.queued_s, instruments.queue_attributes(name))

    def abandon(self, session_id: str | None) -> None:
        """End the spans of `session_id` still open (marked incomplete), so none leaks."""
        for execution_id, (span, start) in list(self._open.items()):
            if start.session_id == session_id:
                del self._open[execution_id]
                span.set_attributes(_ABANDONED)
                span.end()


class CurrentSpan:
    """Makes a span current in the OpenTelemetry context and restores the previous one; the
    span itself stays open (`ToolSpans.end` finishes it with the call's outcome)."""

    __slots__ = ("_context", "_token")

    def __init__(self, span: Span) -> None:
        self._context = trace.set_span_in_context(span)
        self._token: object = None

    def __enter__(self) -> None:
        self._token = otel_context.attach(self._context)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        otel_context.detach(self._token)  # type: ignore[arg-type]


def _constants(name: str, description: str) -> tuple[str, dict[str, Any]]:
    return f"execute_tool {name}", {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": description,
    }


def _call_attributes(event: ToolEndEvent) -> dict[str, Any]:
    """What a call's span gets when it opens (for a call that never ran: at its end)."""
    attributes = _constants(event.tool_name, event.tool_description)[1]
    attributes["gen_ai.tool.call.id"] = event.call_id
    if event.session_id is not None:
        attributes["gen_ai.conversation.id"] = event.session_id
    if event.stage_id is not None:
        attributes["llmrtc.stage.id"] = event.stage_id
    return attributes
