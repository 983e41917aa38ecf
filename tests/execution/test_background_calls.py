"""Background calls (`ToolDefinition.background`): the batch answers them `"running"` at once,
they run on outside it (a barge-in does not stop them, their own timeout does), and each ends
with exactly one final result: reported to the hooks and queued for `background_results()`."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from llmrtc import (
    Hooks,
    ToolCall,
    ToolCallResult,
    ToolContext,
    ToolEndEvent,
    ToolExecutor,
    ToolProgressEvent,
    ToolRegistry,
    ToolStartEvent,
    tool,
)
from llmrtc.abort import AbortController
from llmrtc.testing import InMemoryTelemetry

pytestmark = pytest.mark.anyio

signals: dict[str, Any] = {}
release = {"event": None}


@tool(background=True, timeout=30.0)
async def bookTable(restaurant: str, ctx: ToolContext) -> dict[str, Any]:
    """Book a table."""
    signals[ctx.call_id] = ctx.abort_signal
    await ctx.progress(f"Checking availability at {restaurant}")
    event = release["event"]
    if event is not None:
        await event.wait()
    return {"confirmed": True, "restaurant": restaurant}


@tool(background=True, timeout=0.2)
async def slowSearch(query: str, ctx: ToolContext) -> str:
    """Search slowly."""
    signals[ctx.call_id] = ctx.abort_signal
    await anyio.sleep(30)
    return "never"


@tool(background=True)
async def brokenBooking() -> None:
    """Always fails."""
    raise RuntimeError("db password=hunter2")


@tool
async def quick() -> str:
    """Answer at once."""
    return "quick"


@tool
async def hang() -> None:
    """Never answer."""
    await anyio.sleep(30)


REGISTRY = ToolRegistry([bookTable, slowSearch, brokenBooking, quick, hang])


class Recorder(Hooks):
    def __init__(self) -> None:
        self.starts: list[ToolStartEvent] = []
        self.ends: list[ToolEndEvent] = []
        self.progress: list[ToolProgressEvent] = []

    def on_tool_start(self, event: ToolStartEvent) -> None:
        self.starts.append(event)

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.ends.append(event)

    def on_tool_progress(self, event: ToolProgressEvent) -> None:
        self.progress.append(event)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    signals.clear()
    release["event"] = None


async def _next(executor: ToolExecutor) -> ToolCallResult:
    with anyio.fail_after(10):
        async for result in executor.background_results():
            return result
    raise AssertionError("unreachable")


async def test_the_batch_answers_running_at_once_and_the_final_result_lands_once() -> None:
    release["event"] = anyio.Event()
    hooks = Recorder()
    seen: list[ToolCallResult] = []
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    results = await executor.execute(
        [ToolCall("c1", "bookTable", {"restaurant": "Nopa"}), ToolCall("c2", "quick", {})],
        on_result=seen.append,
        session_id="s1",
        turn_id="t1",
    )
    running, done = results
    assert running.status == "running" and done.status == "ok"
    content = json.loads(running.to_content())
    assert content["status"] == "running" and "will follow" in content["note"]
    assert {r.call_id: r.status for r in seen} == {"c1": "running", "c2": "ok"}
    assert [c.call_id for c in executor.background_calls] == ["c1"]
    assert [e.call_id for e in hooks.ends] == ["c2"]  # the end hooks never hear "running"
    release["event"].set()
    final = await _next(executor)
    assert (final.call_id, final.status, final.result) == (
        "c1",
        "ok",
        {"confirmed": True, "restaurant": "Nopa"},
    )
    assert executor.take_background_results() == []  # yielded once, then gone
    assert executor.background_calls == ()
    [end] = [e for e in hooks.ends if e.call_id == "c1"]
    assert end.status == "ok" and end.background and end.turn_id == "t1"
    [start] = [e for e in hooks.starts if e.call_id == "c1"]
    assert start.background
    [progress] = hooks.progress
    assert progress.background and progress.message == "Checking availability at Nopa"


async def test_an_abort_of_the_batch_does_not_stop_it() -> None:
    release["event"] = anyio.Event()
    controller = AbortController()
    executor = ToolExecutor(REGISTRY)
    [running] = await executor.execute(
        [ToolCall("c1", "bookTable", {"restaurant": "Nopa"})], abort_signal=controller.signal
    )
    assert running.status == "running"
    controller.abort("barge-in")
    await anyio.sleep(0.05)
    assert not signals["c1"].aborted
    release["event"].set()
    assert (await _next(executor)).status == "ok"


async def test_cancelling_the_caller_does_not_stop_it() -> None:
    release["event"] = anyio.Event()
    executor = ToolExecutor(REGISTRY)
    with anyio.move_on_after(0.2):  # cancels execute while its foreground call hangs
        await executor.execute(
            [ToolCall("c1", "bookTable", {"restaurant": "Nopa"}), ToolCall("c2", "hang", {})]
        )
        pytest.fail("the hanging call should have kept execute waiting")
    assert not signals["c1"].aborted
    release["event"].set()
    assert (await _next(executor)).status == "ok"


async def test_its_own_timeout_stops_it() -> None:
    hooks = Recorder()
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    [running] = await executor.execute([ToolCall("c1", "slowSearch", {"query": "x"})])
    assert running.status == "running"
    final = await _next(executor)
    assert final.status == "timeout"
    assert signals["c1"].aborted and signals["c1"].reason == "timeout"
    assert [e.status for e in hooks.ends] == ["timeout"]


async def test_cancel_call_aborts_it_with_one_final_result() -> None:
    hooks = Recorder()
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    await executor.execute([ToolCall("c1", "slowSearch", {"query": "x"})])
    await anyio.sleep(0.01)
    final = await executor.cancel_call("c1", reason="user changed mind")
    assert final is not None and final.status == "aborted"
    assert "user changed mind" in (final.error or "")
    assert signals["c1"].reason == "user changed mind"
    assert executor.take_background_results() == [final]
    assert await executor.cancel_call("c1") is None  # no longer running
    assert [e.status for e in hooks.ends] == ["aborted"]


async def test_aclose_ends_every_running_call_as_aborted() -> None:
    executor = ToolExecutor(REGISTRY)
    await executor.execute(
        [ToolCall("c1", "slowSearch", {"query": "x"}), ToolCall("c2", "slowSearch", {"q": 1})]
    )
    await executor.aclose()
    landed = executor.take_background_results()
    # c2's arguments are invalid: answered in the batch, never started in the background.
    assert [(r.call_id, r.status) for r in landed] == [("c1", "aborted")]
    assert "session ended" in (landed[0].error or "")


async def test_invalid_arguments_are_answered_in_the_batch() -> None:
    hooks = Recorder()
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    [result] = await executor.execute([ToolCall("c1", "bookTable", {})])
    assert result.status == "invalid_arguments"
    assert executor.background_calls == () and executor.take_background_results() == []
    [end] = hooks.ends
    assert end.status == "invalid_arguments" and not end.background


async def test_a_handler_that_raises_ends_once_with_a_generic_error() -> None:
    class Raising(Recorder):
        def on_tool_end(self, event: ToolEndEvent) -> None:
            super().on_tool_end(event)
            raise RuntimeError("a broken hook")

    hooks = Raising()
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    await executor.execute([ToolCall("c1", "brokenBooking", {})])
    final = await _next(executor)
    assert final.status == "error" and "hunter2" not in (final.error or "")
    assert [e.status for e in hooks.ends] == ["error"]


async def test_results_land_in_the_order_the_calls_finished() -> None:
    release["event"] = anyio.Event()
    executor = ToolExecutor(REGISTRY)
    await executor.execute(
        [
            ToolCall("c1", "bookTable", {"restaurant": "Nopa"}),
            ToolCall("c2", "slowSearch", {"query": "x"}),
        ]
    )
    assert (await _next(executor)).call_id == "c2"  # timed out first
    release["event"].set()
    assert (await _next(executor)).call_id == "c1"


async def test_its_span_ends_once_with_the_final_status_and_progress() -> None:
    telemetry = InMemoryTelemetry()
    executor = ToolExecutor(REGISTRY, hooks=telemetry.hooks)
    await executor.execute([ToolCall("c1", "bookTable", {"restaurant": "Nopa"})])
    await _next(executor)
    [span] = telemetry.spans("execute_tool bookTable")
    attributes = dict(span.attributes or {})
    assert attributes["llmrtc.tool.status"] == "ok"
    assert attributes["llmrtc.tool.background"] is True
    assert [e.name for e in span.events] == ["llmrtc.tool.progress"]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio_an_async_with_block_hosts_them() -> None:
    release["event"] = anyio.Event()
    async with ToolExecutor(REGISTRY) as executor:
        [running] = await executor.execute([ToolCall("c1", "bookTable", {"restaurant": "N"})])
        assert running.status == "running"
        release["event"].set()
        assert (await _next(executor)).status == "ok"
        await executor.execute([ToolCall("c2", "slowSearch", {"query": "x"})])
    # Leaving the block stopped the call still running.
    [final] = executor.take_background_results()
    assert (final.call_id, final.status) == ("c2", "aborted")


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio_without_a_block_the_call_is_refused_with_one_result(caplog) -> None:
    hooks = Recorder()
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    [result] = await executor.execute([ToolCall("c1", "bookTable", {"restaurant": "N"})])
    assert result.status == "error" and "could not be started" in (result.error or "")
    assert "async with executor" in caplog.text
    assert [e.status for e in hooks.ends] == ["error"] and "c1" not in signals


async def test_a_batch_aborted_before_it_starts_never_starts_it() -> None:
    controller = AbortController()
    controller.abort("barge-in")
    hooks = Recorder()
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    [result] = await executor.execute(
        [ToolCall("c1", "bookTable", {"restaurant": "N"})], abort_signal=controller.signal
    )
    assert result.status == "aborted" and "c1" not in signals
    assert executor.background_calls == () and executor.take_background_results() == []
    assert [e.status for e in hooks.ends] == ["aborted"]
