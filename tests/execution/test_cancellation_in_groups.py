"""Parallel calls are cancelled the anyio way: a handler's shielded cleanup completes before
`execute` returns, whether the batch is aborted, times out or the caller is cancelled; every
call is cancelled at once (not after a sibling's cleanup), and a deadline on the batch signal
cancels like an abort."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import anyio
import pytest

from llmrtc import (
    AbortController,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolRegistry,
    define_tool,
)
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.telemetry.hooks import Hooks


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: Any) -> str:
    return str(request.param)


pytestmark = pytest.mark.anyio


def careful_registry(cleaned: list[str]) -> ToolRegistry:
    async def careful(args: Any, ctx: ToolContext) -> None:
        try:
            await anyio.sleep(10)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.02)  # e.g. roll a transaction back
                cleaned.append(ctx.call_id)

    return ToolRegistry([define_tool(ToolDefinition("careful", timeout=0.2), careful)])


CALLS = [ToolCall(f"c{i}", "careful") for i in range(3)]


async def test_shielded_cleanup_completes_when_the_batch_is_aborted() -> None:
    cleaned: list[str] = []
    controller = AbortController()
    async with anyio.create_task_group() as group:
        group.start_soon(_abort_after, controller, 0.05)
        results = await ToolExecutor(careful_registry(cleaned)).execute(
            CALLS, abort_signal=controller.signal
        )
    assert [r.status for r in results] == ["aborted"] * 3
    assert sorted(cleaned) == ["c0", "c1", "c2"]


async def test_shielded_cleanup_completes_when_the_calls_time_out() -> None:
    cleaned: list[str] = []
    results = await ToolExecutor(careful_registry(cleaned)).execute(CALLS)
    assert [r.status for r in results] == ["timeout"] * 3
    assert sorted(cleaned) == ["c0", "c1", "c2"]


@pytest.mark.parametrize("reporting", [True, False])
async def test_shielded_cleanup_completes_before_a_cancelled_caller_moves_on(
    reporting: bool,
) -> None:
    cleaned: list[str] = []
    ended: list[str] = []
    executor = ToolExecutor(careful_registry(cleaned))
    with anyio.move_on_after(0.05):
        await executor.execute(
            CALLS, on_result=(lambda r: ended.append(r.status)) if reporting else None
        )
    assert sorted(cleaned) == ["c0", "c1", "c2"]
    assert ended == (["aborted"] * 3 if reporting else [])
    assert executor.in_flight == 0


def slow_cleanup_registry(log: list[tuple[str, str]]) -> ToolRegistry:
    """Handlers whose shielded cleanup takes long: a sibling cancelled only after it ended
    would log its cancellation after a cleanup."""

    async def slow_cleanup(args: Any, ctx: ToolContext) -> None:
        try:
            await anyio.sleep(10)
        finally:
            log.append(("cancelled", ctx.call_id))
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.3)
            log.append(("cleaned", ctx.call_id))

    return ToolRegistry([define_tool(ToolDefinition("slow_cleanup"), slow_cleanup)])


TWO = [ToolCall("c0", "slow_cleanup"), ToolCall("c1", "slow_cleanup")]


@pytest.mark.parametrize("how", ["abort", "caller cancelled"])
@pytest.mark.parametrize("reporting", [False, True])
async def test_every_call_of_a_group_is_cancelled_before_any_cleanup_ends(
    how: str, reporting: bool
) -> None:
    log: list[tuple[str, str]] = []
    controller = AbortController()
    executor = ToolExecutor(slow_cleanup_registry(log))
    on_result = (lambda r: None) if reporting else None
    with anyio.fail_after(5):
        if how == "abort":
            async with anyio.create_task_group() as group:
                group.start_soon(_abort_after, controller, 0.05)
                await executor.execute(TWO, abort_signal=controller.signal, on_result=on_result)
        else:
            with anyio.move_on_after(0.05):
                await executor.execute(TWO, on_result=on_result)
    assert sorted(log[:2]) == [("cancelled", "c0"), ("cancelled", "c1")]
    assert sorted(log[2:]) == [("cleaned", "c0"), ("cleaned", "c1")]
    assert executor.in_flight == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # task.cancel() is asyncio's
async def test_a_second_native_cancel_still_waits_for_every_call() -> None:
    log: list[tuple[str, str]] = []
    executor = ToolExecutor(slow_cleanup_registry(log))
    results: list[str] = []
    tasks_before = asyncio.all_tasks()

    async def runner() -> None:
        await executor.execute(TWO, on_result=lambda r: results.append(r.status))

    task = asyncio.get_running_loop().create_task(runner())
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.sleep(0.05)  # execute now waits (shielded) for the 0.3 s cleanups
    task.cancel()  # a second cancel must not cut that wait short
    with pytest.raises(asyncio.CancelledError):
        await task
    # Every call had ended before the cancellation propagated: none is left running.
    assert sorted(log) == [
        ("cancelled", "c0"),
        ("cancelled", "c1"),
        ("cleaned", "c0"),
        ("cleaned", "c1"),
    ]
    assert results == ["aborted"] * 2
    assert asyncio.all_tasks() <= tasks_before
    assert executor.in_flight == 0


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # task.cancel() is asyncio's
async def test_a_cancel_landing_in_a_hook_still_lets_every_call_be_reported() -> None:
    ended: list[str] = []

    class SlowEnd(Hooks):
        hook_timeout = 5.0

        async def on_tool_end(self, event: ToolEndEvent) -> None:
            await anyio.sleep(0.2)  # e.g. an exporter's network write
            ended.append(event.call_id)

    executor = ToolExecutor(sleeper_registry([]), hooks=SlowEnd())
    results: list[str] = []

    async def runner() -> None:
        calls = [ToolCall(f"c{i}", "sleeper") for i in range(3)]
        await executor.execute(calls, on_result=lambda r: results.append(r.call_id))

    task = asyncio.get_running_loop().create_task(runner())
    await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.sleep(0.1)  # the first call's end hook is running
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert results == ["c0", "c1", "c2"]  # every call got its one result
    assert ended == ["c1", "c2"]  # only the hook the cancel landed in was cut short


def sleeper_registry(ended: list[str]) -> ToolRegistry:
    async def sleeper(args: Any, ctx: ToolContext) -> None:
        await anyio.sleep(10)
        ended.append(ctx.call_id)

    # The tool's own limit is far away: only the batch signal's deadline can end it early.
    return ToolRegistry([define_tool(ToolDefinition("sleeper", timeout=30), sleeper)])


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("whose", ["its own", "its parent's", "set while running"])
async def test_a_deadline_on_the_batch_signal_aborts_the_running_calls(
    batch_size: int, whose: str
) -> None:
    ended: list[str] = []
    soon = time.monotonic() + 0.1
    if whose == "its own":
        controller = AbortController(deadline=soon)
    elif whose == "its parent's":
        controller = AbortController(parent=AbortController(deadline=soon).signal)
    else:
        controller = AbortController()
    calls = [ToolCall(f"c{i}", "sleeper") for i in range(batch_size)]
    started = time.monotonic()
    async with anyio.create_task_group() as group:
        if whose == "set while running":
            group.start_soon(_set_deadline_after, controller, 0.05)
        results = await ToolExecutor(sleeper_registry(ended)).execute(
            calls, abort_signal=controller.signal
        )
    assert time.monotonic() - started < 5  # not the handlers' 10 s
    assert [r.status for r in results] == ["aborted"] * batch_size
    assert all(r.error == "tool call 'sleeper' aborted (timeout)" for r in results)
    assert ended == []


async def _set_deadline_after(controller: AbortController, delay: float) -> None:
    await anyio.sleep(delay)
    controller.deadline = time.monotonic() + 0.05


async def _abort_after(controller: AbortController, delay: float) -> None:
    await anyio.sleep(delay)
    controller.abort("barge-in")


def test_a_group_whose_unstarted_calls_are_cancelled_natively_still_ends() -> None:
    # An app shutting down cancels every asyncio task at once, from a handler: the second call's
    # task is cancelled before its first step, so its body never runs. `execute` must still end.
    async def quit_app(args: Any, ctx: ToolContext) -> str:
        for task in asyncio.all_tasks():
            task.cancel()
        await asyncio.sleep(0.01)
        return "bye"

    async def other(args: Any, ctx: ToolContext) -> int:
        await asyncio.sleep(0.01)
        return 1

    registry = ToolRegistry(
        [
            define_tool(ToolDefinition("quit", execution_policy="parallel"), quit_app),
            define_tool(ToolDefinition("other", execution_policy="parallel"), other),
        ]
    )
    outcome: list[str] = []

    def run() -> None:
        calls = [ToolCall("1", "quit"), ToolCall("2", "other")]
        try:
            asyncio.run(ToolExecutor(registry).execute(calls))
            outcome.append("returned")
        except BaseException as exc:
            outcome.append(type(exc).__name__)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert outcome == ["CancelledError"], "execute() hung after its tasks were cancelled"
