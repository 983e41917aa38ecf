"""`ToolDefinition.retry`: failed attempts are tried again (not a `ToolError`; a timed-out
attempt with `attempt_timeout`), all inside the call's timeout and cancel scope; an abort stops
the loop at once; each retry fires `on_tool_retry`; the result counts `attempts`."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

from llmrtc import RetryPolicy, ToolCall, ToolError, ToolExecutor, ToolRegistry, tool
from llmrtc.abort import AbortController
from llmrtc.telemetry.events import ToolEndEvent, ToolRetryEvent
from llmrtc.testing import RecordingHooks
from llmrtc.tools.context import ToolContext

pytestmark = pytest.mark.anyio

FAST = RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.02)


def flaky(failures: list[BaseException], **options: Any) -> tuple[Any, list[float]]:
    """A lookup tool that raises the given failures in turn, then answers."""
    runs: list[float] = []

    @tool(**options)
    async def lookup(order_id: str) -> str:
        """Look an order up."""
        runs.append(time.monotonic())
        if len(runs) <= len(failures):
            raise failures[len(runs) - 1]
        return f"order {order_id}"

    return lookup, runs


async def test_a_flaky_backend_succeeds_on_retry() -> None:
    hooks = RecordingHooks()
    lookup, runs = flaky([ConnectionError("reset")], retry=FAST)
    executor = ToolExecutor(ToolRegistry([lookup]), hooks=hooks)
    [result] = await executor.execute([ToolCall("c1", "lookup", {"order_id": "A1"})])
    assert result.status == "ok" and result.result == "order A1" and result.attempts == 2
    [retry] = hooks.of(ToolRetryEvent)
    assert retry.call_id == "c1" and retry.attempt == 1 and retry.tool_name == "lookup"
    assert retry.error_type == "ConnectionError" and 0.008 <= retry.delay_s <= 0.02
    assert retry.delay == retry.delay_s
    [end] = hooks.of(ToolEndEvent)
    assert end.attempts == 2 and end.status == "ok"
    assert len(runs) == 2 and runs[1] - runs[0] >= 0.007


async def test_the_last_failure_stands_when_retries_run_out() -> None:
    lookup, runs = flaky([RuntimeError("a"), RuntimeError("b"), RuntimeError("c")], retry=FAST)
    seen: list[ToolRetryEvent] = []
    executor = ToolExecutor(ToolRegistry([lookup]), on_tool_retry=seen.append)
    [result] = await executor.execute([ToolCall("c1", "lookup", {"order_id": "A1"})])
    assert result.status == "error" and result.attempts == 3 and len(runs) == 3
    assert [e.attempt for e in seen] == [1, 2]
    # The model still gets the generic sentence, never the exception text.
    assert "internal error" in (result.error or "") and "c" not in (result.error or "")[-3:]


async def test_a_tool_error_is_not_retried() -> None:
    lookup, runs = flaky([ToolError("no such order")], retry=FAST)
    executor = ToolExecutor(ToolRegistry([lookup]))
    [result] = await executor.execute([ToolCall("c1", "lookup", {"order_id": "A1"})])
    assert result.status == "error" and result.error == "no such order"
    assert result.attempts == 1 and len(runs) == 1


async def test_retry_on_chooses_what_is_retried() -> None:
    policy = RetryPolicy(max_retries=3, base_delay=0.0, retry_on=(ConnectionError,))
    lookup, runs = flaky([ConnectionError(), ValueError()], retry=policy)
    executor = ToolExecutor(ToolRegistry([lookup]))
    [result] = await executor.execute([ToolCall("c1", "lookup", {"order_id": "A1"})])
    assert result.status == "error" and result.attempts == 2 and len(runs) == 2


async def test_a_timed_out_attempt_is_retried_with_attempt_timeout() -> None:
    signals: list[Any] = []

    @tool(retry=RetryPolicy(max_retries=2, base_delay=0.0, attempt_timeout=0.05))
    async def slow(ctx: ToolContext) -> str:
        """Slow the first time."""
        signals.append(ctx.abort_signal)
        if len(signals) == 1:
            await anyio.sleep(10)
        return "done"

    seen: list[ToolRetryEvent] = []
    executor = ToolExecutor(ToolRegistry([slow]), on_tool_retry=seen.append)
    [result] = await executor.execute([ToolCall("c1", "slow", {})])
    assert result.status == "ok" and result.attempts == 2
    # The abandoned attempt's own signal said so; the next attempt got a fresh one.
    assert signals[0].aborted and signals[0].reason == "timeout" and not signals[1].aborted
    assert seen[0].error_type == "timeout" and "attempt timed out" in seen[0].error


async def test_every_attempt_timing_out_ends_timeout() -> None:
    @tool(retry=RetryPolicy(max_retries=1, base_delay=0.0, attempt_timeout=0.03))
    async def stuck() -> str:
        """Never answers."""
        await anyio.sleep(10)
        return "never"

    executor = ToolExecutor(ToolRegistry([stuck]))
    [result] = await executor.execute([ToolCall("c1", "stuck", {})])
    assert result.status == "timeout" and result.attempts == 2


async def test_all_attempts_run_inside_the_call_timeout() -> None:
    lookup, runs = flaky(
        [RuntimeError()] * 10,
        retry=RetryPolicy(max_retries=10, base_delay=0.05, max_delay=0.05),
        timeout=0.12,
    )
    executor = ToolExecutor(ToolRegistry([lookup]))
    started = time.monotonic()
    [result] = await executor.execute([ToolCall("c1", "lookup", {"order_id": "A1"})])
    elapsed = time.monotonic() - started
    # A backoff that would end past the limit is not slept: the last outcome stands.
    assert result.status == "error" and elapsed < 0.5
    assert 2 <= result.attempts <= 3 and len(runs) == result.attempts


async def test_a_timeout_during_an_attempt_is_the_calls_timeout() -> None:
    attempts: list[int] = []

    @tool(retry=RetryPolicy(max_retries=5, base_delay=0.0), timeout=0.1)
    async def hangs() -> str:
        """Fails once, then hangs."""
        attempts.append(1)
        if len(attempts) == 1:
            raise RuntimeError("first")
        await anyio.sleep(10)
        return "never"

    executor = ToolExecutor(ToolRegistry([hangs]))
    [result] = await executor.execute([ToolCall("c1", "hangs", {})])
    assert result.status == "timeout" and len(attempts) == 2


async def test_an_abort_during_the_backoff_stops_at_once() -> None:
    lookup, runs = flaky(
        [RuntimeError()] * 5, retry=RetryPolicy(max_retries=5, base_delay=5.0, max_delay=5.0)
    )
    executor = ToolExecutor(ToolRegistry([lookup]))
    controller = AbortController()

    async def abort() -> None:
        await anyio.sleep(0.05)
        controller.abort("barge-in")

    started = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(abort)
        [result] = await executor.execute(
            [ToolCall("c1", "lookup", {"order_id": "A1"})], abort_signal=controller.signal
        )
    assert result.status == "aborted" and time.monotonic() - started < 1.0
    assert len(runs) == 1


async def test_a_finish_call_finishes_its_attempt_but_starts_no_retry_after_a_barge_in() -> None:
    # Review: "an abort stops the retry loop at once", also for on_interrupt="finish": the
    # attempt under way runs to its end (it may be booking), but none is started after it.
    release = anyio.Event()
    runs: list[int] = []

    @tool(
        retry=RetryPolicy(max_retries=5, base_delay=0.2, retry_side_effects=True),
        on_interrupt="finish",
        side_effects=["books a table"],
    )
    async def book(slot: str) -> str:
        """Book."""
        runs.append(1)
        await release.wait()
        raise ConnectionError("booking system down")

    executor = ToolExecutor(ToolRegistry([book]))
    controller = AbortController()

    async def barge_in() -> None:
        await anyio.sleep(0.05)
        controller.abort("barge-in")
        await anyio.sleep(0.05)
        release.set()  # the attempt under way ends after the barge-in

    started = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(barge_in)
        [result] = await executor.execute(
            [ToolCall("c1", "book", {"slot": "8pm"})], abort_signal=controller.signal
        )
    assert result.status == "error" and result.attempts == 1 and runs == [1]
    assert time.monotonic() - started < 0.5


async def test_a_barge_in_during_a_finish_calls_backoff_ends_it_with_its_last_outcome() -> None:
    runs: list[int] = []

    @tool(
        retry=RetryPolicy(max_retries=5, base_delay=5.0, max_delay=5.0, retry_side_effects=True),
        on_interrupt="finish",
        side_effects=["books a table"],
    )
    async def book(slot: str) -> str:
        """Book."""
        runs.append(1)
        raise ConnectionError("booking system down")

    executor = ToolExecutor(ToolRegistry([book]))
    controller = AbortController()

    async def barge_in() -> None:
        await anyio.sleep(0.05)
        controller.abort("barge-in")

    started = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(barge_in)
        [result] = await executor.execute(
            [ToolCall("c1", "book", {"slot": "8pm"})], abort_signal=controller.signal
        )
    assert result.status == "error" and runs == [1] and time.monotonic() - started < 1.0


async def test_sync_handlers_are_retried_too() -> None:
    threads: list[int] = []

    @tool(retry=FAST)
    def read_sensor() -> float:
        """Reads a sensor."""
        threads.append(threading.get_ident())
        if len(threads) < 3:
            raise OSError("bus busy")
        return 21.5

    executor = ToolExecutor(ToolRegistry([read_sensor]))
    [result] = await executor.execute([ToolCall("c1", "read_sensor", {})])
    assert result.status == "ok" and result.result == 21.5 and result.attempts == 3


async def test_a_retried_call_keeps_its_concurrency_slot_between_attempts() -> None:
    order: list[str] = []
    lookup, _ = flaky([RuntimeError()], retry=RetryPolicy(max_retries=1, base_delay=0.05))

    @tool
    async def other() -> str:
        """Another tool."""
        order.append("other")
        return "x"

    executor = ToolExecutor(ToolRegistry([lookup, other]), max_concurrency=1)

    async def run_other() -> None:
        await anyio.sleep(0.01)  # queued while the retried call backs off
        await executor.execute([ToolCall("o", "other", {})])

    async with anyio.create_task_group() as group:
        group.start_soon(run_other)
        [result] = await executor.execute([ToolCall("c1", "lookup", {"order_id": "A1"})])
        order.append("lookup done")
    assert result.attempts == 2 and order == ["lookup done", "other"]


async def test_a_tool_with_side_effects_that_did_not_opt_in_is_not_retried() -> None:
    lookup, runs = flaky([ConnectionError("reset")], retry=FAST, side_effects=["charges the card"])
    executor = ToolExecutor(ToolRegistry([lookup]))
    [result] = await executor.execute([ToolCall("c1", "lookup", {"order_id": "A1"})])
    assert result.status == "error" and result.attempts == 1 and len(runs) == 1
    opted, opted_runs = flaky(
        [ConnectionError("reset")],
        retry=RetryPolicy(max_retries=2, base_delay=0.0, retry_side_effects=True),
        side_effects=["charges the card"],
    )
    [again] = await ToolExecutor(ToolRegistry([opted])).execute(
        [ToolCall("c2", "lookup", {"order_id": "A1"})]
    )
    assert again.status == "ok" and again.attempts == 2 and len(opted_runs) == 2
