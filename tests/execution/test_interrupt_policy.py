"""The per-tool interrupt policy: an abort of the batch (a barge-in) cancels `"cancel"` calls at
once, while a started `on_interrupt="finish"` call runs to completion under its own timeout and
keeps its real result. A hard cancellation of the caller still stops everything."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from opentelemetry.trace import StatusCode

from llmrtc import AbortController, ToolCall, ToolContext, ToolExecutor, ToolRegistry, tool
from llmrtc.telemetry.events import ToolEndEvent, ToolStartEvent
from llmrtc.testing import InMemoryTelemetry, RecordingHooks, abort_after
from llmrtc.tools.calls import ToolCallResult

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Shop:
    """Tools with counters: what ran, what completed, what the handler saw of its signal."""

    def __init__(self, *, finish_seconds: float = 0.4, finish_timeout: float | None = None):
        self.log: list[str] = []
        self.charges = 0  # charges started
        self.charged = 0  # charges completed (a refund must never happen twice)
        self.signal_seen: list[bool] = []  # ctx.abort_signal.aborted at the end of charge
        shop = self

        @tool
        async def search(query: str) -> str:
            """Slow search; cancelled by a barge-in."""
            shop.log.append("search started")
            await anyio.sleep(10)
            return query

        @tool(on_interrupt="finish", timeout=finish_timeout)
        async def charge(amount: int, ctx: ToolContext) -> dict[str, Any]:
            """Charge a card; finishes even when the user barges in."""
            shop.charges += 1
            shop.log.append("charge started")
            await anyio.sleep(finish_seconds)
            shop.charged += 1
            shop.signal_seen.append(ctx.abort_signal.aborted)
            shop.log.append("charge done")
            return {"charged": amount}

        @tool(on_interrupt="finish")
        async def refund(amount: int) -> str:
            """Fails after the barge-in: its real error is its result."""
            await anyio.sleep(0.2)
            raise ValueError("card declined")

        @tool(on_interrupt="finish")
        def sync_charge(amount: int, ctx: ToolContext) -> int:
            """A sync finish tool in a worker thread: its signal stays clear."""
            shop.charges += 1
            time.sleep(0.3)
            shop.signal_seen.append(ctx.abort_signal.aborted)
            shop.charged += 1
            return amount

        @tool(execution_policy="sequential")
        async def confirm(text: str) -> str:
            """A sequential barrier."""
            await anyio.sleep(10)
            return text

        self.registry = ToolRegistry([search, charge, refund, sync_charge, confirm])

    def on_result(self, result: ToolCallResult) -> None:
        self.log.append(f"result {result.call_id} {result.status}")


def calls(*names: str) -> list[ToolCall]:
    args = {"search": {"query": "q"}, "confirm": {"text": "t"}}
    return [
        ToolCall(f"c{i}", name, args.get(name, {"amount": 5})) for i, name in enumerate(names, 1)
    ]


async def test_barge_in_cancels_cancel_calls_and_lets_finish_calls_complete() -> None:
    shop = Shop()
    hooks = RecordingHooks()
    executor = ToolExecutor(shop.registry, hooks=hooks)
    async with abort_after(0.05, "barge-in") as controller:
        results = await executor.execute(
            calls("search", "charge"), abort_signal=controller.signal, on_result=shop.on_result
        )
    assert controller.signal.aborted
    search, charge = results
    assert search.status == "aborted" and "barge-in" in (search.error or "")
    assert charge.status == "ok" and charge.result == {"charged": 5}
    assert shop.charges == shop.charged == 1  # ran exactly once, to completion
    assert shop.signal_seen == [False]  # its own signal never reported the barge-in
    # The cancelled call was settled while the charge was still running, not after it.
    assert shop.log.index("result c1 aborted") < shop.log.index("charge done")
    assert shop.log[-1] == "result c2 ok"
    ends = hooks.of(ToolEndEvent)
    assert sorted((e.call_id, e.status) for e in ends) == [("c1", "aborted"), ("c2", "ok")]
    assert sorted(e.call_id for e in hooks.of(ToolStartEvent)) == ["c1", "c2"]
    assert hooks.names().count("on_tool_error") == 1  # the aborted one only
    assert executor.in_flight == 0


async def test_a_lone_finish_call_completes_in_the_callers_task() -> None:
    shop = Shop(finish_seconds=0.2)
    executor = ToolExecutor(shop.registry)
    async with abort_after(0.05) as controller:
        (result,) = await executor.execute(calls("charge"), abort_signal=controller.signal)
    assert result.status == "ok" and shop.charged == 1 and shop.signal_seen == [False]


async def test_a_finish_call_keeps_a_real_error_and_a_sync_handler_finishes_too() -> None:
    shop = Shop()
    executor = ToolExecutor(shop.registry)
    async with abort_after(0.05) as controller:
        refund, charge, search = await executor.execute(
            calls("refund", "sync_charge", "search"), abort_signal=controller.signal
        )
    assert refund.status == "error" and refund.error is not None
    assert charge.status == "ok" and charge.result == 5
    assert search.status == "aborted"
    assert shop.charged == 1 and shop.signal_seen == [False]


async def test_a_finish_call_still_times_out_under_its_own_timeout() -> None:
    shop = Shop(finish_seconds=10, finish_timeout=0.2)
    executor = ToolExecutor(shop.registry)
    started = time.monotonic()
    async with abort_after(0.05) as controller:
        search, charge = await executor.execute(
            calls("search", "charge"), abort_signal=controller.signal
        )
    assert search.status == "aborted"
    assert charge.status == "timeout"
    assert shop.charges == 1 and shop.charged == 0
    assert time.monotonic() - started < 5  # its timeout ended it, not its 10 s sleep


async def test_a_deadline_on_the_batch_signal_does_not_stop_a_started_finish_call() -> None:
    shop = Shop(finish_seconds=0.3)
    executor = ToolExecutor(shop.registry)
    controller = AbortController(deadline=time.monotonic() + 0.05)
    search, charge = await executor.execute(
        calls("search", "charge"), abort_signal=controller.signal
    )
    assert search.status == "aborted" and charge.status == "ok"
    assert shop.signal_seen == [False]


async def test_cancelling_the_caller_still_stops_a_finish_call_with_a_result() -> None:
    shop = Shop(finish_seconds=10)
    hooks = RecordingHooks()
    executor = ToolExecutor(shop.registry, hooks=hooks)
    got: list[ToolCallResult] = []
    controller = AbortController()
    with anyio.move_on_after(0.3) as scope:  # session teardown
        async with abort_after(0.05, controller=controller):
            await executor.execute(
                calls("search", "charge"), abort_signal=controller.signal, on_result=got.append
            )
    assert scope.cancelled_caught
    assert sorted((r.call_id, r.status) for r in got) == [("c1", "aborted"), ("c2", "aborted")]
    assert shop.charges == 1 and shop.charged == 0
    assert sorted(e.call_id for e in hooks.of(ToolEndEvent)) == ["c1", "c2"]
    assert executor.in_flight == 0


async def test_cancelling_the_caller_without_an_abort_stops_a_finish_call() -> None:
    shop = Shop(finish_seconds=10)
    executor = ToolExecutor(shop.registry)
    got: list[ToolCallResult] = []
    with anyio.move_on_after(0.1):
        await executor.execute(
            calls("charge"), abort_signal=AbortController().signal, on_result=got.append
        )
    assert [r.status for r in got] == ["aborted"] and shop.charged == 0


async def test_a_queued_finish_call_that_never_started_is_aborted() -> None:
    shop = Shop()
    hooks = RecordingHooks()
    executor = ToolExecutor(shop.registry, max_concurrency=1, hooks=hooks)
    other = AbortController()
    async with anyio.create_task_group() as group:
        # Another batch of the session holds the only slot (trio starts tasks in any order,
        # so the slot is taken before the batch under test starts).
        group.start_soon(lambda: executor.execute(calls("search"), abort_signal=other.signal))
        while "search started" not in shop.log:
            await anyio.sleep(0.01)
        async with abort_after(0.05) as controller:
            (charge,) = await executor.execute(calls("charge"), abort_signal=controller.signal)
        other.abort()
    assert charge.status == "aborted"
    assert shop.charges == 0  # it waited for the slot: nothing happened, nothing to finish
    (end,) = hooks.of(ToolEndEvent, tool_name="charge")
    assert not end.started
    assert executor.in_flight == 0


async def test_a_finish_call_behind_a_sequential_barrier_is_aborted() -> None:
    shop = Shop()
    executor = ToolExecutor(shop.registry)
    async with abort_after(0.05) as controller:
        confirm, charge = await executor.execute(
            calls("confirm", "charge"), abort_signal=controller.signal
        )
    assert confirm.status == "aborted" and charge.status == "aborted"
    assert shop.charges == 0


async def test_calls_after_a_finishing_sequential_call_are_aborted() -> None:
    shop = Shop(finish_seconds=0.2)

    @tool(execution_policy="sequential", on_interrupt="finish")
    async def book(slot: str) -> str:
        """A sequential booking that finishes."""
        await anyio.sleep(0.2)
        return f"booked {slot}"

    shop.registry.register(book)
    executor = ToolExecutor(shop.registry)
    async with abort_after(0.05) as controller:
        booked, charge = await executor.execute(
            [ToolCall("b", "book", {"slot": "9am"}), *calls("charge")],
            abort_signal=controller.signal,
        )
    assert booked.status == "ok" and booked.result == "booked 9am"
    assert charge.status == "aborted" and shop.charges == 0


async def test_an_abort_before_the_batch_starts_runs_nothing() -> None:
    shop = Shop()
    executor = ToolExecutor(shop.registry)
    controller = AbortController()
    controller.abort("barge-in")
    results = await executor.execute(calls("charge", "search"), abort_signal=controller.signal)
    assert [r.status for r in results] == ["aborted", "aborted"] and shop.charges == 0


async def test_without_an_abort_finish_calls_run_like_any_other() -> None:
    shop = Shop(finish_seconds=0.01)
    executor = ToolExecutor(shop.registry)
    results = await executor.execute(
        calls("charge", "sync_charge"), abort_signal=AbortController().signal
    )
    assert [r.status for r in results] == ["ok", "ok"] and shop.charged == 2


async def test_the_span_of_a_finish_call_records_its_real_status() -> None:
    telemetry = InMemoryTelemetry()
    shop = Shop(finish_seconds=0.2)
    executor = ToolExecutor(shop.registry, hooks=telemetry.hooks)
    async with abort_after(0.05) as controller:
        await executor.execute(calls("search", "charge"), abort_signal=controller.signal)
    search = telemetry.span("execute_tool search")
    charge = telemetry.span("execute_tool charge")
    assert search.attributes is not None and charge.attributes is not None
    assert search.attributes["llmrtc.tool.status"] == "aborted"
    assert charge.attributes["llmrtc.tool.status"] == "ok"
    assert charge.status.status_code is not StatusCode.ERROR
    assert search.status.status_code is not StatusCode.ERROR  # an abort is no failure
    assert search.end_time is not None and charge.end_time is not None
    assert search.end_time < charge.end_time  # the aborted span ended first


async def test_an_abort_from_another_thread_lets_the_finish_call_complete() -> None:
    shop = Shop(finish_seconds=0.2)
    executor = ToolExecutor(shop.registry)
    async with abort_after(0.05, from_thread=True) as controller:  # as a VAD thread does
        search, charge = await executor.execute(
            calls("search", "charge"), abort_signal=controller.signal
        )
    assert search.status == "aborted" and charge.status == "ok" and shop.charged == 1


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_native_task_cancel_still_gives_every_call_its_result() -> None:
    import asyncio

    shop = Shop(finish_seconds=10)
    hooks = RecordingHooks()
    executor = ToolExecutor(shop.registry, hooks=hooks)
    got: list[ToolCallResult] = []
    controller = AbortController()

    async def run() -> None:
        await executor.execute(
            calls("search", "charge"), abort_signal=controller.signal, on_result=got.append
        )

    task = asyncio.ensure_future(run())
    await anyio.sleep(0.05)
    controller.abort("barge-in")
    await anyio.sleep(0.05)  # the search is aborted, the charge runs on
    assert [r.status for r in got] == ["aborted"] and shop.charges == 1
    task.cancel()  # an application cancelling the turn's task natively
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted((r.call_id, r.status) for r in got) == [("c1", "aborted"), ("c2", "aborted")]
    assert len(hooks.of(ToolEndEvent)) == 2 and shop.charged == 0
    assert executor.in_flight == 0
