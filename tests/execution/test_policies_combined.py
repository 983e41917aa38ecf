"""The issue's combined proofs: a reused call never takes a resource slot; a retried call keeps
its resource between attempts; a breaker-open call never waits for approval; an approval wait
does not hold a resource slot."""

from __future__ import annotations

import anyio
import pytest

from llmrtc import (
    CircuitBreaker,
    RetryPolicy,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    tool,
)
from llmrtc.execution import Approval
from llmrtc.tools.context import ToolContext

pytestmark = pytest.mark.anyio


async def test_a_reused_call_never_takes_a_resource_slot() -> None:
    release = anyio.Event()
    runs: list[str] = []

    @tool(on_duplicate="reuse", resources=("crm",))
    async def book(table: int) -> str:
        """Book."""
        runs.append("book")
        await release.wait()
        return "booked"

    @tool(resources=("crm",))
    async def note(text: str) -> str:
        """Note."""
        runs.append("note")
        return "noted"

    executor = ToolExecutor(ToolRegistry([book, note]), resource_limits={"crm": 2})
    pool = executor._policies.resources["crm"]
    results: list[object] = []

    async def batch() -> None:
        results.extend(
            await executor.execute(
                [ToolCall("b1", "book", {"table": 4}), ToolCall("b2", "book", {"table": 4})],
                session_id="s",
            )
        )

    async with anyio.create_task_group() as group:
        group.start_soon(batch)
        await anyio.sleep(0.03)
        # b2 follows b1 without a slot: one is left, and another tool gets it at once.
        assert pool.in_use == 1
        with anyio.fail_after(1):
            [noted] = await executor.execute([ToolCall("n", "note", {"text": "x"})])
        assert noted.status == "ok"
        release.set()
    assert runs == ["book", "note"] and pool.in_use == 0


async def test_a_retried_call_keeps_its_resource_between_attempts() -> None:
    order: list[str] = []
    attempts: list[int] = []

    @tool(resources=("crm",), retry=RetryPolicy(max_retries=1, base_delay=0.08))
    async def sync_crm() -> str:
        """Flaky."""
        attempts.append(1)
        order.append(f"sync attempt {len(attempts)}")
        if len(attempts) == 1:
            raise ConnectionError("reset")
        return "synced"

    @tool(resources=("crm",))
    async def read_crm() -> str:
        """Waits in line."""
        order.append("read")
        return "read"

    executor = ToolExecutor(ToolRegistry([sync_crm, read_crm]), resource_limits={"crm": 1})

    async def reader() -> None:
        await anyio.sleep(0.02)  # arrives during the backoff
        await executor.execute([ToolCall("r", "read_crm", {})])

    async with anyio.create_task_group() as group:
        group.start_soon(reader)
        [result] = await executor.execute([ToolCall("s", "sync_crm", {})])
    # The waiting reader did not slip in between the attempts: the retry kept the CRM.
    assert result.attempts == 2 and order == ["sync attempt 1", "sync attempt 2", "read"]


async def test_a_breaker_open_call_never_waits_for_approval() -> None:
    asked: list[str] = []

    @tool(breaker=CircuitBreaker(failures=1, reset_after=60), needs_approval=True)
    async def refund(order_id: str) -> str:
        """Refund."""
        raise ConnectionError("payments down")

    async def approver(call: ToolCall, ctx: ToolContext) -> Approval:
        asked.append(call.call_id)
        return Approval(True)

    executor = ToolExecutor(ToolRegistry([refund]), approver=approver)
    [failed] = await executor.execute([ToolCall("c1", "refund", {"order_id": "A"})])
    [refused] = await executor.execute([ToolCall("c2", "refund", {"order_id": "B"})])
    assert failed.status == "error" and refused.status == "unavailable"
    assert asked == ["c1"]  # nobody was asked to approve a call that could not run


async def test_an_approval_wait_does_not_hold_a_resource_slot() -> None:
    answer = anyio.Event()

    @tool(resources=("payments",), needs_approval=True)
    async def refund(order_id: str) -> str:
        """Refund."""
        return "refunded"

    @tool(resources=("payments",))
    async def balance() -> str:
        """Balance."""
        return "100"

    async def approver(call: ToolCall, ctx: ToolContext) -> bool:
        await answer.wait()
        return True

    executor = ToolExecutor(
        ToolRegistry([refund, balance]), resource_limits={"payments": 1}, approver=approver
    )
    pool = executor._policies.resources["payments"]
    results: list[object] = []

    async def ask() -> None:
        results.extend(await executor.execute([ToolCall("r", "refund", {"order_id": "A"})]))

    async with anyio.create_task_group() as group:
        group.start_soon(ask)
        await anyio.sleep(0.03)
        assert pool.in_use == 0 and executor.in_flight == 0
        with anyio.fail_after(1):
            [other] = await executor.execute([ToolCall("b", "balance", {})])
        assert other.status == "ok"
        answer.set()
    assert [r.status for r in results] == ["ok"]  # type: ignore[attr-defined]


async def test_a_reuse_is_answered_even_when_the_breaker_opened_since() -> None:
    calls: list[str] = []

    @tool(on_duplicate="reuse", breaker=CircuitBreaker(failures=1, reset_after=60))
    async def book(slot: str) -> str:
        """Book."""
        calls.append(slot)
        if slot == "bad":
            raise ConnectionError("down")
        return f"booked {slot}"

    executor = ToolExecutor(ToolRegistry([book]))
    await executor.execute([ToolCall("a", "book", {"slot": "8pm"})], session_id="s")
    await executor.execute([ToolCall("b", "book", {"slot": "bad"})], session_id="s")
    assert executor.breaker_state("book") == "open"
    [again] = await executor.execute([ToolCall("c", "book", {"slot": "8pm"})], session_id="s")
    # The booking went through before the backend failed: the model gets its result.
    assert again.status == "ok" and again.reused_from == "a" and calls == ["8pm", "bad"]
