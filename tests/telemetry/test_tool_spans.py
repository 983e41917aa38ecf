"""A tool's `execute_tool` span: open while its handler runs and current inside
`tool_call_context`, so the spans the handler makes are its children; finished with the call's
outcome and, when the handler raised, an `exception` event (content only with consent)."""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.telemetry import (
    SessionEndEvent,
    SessionStartEvent,
    ToolEndEvent,
    ToolStartEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from llmrtc.testing import InMemoryTelemetry

pytestmark = pytest.mark.anyio

CARD = "4111111111111111"


def start(execution_id: str, **fields: Any) -> ToolStartEvent:
    fields.setdefault("call_id", f"call-{execution_id}")
    fields.setdefault("tool_name", "lookup")
    return ToolStartEvent(execution_id=execution_id, **fields)


def end(begun: ToolStartEvent, status: str = "ok", **fields: Any) -> ToolEndEvent:
    return ToolEndEvent(
        execution_id=begun.execution_id,
        call_id=begun.call_id,
        tool_name=begun.tool_name,
        status=status,
        arguments=begun.arguments,
        sensitive_fields=begun.sensitive_fields,
        session_id=begun.session_id,
        turn_id=begun.turn_id,
        started=True,
        duration_s=0.01,
        **fields,
    )


def raised(error: BaseException) -> BaseException:
    """`error` with a traceback, as a handler's exception has one."""
    try:
        raise error
    except BaseException as caught:
        return caught


def test_the_spans_a_handler_makes_are_children_of_its_tool_span() -> None:
    telemetry = InMemoryTelemetry()
    hooks, tracer = telemetry.hooks, telemetry.tracer("my-http-client")
    hooks.on_turn_start(TurnStartEvent(turn_id="t1"))
    event = start("x1", turn_id="t1")
    hooks.on_tool_start(event)
    context = hooks.tool_call_context(event)
    assert context is not None
    with context:
        assert trace.get_current_span().get_span_context().is_valid
        with tracer.start_as_current_span("GET /weather"):
            pass
    assert not trace.get_current_span().get_span_context().is_valid  # restored on exit
    assert telemetry.spans("execute_tool lookup") == []  # still open: the call has not ended
    hooks.on_tool_end(end(event))
    hooks.on_turn_end(TurnEndEvent(turn_id="t1", stop_reason="stop"))
    tool_span, turn = telemetry.span("execute_tool lookup"), telemetry.span("llmrtc.turn")
    assert telemetry.children(tool_span) == [telemetry.span("GET /weather")]
    assert telemetry.children(turn) == [tool_span]
    assert tool_span.attributes is not None
    assert tool_span.attributes["llmrtc.tool.status"] == "ok"
    assert tool_span.attributes["gen_ai.tool.call.id"] == "call-x1"


async def test_parallel_calls_stay_siblings_under_the_turn() -> None:
    telemetry = InMemoryTelemetry()
    hooks, tracer = telemetry.hooks, telemetry.tracer()
    hooks.on_turn_start(TurnStartEvent(turn_id="t1"))
    events = [start(f"x{i}", turn_id="t1") for i in range(3)]
    both_inside = anyio.Event()
    inside: list[str] = []

    async def handler(event: ToolStartEvent) -> None:
        hooks.on_tool_start(event)
        with hooks.tool_call_context(event) or pytest.fail("no context"):
            inside.append(event.execution_id)
            if len(inside) == len(events):
                both_inside.set()
            await both_inside.wait()  # all three handlers are running at once
            with tracer.start_as_current_span(f"query {event.execution_id}"):
                await anyio.sleep(0)

    async with anyio.create_task_group() as group:
        for event in events:
            group.start_soon(handler, event)
    for event in events:
        hooks.on_tool_end(end(event))
    hooks.on_turn_end(TurnEndEvent(turn_id="t1", stop_reason="stop"))
    turn = telemetry.span("llmrtc.turn")
    tool_spans = telemetry.children(turn)
    assert len(tool_spans) == 3
    for tool_span in tool_spans:
        assert tool_span.attributes is not None
        execution = str(tool_span.attributes["gen_ai.tool.call.id"]).removeprefix("call-")
        assert [s.name for s in telemetry.children(tool_span)] == [f"query {execution}"]


async def test_a_sync_handler_in_a_worker_thread_sees_the_span_through_contextvars() -> None:
    telemetry = InMemoryTelemetry()
    hooks, tracer = telemetry.hooks, telemetry.tracer()
    event = start("x1")
    hooks.on_tool_start(event)

    def sync_handler() -> str:
        with tracer.start_as_current_span("db.query"):
            return threading.current_thread().name

    with hooks.tool_call_context(event) or pytest.fail("no context"):
        # A thread started with a copy of the context, as the executor runs sync handlers.
        thread_name = await anyio.to_thread.run_sync(sync_handler)
    hooks.on_tool_end(end(event))
    assert thread_name != threading.current_thread().name
    assert telemetry.children(telemetry.span("execute_tool lookup")) == [telemetry.span("db.query")]


def test_without_a_start_there_is_no_context_and_the_span_is_written_at_the_end() -> None:
    telemetry = InMemoryTelemetry()
    never_ran = start("x9", tool_name="lookupWether")
    assert telemetry.hooks.tool_call_context(never_ran) is None
    telemetry.hooks.on_tool_end(
        ToolEndEvent(
            execution_id="x9",
            call_id="c9",
            tool_name="lookupWether",
            status="not_found",
            error_type="not_found",
        )
    )
    span = telemetry.span("execute_tool lookupWether")
    assert span.status.status_code == StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "not_found"


def test_an_exception_is_an_event_with_type_and_frames_but_no_text_by_default() -> None:
    telemetry = InMemoryTelemetry()
    event = start("x1", arguments={"card": CARD}, sensitive_fields=("card",))
    telemetry.hooks.on_tool_start(event)
    error = raised(KeyError(f"postgres://admin:hunter2@db/cards?card={CARD}"))
    telemetry.hooks.on_tool_end(
        end(
            event,
            "error",
            error="tool 'lookup' failed because of an internal error",
            error_type="KeyError",
            exception=error,
        )
    )
    span = telemetry.span("execute_tool lookup")
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "KeyError"
    (exception,) = [e for e in span.events if e.name == "exception"]
    attributes = dict(exception.attributes or {})
    assert attributes["exception.type"] == "KeyError"
    assert "exception.message" not in attributes
    stack = str(attributes["exception.stacktrace"])
    assert f'"{__file__}"' in stack and "in raised" in stack  # where it failed
    dumped = json.dumps([dict(span.attributes or {}), attributes, span.status.description])
    for secret in ("hunter2", CARD, "raise error"):  # no message, no source line
        assert secret not in dumped


def test_with_consent_the_exception_text_is_recorded_with_sensitive_values_masked() -> None:
    telemetry = InMemoryTelemetry(capture_content=True)
    event = start("x1", arguments={"card": CARD, "city": "Oslo"}, sensitive_fields=("card",))
    telemetry.hooks.on_tool_start(event)
    try:
        try:
            raise ConnectionError(f"card {CARD} declined by postgres://db")
        except ConnectionError as cause:
            raise RuntimeError("payment failed") from cause
    except RuntimeError as error:
        telemetry.hooks.on_tool_end(
            end(
                event,
                "error",
                error="tool 'lookup' failed because of an internal error",
                error_type="RuntimeError",
                exception=error,
            )
        )
    span = telemetry.span("execute_tool lookup")
    (exception,) = [e for e in span.events if e.name == "exception"]
    attributes = dict(exception.attributes or {})
    assert attributes["exception.message"] == "payment failed"
    stack = str(attributes["exception.stacktrace"])
    assert "ConnectionError: card *** declined by postgres://db" in stack  # the cause, masked
    assert "direct cause of the following exception" in stack
    assert CARD not in json.dumps([dict(span.attributes or {}), attributes])
    assert span.status.description == "tool 'lookup' failed because of an internal error"


def test_a_tool_span_left_open_when_its_session_ends_is_closed_as_incomplete() -> None:
    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    hooks.on_session_start(SessionStartEvent(session_id="s1"))
    hooks.on_tool_start(start("x1", session_id="s1"))
    hooks.on_tool_start(start("x2", session_id="other"))
    hooks.on_session_end(SessionEndEvent(session_id="s1"))
    (span,) = telemetry.spans("execute_tool lookup")
    assert span.attributes is not None
    assert span.attributes["llmrtc.incomplete"] is True
    assert span.attributes["gen_ai.conversation.id"] == "s1"
    assert span.parent is not None  # a child of the session's span
    assert span.parent.span_id == telemetry.span("llmrtc.session").context.span_id


async def test_a_handlers_exception_through_the_executor_reaches_the_span() -> None:
    @tool
    async def connect() -> None:
        """Connect to the database."""
        raise ConnectionError("postgres://admin:hunter2@db")

    telemetry = InMemoryTelemetry()
    results = await ToolExecutor(ToolRegistry([connect]), hooks=telemetry.hooks).execute(
        [ToolCall("c1", "connect")]
    )
    assert results[0].status == "error" and "hunter2" not in (results[0].error or "")
    span = telemetry.span("execute_tool connect")
    (exception,) = [e for e in span.events if e.name == "exception"]
    assert dict(exception.attributes or {})["exception.type"] == "ConnectionError"
    assert "hunter2" not in json.dumps(dict(exception.attributes or {}))


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_through_the_executor_async_and_sync_handler_spans_are_children(
    anyio_backend: str,
) -> None:
    telemetry = InMemoryTelemetry()
    tracer = telemetry.tracer("instrumentation")

    @tool
    async def fetch(city: str) -> str:
        """Fetch over HTTP."""
        with tracer.start_as_current_span(f"GET /weather/{city}"):
            await anyio.sleep(0.01)
        return city

    @tool
    def store(row: str) -> str:
        """Write to the database (a sync handler: runs in a worker thread)."""
        with tracer.start_as_current_span(f"INSERT {row}"):
            return threading.current_thread().name

    executor = ToolExecutor(ToolRegistry([fetch, store]), hooks=telemetry.hooks)
    telemetry.hooks.on_turn_start(TurnStartEvent(turn_id="t1"))
    results = await executor.execute(
        [
            ToolCall("a", "fetch", {"city": "oslo"}),
            ToolCall("b", "fetch", {"city": "lima"}),
            ToolCall("c", "store", {"row": "r1"}),
        ],
        turn_id="t1",
    )
    telemetry.hooks.on_turn_end(TurnEndEvent(turn_id="t1", stop_reason="stop"))
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert results[2].result != threading.current_thread().name  # it did run in a thread
    by_call = {
        str((s.attributes or {})["gen_ai.tool.call.id"]): s
        for s in telemetry.spans()
        if s.name.startswith("execute_tool ")
    }
    expected = {"a": "GET /weather/oslo", "b": "GET /weather/lima", "c": "INSERT r1"}
    for call_id, child in expected.items():
        assert [s.name for s in telemetry.children(by_call[call_id])] == [child], call_id
    turn = telemetry.span("llmrtc.turn")
    assert sorted(s.name for s in telemetry.children(turn)) == [
        "execute_tool fetch",
        "execute_tool fetch",
        "execute_tool store",
    ]  # the parallel calls are siblings under the turn
