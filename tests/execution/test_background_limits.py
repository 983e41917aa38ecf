"""Background calls and the executor's limits: a call running for minutes holds none of the
`max_concurrency` slots (ordinary calls and `cancel_tool_call` are not held up by it), and a
time limit around `aclose()` cuts only the wait, not the calls' stopping."""

from __future__ import annotations

import time

import anyio
import pytest

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool

pytestmark = pytest.mark.anyio


@tool(background=True, timeout=30.0)
async def book(x: str) -> str:
    """Book slowly."""
    await anyio.sleep(20)
    return "A12"


@tool
async def weather(city: str) -> str:
    """The weather."""
    return "sunny"


@tool(background=True, timeout=60.0)
async def stubborn(x: str) -> str:
    """Stops slowly: its cleanup takes 2 s (shielded, like a rollback)."""
    try:
        await anyio.sleep(60)
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.sleep(2)
    return "x"


async def test_a_running_background_call_holds_no_concurrency_slot() -> None:
    executor = ToolExecutor(ToolRegistry([book, weather]), max_concurrency=1)
    [running] = await executor.execute([ToolCall("c1", "book", {"x": "a"})])
    assert running.status == "running"
    with anyio.fail_after(5):  # held up, it would wait the 20 s of the booking
        [result] = await executor.execute([ToolCall("c2", "weather", {"city": "Oslo"})])
    assert result.status == "ok"
    await executor.aclose()
    [final] = executor.take_background_results()
    assert final.status == "aborted"


async def test_a_time_limit_around_aclose_cuts_the_wait_and_the_call_still_lands() -> None:
    executor = ToolExecutor(ToolRegistry([stubborn]))
    await executor.execute([ToolCall("c1", "stubborn", {"x": "a"})])
    await anyio.sleep(0.1)
    started = time.monotonic()
    with anyio.move_on_after(0.3) as scope:
        await executor.aclose()
    assert scope.cancelled_caught and time.monotonic() - started < 1.5
    with anyio.fail_after(10):  # it stops in its own task, and reports its one result
        while executor.background_calls:
            await anyio.sleep(0.05)
    [final] = executor.take_background_results()
    assert final.status == "aborted"
