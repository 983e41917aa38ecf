"""OpenTelemetry for the tool policies: `llmrtc.tool.retry` span events and
`llmrtc.tool.attempts`, `llmrtc.tool.reused_from` (and `llmrtc.tool.reused=true` on the calls
counter), `llmrtc.tool.approval`, the breaker gauge and transition counter, and which of the new
statuses are errors (`unavailable`) and which are not (`denied`, `duplicate`); no content without
capture. The events go through `emit` to `OpenTelemetryHooks` (exact attributes), and through
a real `ToolExecutor` whose tools use each policy."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from llmrtc import (
    Approval,
    CircuitBreaker,
    RetryPolicy,
    ToolCall,
    ToolCallResult,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    tool,
)
from llmrtc.telemetry import emit
from llmrtc.telemetry.events import (
    BreakerChangeEvent,
    ToolEndEvent,
    ToolRetryEvent,
    ToolStartEvent,
)
from llmrtc.testing import InMemoryTelemetry

pytestmark = pytest.mark.anyio

CARD = "4111111111111111"
ERROR_TEXT = f"ConnectionError: card {CARD} refused by host db-secret-7"


def _calls(telemetry: InMemoryTelemetry) -> dict[tuple[Any, ...], int]:
    """`llmrtc.tool.calls` by (tool, status, reused)."""
    return {
        (
            p.attributes["gen_ai.tool.name"],
            p.attributes["llmrtc.tool.status"],
            p.attributes.get("llmrtc.tool.reused", False),
        ): p.value
        for p in telemetry.points("llmrtc.tool.calls")
    }


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _everything(span: ReadableSpan) -> str:
    """All a span records (attributes, status, events), as text to search for content."""
    events = [(e.name, dict(e.attributes or {})) for e in span.events]
    return json.dumps(
        [_attributes(span), span.status.description, events], default=str, ensure_ascii=False
    )


async def _retried_call(telemetry: InMemoryTelemetry, status: str = "ok") -> ReadableSpan:
    """A call that failed twice, was retried twice and ended with `status` on its third run."""
    hooks = telemetry.hooks
    arguments = {"card": CARD, "amount": 5}
    start = ToolStartEvent(
        execution_id="x1",
        call_id="c1",
        tool_name="charge",
        arguments=arguments,
        sensitive_fields=("card",),
        session_id="s1",
    )
    await emit(hooks, start)
    for attempt, delay in ((1, 0.2), (2, 0.4)):
        await emit(
            hooks,
            ToolRetryEvent(
                execution_id="x1",
                call_id="c1",
                tool_name="charge",
                attempt=attempt,
                delay_s=delay,
                error=ERROR_TEXT,
                error_type="ConnectionError",
                session_id="s1",
            ),
        )
    await emit(
        hooks,
        ToolEndEvent(
            execution_id="x1",
            call_id="c1",
            tool_name="charge",
            status=status,
            arguments=arguments,
            sensitive_fields=("card",),
            error=None if status == "ok" else ERROR_TEXT,
            error_type=None if status == "ok" else "ConnectionError",
            started=True,
            duration_s=0.7,
            attempts=3,
            session_id="s1",
        ),
    )
    return telemetry.span("execute_tool charge")


async def test_retries_are_span_events_and_the_span_counts_attempts() -> None:
    telemetry = InMemoryTelemetry()
    span = await _retried_call(telemetry)
    assert _attributes(span)["llmrtc.tool.attempts"] == 3
    assert span.status.status_code is not StatusCode.ERROR
    retries = [dict(e.attributes or {}) for e in span.events if e.name == "llmrtc.tool.retry"]
    assert retries == [
        {
            "gen_ai.tool.call.id": "c1",
            "llmrtc.tool.retry.attempt": 1,
            "llmrtc.tool.retry.delay": 0.2,
            "error.type": "ConnectionError",
        },
        {
            "gen_ai.tool.call.id": "c1",
            "llmrtc.tool.retry.attempt": 2,
            "llmrtc.tool.retry.delay": 0.4,
            "error.type": "ConnectionError",
        },
    ]


async def test_retry_error_text_only_with_capture_and_masked() -> None:
    telemetry = InMemoryTelemetry()
    span = await _retried_call(telemetry, status="error")
    recorded = _everything(span)
    assert CARD not in recorded and "db-secret-7" not in recorded
    assert span.status.status_code is StatusCode.ERROR

    telemetry = InMemoryTelemetry(capture_content=True)
    span = await _retried_call(telemetry, status="error")
    texts = [
        str((e.attributes or {})["llmrtc.tool.retry.error"])
        for e in span.events
        if e.name == "llmrtc.tool.retry"
    ]
    assert texts == [ERROR_TEXT.replace(CARD, "***")] * 2  # masked by the argument's value
    assert CARD not in _everything(span)


async def test_one_attempt_sets_no_attempts_attribute() -> None:
    telemetry = InMemoryTelemetry()
    await emit(telemetry.hooks, ToolStartEvent(execution_id="x", call_id="c", tool_name="t"))
    await emit(
        telemetry.hooks,
        ToolEndEvent(execution_id="x", call_id="c", tool_name="t", status="ok", started=True),
    )
    attributes = _attributes(telemetry.span("execute_tool t"))
    assert attributes["llmrtc.tool.status"] == "ok"
    assert not {"llmrtc.tool.attempts", "llmrtc.tool.reused_from", "llmrtc.tool.approval"} & set(
        attributes
    )


async def test_a_retry_without_an_open_span_is_dropped() -> None:
    telemetry = InMemoryTelemetry()
    event = ToolRetryEvent(
        execution_id="nobody",
        call_id="c",
        tool_name="t",
        attempt=1,
        delay_s=0.1,
        error="x",
        error_type="timeout",
    )
    await emit(telemetry.hooks, event)  # hooks added after the call started: nothing to mark
    assert telemetry.spans() == []


async def test_reuse_sets_reused_from_and_is_counted_apart() -> None:
    telemetry = InMemoryTelemetry()
    await emit(telemetry.hooks, ToolStartEvent(execution_id="x1", call_id="c1", tool_name="book"))
    await emit(
        telemetry.hooks,
        ToolEndEvent(execution_id="x1", call_id="c1", tool_name="book", status="ok", started=True),
    )
    await emit(
        telemetry.hooks,
        ToolEndEvent(
            execution_id="x2",
            call_id="c2",
            tool_name="book",
            status="ok",
            reused_from="c1",
            attempts=0,
        ),
    )
    first, second = telemetry.spans("execute_tool book")
    assert "llmrtc.tool.reused_from" not in _attributes(first)
    assert _attributes(second)["llmrtc.tool.reused_from"] == "c1"
    assert "llmrtc.tool.attempts" not in _attributes(second)
    assert _calls(telemetry) == {("book", "ok", False): 1, ("book", "ok", True): 1}
    # A reuse ran nothing: no run time recorded for it.
    [duration] = telemetry.points("llmrtc.tool.call.duration")
    assert duration.count == 1


@pytest.mark.parametrize(
    ("status", "error_type", "failed"),
    [
        ("unavailable", "unavailable", True),
        ("denied", "denied", False),
        ("duplicate", "duplicate", False),
        ("aborted", "aborted", False),  # the reference: a stop on purpose is no failure
    ],
)
async def test_which_new_statuses_are_errors(status: str, error_type: str, failed: bool) -> None:
    telemetry = InMemoryTelemetry()
    await emit(
        telemetry.hooks,
        ToolEndEvent(
            execution_id="x",
            call_id="c",
            tool_name="refund",
            status=status,
            arguments={"order_id": "o-secret-1"},
            error=f"refused for order o-secret-1 ({status})",
            error_type=error_type,
            approval="denied" if status == "denied" else None,
            attempts=0,
        ),
    )
    span = telemetry.span("execute_tool refund")
    attributes = _attributes(span)
    assert attributes["llmrtc.tool.status"] == status
    if failed:
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == error_type  # not the text: it quotes values
        assert attributes["error.type"] == error_type
    else:
        assert span.status.status_code is StatusCode.UNSET
        assert "error.type" not in attributes
    assert (attributes.get("llmrtc.tool.approval") == "denied") is (status == "denied")
    assert "o-secret-1" not in _everything(span)
    assert _calls(telemetry) == {("refund", status, False): 1}


async def test_approved_call_says_so() -> None:
    telemetry = InMemoryTelemetry()
    await emit(telemetry.hooks, ToolStartEvent(execution_id="x", call_id="c", tool_name="refund"))
    await emit(
        telemetry.hooks,
        ToolEndEvent(
            execution_id="x",
            call_id="c",
            tool_name="refund",
            status="ok",
            started=True,
            approval="approved",
        ),
    )
    assert _attributes(telemetry.span("execute_tool refund"))["llmrtc.tool.approval"] == "approved"


def _breaker(old: str, new: str, call_id: str | None, failures: int = 2) -> BreakerChangeEvent:
    return BreakerChangeEvent(
        tool_name="crm",
        old_state=old,  # type: ignore[arg-type]
        new_state=new,  # type: ignore[arg-type]
        failures=failures,
        reset_after=30.0,
        call_id=call_id,
        session_id="s1",
    )


def _gauge(telemetry: InMemoryTelemetry) -> dict[str, Any]:
    return {
        p.attributes["gen_ai.tool.name"]: p.value
        for p in telemetry.points("llmrtc.tool.breaker.state")
    }


def _transitions(telemetry: InMemoryTelemetry) -> dict[tuple[str, str], int]:
    return {
        (p.attributes["gen_ai.tool.name"], p.attributes["llmrtc.tool.breaker.state"]): p.value
        for p in telemetry.points("llmrtc.tool.breaker.transitions")
    }


async def test_breaker_gauge_transitions_and_event_on_the_causing_calls_span() -> None:
    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    assert _gauge(telemetry) == {}  # no breaker changed yet: no point

    # The call whose failure opens it: the change comes before its end, on its open span.
    await emit(
        hooks,
        ToolStartEvent(execution_id="x1", call_id="c1", tool_name="crm", session_id="s1"),
    )
    await emit(hooks, _breaker("closed", "open", "c1"))
    assert _gauge(telemetry) == {"crm": 2}
    await emit(
        hooks,
        ToolEndEvent(
            execution_id="x1",
            call_id="c1",
            tool_name="crm",
            status="error",
            error_type="OSError",
            started=True,
            session_id="s1",
        ),
    )
    [event] = [
        e for e in telemetry.span("execute_tool crm").events if e.name == "llmrtc.tool.breaker"
    ]
    assert dict(event.attributes or {}) == {
        "llmrtc.tool.breaker.from": "closed",
        "llmrtc.tool.breaker.state": "open",
        "llmrtc.tool.breaker.failures": 2,
    }

    await emit(hooks, _breaker("open", "half_open", "c2"))  # c2 has no open span: metrics only
    assert _gauge(telemetry) == {"crm": 1}
    await emit(hooks, _breaker("half_open", "closed", None, failures=0))
    assert _gauge(telemetry) == {"crm": 0}
    assert _transitions(telemetry) == {
        ("crm", "open"): 1,
        ("crm", "half_open"): 1,
        ("crm", "closed"): 1,
    }
    assert len(telemetry.spans()) == 1  # no span of its own for a change


# Through a real ToolExecutor ------------------------------------------------------------------

ORDER = "order-secret-8841"


def _policy_tools(runs: dict[str, int], state: dict[str, bool]) -> ToolRegistry:
    @tool(retry=RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.02))
    async def flaky(order_id: str) -> dict[str, str]:
        """Fails twice, then answers."""
        runs["flaky"] = runs.get("flaky", 0) + 1
        if runs["flaky"] <= 2:
            raise ConnectionError(f"host refused {order_id}")
        return {"order": "found"}

    @tool(on_duplicate="reuse")
    async def book(slot: str) -> dict[str, str]:
        """Books a slot once."""
        runs["book"] = runs.get("book", 0) + 1
        return {"booked": "yes"}

    @tool(on_duplicate="reject")
    async def cancel(order_id: str) -> str:
        """Cancels once."""
        return "cancelled"

    @tool(breaker=CircuitBreaker(failures=2, reset_after=0.2))
    async def crm(query: str) -> str:
        """Fails while the CRM is down."""
        if state["crm_down"]:
            raise OSError(f"crm down while looking up {query}")
        return "found"

    @tool(needs_approval=True)
    async def refund(order_id: str, amount: float) -> str:
        """Needs a yes."""
        runs["refund"] = runs.get("refund", 0) + 1
        return "refunded"

    return ToolRegistry([flaky, book, cancel, crm, refund])


async def _approve_small(call: ToolCall, ctx: ToolContext) -> Approval:
    """Yes to refunds up to 10, no above (the reason quotes nothing)."""
    return Approval(call.arguments["amount"] <= 10, "the user said no")


async def test_policies_through_the_executor_without_content() -> None:
    telemetry = InMemoryTelemetry()
    runs: dict[str, int] = {}
    state = {"crm_down": True}
    executor = ToolExecutor(
        _policy_tools(runs, state), hooks=telemetry.hooks, approver=_approve_small
    )

    async def run(call_id: str, name: str, **arguments: Any) -> ToolCallResult:
        [result] = await executor.execute([ToolCall(call_id, name, arguments)], session_id="s1")
        return result

    assert (await run("f1", "flaky", order_id=ORDER)).attempts == 3
    assert (await run("b1", "book", slot=ORDER)).status == "ok"
    assert (await run("b2", "book", slot=ORDER)).reused_from == "b1"
    assert (await run("k1", "cancel", order_id=ORDER)).status == "ok"
    assert (await run("k2", "cancel", order_id=ORDER)).status == "duplicate"
    assert [(await run(f"c{i}", "crm", query=ORDER)).status for i in (1, 2, 3)] == [
        "error",
        "error",
        "unavailable",
    ]
    assert _gauge(telemetry) == {"crm": 2}
    assert (await run("r1", "refund", order_id=ORDER, amount=50.0)).status == "denied"
    assert (await run("r2", "refund", order_id=ORDER, amount=5.0)).status == "ok"
    assert runs == {"flaky": 3, "book": 1, "refund": 1}

    spans = {_attributes(s)["gen_ai.tool.call.id"]: s for s in telemetry.spans()}
    flaky_span = spans["f1"]
    assert _attributes(flaky_span)["llmrtc.tool.attempts"] == 3
    retries = [dict(e.attributes or {}) for e in flaky_span.events if e.name == "llmrtc.tool.retry"]
    assert [(r["llmrtc.tool.retry.attempt"], r["error.type"]) for r in retries] == [
        (1, "ConnectionError"),
        (2, "ConnectionError"),
    ]
    assert all(0 < float(r["llmrtc.tool.retry.delay"]) <= 0.02 for r in retries)
    assert _attributes(spans["b2"])["llmrtc.tool.reused_from"] == "b1"
    assert "llmrtc.tool.reused_from" not in _attributes(spans["b1"])
    assert spans["c3"].status.status_code is StatusCode.ERROR
    assert _attributes(spans["c3"])["error.type"] == "unavailable"
    [opened] = [e for e in spans["c2"].events if e.name == "llmrtc.tool.breaker"]
    assert dict(opened.attributes or {})["llmrtc.tool.breaker.state"] == "open"
    for call_id in ("k2", "r1"):  # refused on purpose: not errors
        assert spans[call_id].status.status_code is StatusCode.UNSET
        assert "error.type" not in _attributes(spans[call_id])
    assert _attributes(spans["r1"])["llmrtc.tool.approval"] == "denied"
    assert _attributes(spans["r2"])["llmrtc.tool.approval"] == "approved"
    for span in spans.values():  # no argument value, no error text
        recorded = _everything(span)
        assert ORDER not in recorded and "host refused" not in recorded, span.name
        assert "crm down" not in recorded and "said no" not in recorded, span.name

    calls = _calls(telemetry)
    assert calls[("book", "ok", True)] == 1 and calls[("book", "ok", False)] == 1
    assert calls[("cancel", "duplicate", False)] == 1
    assert calls[("crm", "unavailable", False)] == 1
    assert calls[("refund", "denied", False)] == 1

    # After reset_after, one trial call: half_open, then closed when it succeeds.
    state["crm_down"] = False
    await anyio.sleep(0.25)
    assert (await run("c4", "crm", query="q")).status == "ok"
    assert _gauge(telemetry) == {"crm": 0}
    probe = telemetry.spans("execute_tool crm")[-1]
    assert [
        dict(e.attributes or {})["llmrtc.tool.breaker.state"]
        for e in probe.events
        if e.name == "llmrtc.tool.breaker"
    ] == ["half_open", "closed"]  # the trial call: admitted, then it closed the breaker
    assert _transitions(telemetry) == {
        ("crm", "open"): 1,
        ("crm", "half_open"): 1,
        ("crm", "closed"): 1,
    }


async def test_retry_error_text_through_the_executor_with_capture_is_masked() -> None:
    @tool(
        sensitive_fields=["card"],
        retry=RetryPolicy(max_retries=1, base_delay=0.01, max_delay=0.01),
    )
    async def pay(card: str) -> str:
        """Fails once quoting the card, then pays."""
        pay_runs.append(card)
        if len(pay_runs) == 1:
            raise ConnectionError(f"gateway refused card {card}")
        return "paid"

    pay_runs: list[str] = []
    telemetry = InMemoryTelemetry(capture_content=True)
    executor = ToolExecutor(ToolRegistry([pay]), hooks=telemetry.hooks)
    [result] = await executor.execute([ToolCall("p1", "pay", {"card": CARD})])
    assert (result.status, result.attempts) == ("ok", 2)
    span = telemetry.span("execute_tool pay")
    [retry] = [dict(e.attributes or {}) for e in span.events if e.name == "llmrtc.tool.retry"]
    assert "gateway refused card ***" in str(retry["llmrtc.tool.retry.error"])
    assert CARD not in _everything(span)


async def test_a_follower_in_the_same_batch_is_a_reuse_span() -> None:
    runs: list[str] = []

    @tool(on_duplicate="reuse")
    async def book(slot: str) -> str:
        """Books a slot once."""
        runs.append(slot)
        await anyio.sleep(0.05)
        return "booked"

    telemetry = InMemoryTelemetry()
    executor = ToolExecutor(ToolRegistry([book]), hooks=telemetry.hooks)
    calls = [ToolCall("b1", "book", {"slot": "9am"}), ToolCall("b2", "book", {"slot": "9am"})]
    first, second = await executor.execute(calls, session_id="s1")
    assert (first.reused_from, second.reused_from, runs) == (None, "b1", ["9am"])
    spans = {_attributes(s)["gen_ai.tool.call.id"]: s for s in telemetry.spans()}
    assert _attributes(spans["b2"])["llmrtc.tool.reused_from"] == "b1"
    assert _attributes(spans["b2"])["llmrtc.tool.status"] == "ok"
    assert _calls(telemetry) == {("book", "ok", False): 1, ("book", "ok", True): 1}


async def test_queue_time_includes_the_wait_for_a_resource() -> None:
    @tool(resources=("crm",))
    async def crm(query: str) -> str:
        """Holds the CRM for a while."""
        await anyio.sleep(0.1)
        return "found"

    telemetry = InMemoryTelemetry()
    executor = ToolExecutor(ToolRegistry([crm]), hooks=telemetry.hooks, resource_limits={"crm": 1})
    calls = [ToolCall("q1", "crm", {"query": "a"}), ToolCall("q2", "crm", {"query": "b"})]
    assert [r.status for r in await executor.execute(calls)] == ["ok", "ok"]
    [queue] = telemetry.points("llmrtc.tool.queue.duration")
    assert queue.count == 2
    assert queue.sum >= 0.08  # the second waited for the first to let go of the CRM


async def test_a_background_calls_retries_are_on_its_span_after_its_batch() -> None:
    attempts: list[int] = []

    @tool(background=True, retry=RetryPolicy(max_retries=1, base_delay=0.05, max_delay=0.05))
    async def report(topic: str) -> str:
        """Slow and flaky: fails once, then answers."""
        attempts.append(1)
        if len(attempts) == 1:
            raise TimeoutError("backend slow")
        return "done"

    telemetry = InMemoryTelemetry()
    executor = ToolExecutor(ToolRegistry([report]), hooks=telemetry.hooks)
    [running] = await executor.execute([ToolCall("g1", "report", {"topic": "t"})])
    assert running.status == "running"
    with anyio.fail_after(5):
        final = await anext(aiter(executor.background_results()))
    assert (final.status, final.attempts) == ("ok", 2)
    span = telemetry.span("execute_tool report")
    attributes = _attributes(span)
    assert (attributes["llmrtc.tool.background"], attributes["llmrtc.tool.attempts"]) == (True, 2)
    [retry] = [dict(e.attributes or {}) for e in span.events if e.name == "llmrtc.tool.retry"]
    assert (retry["llmrtc.tool.retry.attempt"], retry["error.type"]) == (1, "TimeoutError")
