"""The ToolExecutor contract, point by point (issue: "Foundation … a ToolExecutor that never loses
a call"). Timing assertions use generous bounds and check order/causality, not speed."""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from typing import Any

import anyio
import pytest

from llmrtc import (
    AbortController,
    InvalidToolArgumentsError,
    ToolAbortedError,
    ToolCall,
    ToolCallResult,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolNotFoundError,
    ToolRegistry,
    ToolTimeoutError,
    define_tool,
    tool,
)

pytestmark = pytest.mark.anyio

STATUSES = {"ok", "error", "invalid_arguments", "not_found", "timeout", "aborted"}


class Probe:
    """Records what handlers did and when, to check ordering and concurrency."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.running = 0
        self.max_running = 0
        self.finally_ran: list[str] = []

    def start(self, name: str) -> None:
        self.events.append(("start", name))
        self.running += 1
        self.max_running = max(self.max_running, self.running)

    def end(self, name: str) -> None:
        self.events.append(("end", name))
        self.running -= 1

    def index(self, kind: str, name: str) -> int:
        return self.events.index((kind, name))


def make_registry(probe: Probe) -> ToolRegistry:
    async def sleeper(args: dict[str, Any], ctx: ToolContext) -> str:
        label = args.get("label", ctx.call_id)
        probe.start(label)
        try:
            await anyio.sleep(args["seconds"])
        finally:
            probe.finally_ran.append(label)
            probe.end(label)
        return f"slept {args['seconds']}"

    def blocking(args: dict[str, Any], ctx: ToolContext) -> str:
        time.sleep(args["seconds"])
        return "blocked"

    async def boom(args: dict[str, Any], ctx: ToolContext) -> None:
        raise RuntimeError("kaboom")

    sleep_schema = {
        "type": "object",
        "properties": {"seconds": {"type": "number", "minimum": 0}, "label": {"type": "string"}},
        "required": ["seconds"],
    }
    return ToolRegistry(
        [
            define_tool(ToolDefinition("sleep", "Sleep.", sleep_schema), sleeper),
            define_tool(
                ToolDefinition("write", "Write.", sleep_schema, execution_policy="sequential"),
                sleeper,
            ),
            define_tool(ToolDefinition("block", "Block a thread.", sleep_schema), blocking),
            define_tool(ToolDefinition("boom", "Raise."), boom),
            define_tool(ToolDefinition("lookupWeather", "Weather."), lambda a, c: "sunny"),
        ]
    )


def sleep_call(call_id: str, seconds: float, name: str = "sleep") -> ToolCall:
    return ToolCall(call_id, name, {"seconds": seconds, "label": call_id})


def assert_one_result_per_call(calls: list[ToolCall], results: list[ToolCallResult]) -> None:
    assert [r.call_id for r in results] == [c.call_id for c in calls]
    assert [r.tool_name for r in results] == [c.name for c in calls]
    assert all(r.status in STATUSES for r in results)
    for r in results:
        assert (r.error is None) == (r.status == "ok"), r


# 1. Exactly one result per call, in request order, whatever happens ---------------------------


async def test_every_kind_of_failure_still_gets_one_result_in_order(caplog: Any) -> None:
    probe = Probe()

    def raising_hook(*args: Any) -> None:
        raise ValueError("hook bug")

    executor = ToolExecutor(
        make_registry(probe), timeout=0.2, on_tool_start=raising_hook, on_tool_end=raising_hook
    )
    calls = [
        sleep_call("ok", 0.01),
        sleep_call("slow", 5),
        ToolCall("unknown", "nope", {}),
        ToolCall("bad", "sleep", {"seconds": -1}),
        ToolCall("malformed", "sleep", '{"seconds": '),
        ToolCall("raises", "boom", {}),
    ]
    with caplog.at_level(logging.ERROR, logger="llmrtc"):
        results = await executor.execute(calls)
    assert_one_result_per_call(calls, results)
    assert [r.status for r in results] == [
        "ok",
        "timeout",
        "not_found",
        "invalid_arguments",
        "invalid_arguments",
        "error",
    ]
    assert results[0].result == "slept 0.01"
    assert results[5].error == "tool 'boom' failed because of an internal error"
    assert "hook bug" in caplog.text  # logged, and changed no result


async def test_randomized_batches_with_random_aborts_never_lose_a_call() -> None:
    rng = random.Random(7)
    probe = Probe()
    ended: list[str] = []
    executor = ToolExecutor(
        make_registry(probe),
        max_concurrency=3,
        timeout=0.05,
        on_tool_end=lambda r: ended.append(r.call_id),
    )
    for batch_no in range(25):
        calls = []
        for i in range(rng.randint(1, 8)):
            kind = rng.choice(["sleep", "write", "block", "boom", "nope", "bad", "malformed"])
            cid = f"b{batch_no}-{i}"
            if kind in ("sleep", "write", "block"):
                calls.append(sleep_call(cid, rng.choice([0, 0.01, 0.03, 0.2]), kind))
            elif kind == "bad":
                calls.append(ToolCall(cid, "sleep", {"seconds": "x"}))
            elif kind == "malformed":
                calls.append(ToolCall(cid, "sleep", "{"))
            else:
                calls.append(ToolCall(cid, kind, {}))
        controller = AbortController()
        ended.clear()
        async with anyio.create_task_group() as group:
            delay = rng.choice([None, 0, 0.005, 0.02, 0.06])
            if delay is not None:
                group.start_soon(_abort_later, controller, delay)
            results = await executor.execute(calls, abort_signal=controller.signal)
        assert_one_result_per_call(calls, results)
        assert sorted(ended) == sorted(c.call_id for c in calls)  # on_tool_end once per call
    assert executor.in_flight == 0


async def _abort_later(controller: AbortController, delay: float) -> None:
    await anyio.sleep(delay)
    controller.abort("random")


# 2. Parallel calls run concurrently, within max_concurrency ---------------------------------


async def test_parallel_calls_overlap_but_never_exceed_max_concurrency() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe), max_concurrency=3)
    calls = [sleep_call(f"c{i}", 0.05) for i in range(8)]
    results = await executor.execute(calls)
    assert all(r.status == "ok" for r in results)
    assert probe.max_running == 3


async def test_max_concurrency_is_shared_by_concurrent_batches() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe), max_concurrency=2)
    outcomes: list[list[ToolCallResult]] = []

    async def run(prefix: str) -> None:
        outcomes.append(
            await executor.execute([sleep_call(f"{prefix}{i}", 0.05) for i in range(3)])
        )

    async with anyio.create_task_group() as group:
        group.start_soon(run, "a")
        group.start_soon(run, "b")
    assert probe.max_running == 2
    assert all(r.status == "ok" for batch in outcomes for r in batch)


# 3. A sequential call is a barrier in request order -----------------------------------------


async def test_sequential_call_is_a_barrier_in_request_order() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe))
    calls = [
        sleep_call("p1", 0.05),
        sleep_call("p2", 0.02),
        sleep_call("s", 0.02, "write"),
        sleep_call("p3", 0.02),
        sleep_call("p4", 0.02),
    ]
    results = await executor.execute(calls)
    assert all(r.status == "ok" for r in results)
    at = probe.index
    assert at("start", "p2") < at("end", "p1")  # p1 and p2 overlap
    assert at("start", "s") > max(at("end", "p1"), at("end", "p2"))
    assert min(at("start", "p3"), at("start", "p4")) > at("end", "s")
    assert at("start", "p4") < at("end", "p3")  # p3 and p4 overlap again


async def test_default_policy_sequential_runs_one_at_a_time_in_order() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe), default_policy="sequential")
    calls = [sleep_call(f"c{i}", 0.01) for i in range(4)]
    await executor.execute(calls)
    assert probe.max_running == 1
    assert [name for kind, name in probe.events if kind == "start"] == ["c0", "c1", "c2", "c3"]


# 4. A timeout cancels the handler -------------------------------------------------------------


async def test_timeout_cancels_async_handler_and_its_finally_runs() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe), timeout=0.1)
    started = time.monotonic()
    result = await executor.execute_single(sleep_call("slow", 30))
    assert time.monotonic() - started < 5
    assert result.status == "timeout"
    assert result.error == "tool 'sleep' timed out after 0.1 s"
    assert probe.finally_ran == ["slow"]
    assert result.duration_ms >= 90


async def test_tool_timeout_overrides_executor_default() -> None:
    async def slow(args: dict[str, Any], ctx: ToolContext) -> str:
        await anyio.sleep(0.3)
        return "done"

    patient = define_tool(ToolDefinition("patient", timeout=5), slow)
    hasty = define_tool(ToolDefinition("hasty", timeout=0.05), slow)
    executor = ToolExecutor(ToolRegistry([patient, hasty]), timeout=0.1)
    results = await executor.execute([ToolCall("1", "patient"), ToolCall("2", "hasty")])
    assert [r.status for r in results] == ["ok", "timeout"]
    assert "0.05 s" in (results[1].error or "")


async def test_sync_handler_timeout_returns_at_deadline_and_sets_its_signal() -> None:
    finished = threading.Event()
    seen_abort: list[bool] = []

    def stubborn(args: dict[str, Any], ctx: ToolContext) -> str:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not ctx.abort_signal.aborted:
            time.sleep(0.005)
        seen_abort.append(ctx.abort_signal.aborted)
        time.sleep(0.2)  # keeps running after noticing: its late value must be dropped
        finished.set()
        return "late value"

    executor = ToolExecutor(
        ToolRegistry([define_tool(ToolDefinition("stubborn", timeout=0.1), stubborn)])
    )
    result = await executor.execute_single(ToolCall("c", "stubborn"))
    assert result.status == "timeout" and result.result is None
    assert not finished.is_set()  # the thread is still busy: we did not wait for it
    with anyio.fail_after(5):
        while not finished.is_set():
            await anyio.sleep(0.01)
    assert seen_abort == [True]  # the per-call signal told it to stop cooperatively


async def test_timeout_clock_starts_when_the_handler_starts_not_while_queued() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe), max_concurrency=1, timeout=0.5)
    results = await executor.execute([sleep_call(f"c{i}", 0.2) for i in range(3)])
    assert [r.status for r in results] == ["ok", "ok", "ok"]  # the last waited 0.4 s in line


async def test_a_timeout_aborts_only_that_calls_signal() -> None:
    signals: dict[str, Any] = {}

    async def watch(args: dict[str, Any], ctx: ToolContext) -> str:
        signals[ctx.call_id] = ctx.abort_signal
        await anyio.sleep(args["seconds"])
        return "ok"

    schema = {"type": "object", "properties": {"seconds": {"type": "number"}}}
    executor = ToolExecutor(
        ToolRegistry([define_tool(ToolDefinition("watch", parameters=schema), watch)]), timeout=0.1
    )
    results = await executor.execute(
        [ToolCall("fast", "watch", {"seconds": 0.01}), ToolCall("slow", "watch", {"seconds": 5})]
    )
    assert [r.status for r in results] == ["ok", "timeout"]
    assert signals["slow"].aborted and signals["slow"].reason == "timeout"
    assert not signals["fast"].aborted
    assert signals["fast"] is not signals["slow"]


# 5. Abort ---------------------------------------------------------------------------------------


async def test_abort_keeps_finished_cancels_running_and_skips_queued() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe), max_concurrency=1)
    controller = AbortController()
    calls = [sleep_call("done", 0.0), sleep_call("running", 10), sleep_call("queued", 10)]
    async with anyio.create_task_group() as group:
        group.start_soon(_abort_later, controller, 0.1)
        started = time.monotonic()
        results = await executor.execute(calls, abort_signal=controller.signal)
    assert time.monotonic() - started < 5
    assert [r.status for r in results] == ["ok", "aborted", "aborted"]
    assert results[1].error == "tool call 'sleep' aborted (random)"
    assert results[1].duration_ms >= 50  # it ran until the abort
    assert results[2].duration_ms == 0  # it never ran
    assert "queued" not in [name for _, name in probe.events]  # never started
    assert "running" in probe.finally_ran


async def test_already_aborted_signal_runs_nothing_and_every_call_is_aborted() -> None:
    probe = Probe()
    ended: list[str] = []
    executor = ToolExecutor(make_registry(probe), on_tool_end=lambda r: ended.append(r.status))
    controller = AbortController()
    controller.abort("too late")
    calls = [sleep_call("a", 0), ToolCall("b", "nope", {}), ToolCall("c", "sleep", "{bad")]
    results = await executor.execute(calls, abort_signal=controller.signal)
    assert [r.status for r in results] == ["aborted", "aborted", "aborted"]
    assert probe.events == []
    assert ended == ["aborted"] * 3


async def test_abort_from_another_thread_returns_promptly_while_a_thread_is_busy() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe))
    controller = AbortController()
    timer = threading.Timer(0.1, controller.abort, args=("barge-in",))
    timer.start()
    started = time.monotonic()
    results = await executor.execute(
        [sleep_call("t", 2, "block"), sleep_call("a", 10)], abort_signal=controller.signal
    )
    elapsed = time.monotonic() - started
    timer.join()
    assert [r.status for r in results] == ["aborted", "aborted"]
    assert elapsed < 1.5  # did not wait for the 2 s thread


async def test_handler_sees_its_signal_set_on_abort() -> None:
    seen: list[Any] = []

    async def waits(args: dict[str, Any], ctx: ToolContext) -> None:
        seen.append(ctx.abort_signal)
        await anyio.sleep(10)

    executor = ToolExecutor(ToolRegistry([define_tool(ToolDefinition("waits"), waits)]))
    controller = AbortController()
    async with anyio.create_task_group() as group:
        group.start_soon(_abort_later, controller, 0.05)
        await executor.execute([ToolCall("c", "waits")], abort_signal=controller.signal)
    assert seen[0].aborted and seen[0].reason == "random"


async def test_cancelling_the_caller_propagates_but_hooks_still_see_every_call() -> None:
    probe = Probe()
    ended: list[tuple[str, str]] = []
    executor = ToolExecutor(
        make_registry(probe), on_tool_end=lambda r: ended.append((r.call_id, r.status))
    )
    with anyio.move_on_after(0.1) as scope:
        await executor.execute([sleep_call("done", 0), sleep_call("long", 10)])
        pytest.fail("execute should have been cancelled")
    assert scope.cancelled_caught
    assert ended == [("done", "ok"), ("long", "aborted")]
    assert executor.in_flight == 0


# 6. Validation ------------------------------------------------------------------------------


async def test_invalid_arguments_never_reach_the_handler() -> None:
    calls_seen: list[Any] = []
    schema = {
        "type": "object",
        "properties": {"units": {"enum": ["celsius", "fahrenheit"]}, "days": {"default": 3}},
        "required": ["units"],
    }
    weather = define_tool(
        ToolDefinition("weather", parameters=schema), lambda a, c: calls_seen.append(a)
    )
    executor = ToolExecutor(ToolRegistry([weather]))
    bad, malformed, good = await executor.execute(
        [
            ToolCall("1", "weather", {"units": "kelvin"}),
            ToolCall("2", "weather", '{"units": "celsius"'),
            ToolCall("3", "weather", '{"units": "celsius"}'),
        ]
    )
    assert bad.status == "invalid_arguments"
    assert "units: 'kelvin' is not one of ['celsius', 'fahrenheit']" in (bad.error or "")
    assert malformed.status == "invalid_arguments"
    assert "arguments are not valid JSON" in (malformed.error or "")
    assert good.status == "ok"
    assert calls_seen == [{"units": "celsius", "days": 3}]  # defaults filled before the handler


async def test_validation_can_be_turned_off_but_json_is_still_parsed() -> None:
    seen: list[Any] = []
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    echo = define_tool(ToolDefinition("echo", parameters=schema), lambda a, c: seen.append(a))
    executor = ToolExecutor(ToolRegistry([echo]), validate_arguments=False)
    ok, malformed = await executor.execute(
        [ToolCall("1", "echo", {"n": "not a number"}), ToolCall("2", "echo", "{")]
    )
    assert ok.status == "ok" and seen == [{"n": "not a number"}]
    assert malformed.status == "invalid_arguments"


# 7. Unknown tools -----------------------------------------------------------------------------


async def test_unknown_tool_suggests_the_closest_names() -> None:
    executor = ToolExecutor(make_registry(Probe()))
    result = await executor.execute_single(ToolCall("1", "lookupWether", {}))
    assert result.status == "not_found"
    assert result.duration_ms == 0
    assert "did you mean 'lookupWeather'?" in (result.error or "")
    assert "Available tools: sleep, write, block, boom, lookupWeather." in (result.error or "")


# 8. Hooks -------------------------------------------------------------------------------------


async def test_hooks_fire_per_call_as_it_finishes_sync_and_async() -> None:
    probe = Probe()
    log: list[tuple[str, str, str]] = []

    async def on_start(call: ToolCall, ctx: ToolContext) -> None:
        await anyio.sleep(0)
        log.append(("start", call.call_id, ctx.call_id))

    def on_end(result: ToolCallResult) -> None:
        log.append(("end", result.call_id, result.status))
        if result.call_id == "fast":
            assert probe.running == 1  # "slow" is still running: not deferred to batch end

    async def on_error(call: ToolCall, error: BaseException) -> None:
        log.append(("error", call.call_id, type(error).__name__))

    executor = ToolExecutor(
        make_registry(probe),
        max_concurrency=2,
        timeout=0.3,
        on_tool_start=on_start,
        on_tool_end=on_end,
        on_tool_error=on_error,
    )
    controller = AbortController()
    calls = [
        sleep_call("fast", 0.01),
        sleep_call("slow", 0.1),
        ToolCall("missing", "nope"),
        ToolCall("invalid", "sleep", {}),
        ToolCall("raises", "boom"),
        sleep_call("timeout", 5),
        sleep_call("aborted", 5, "write"),
        sleep_call("queued", 0),
    ]
    async with anyio.create_task_group() as group:
        group.start_soon(_abort_later, controller, 0.6)
        await executor.execute(calls, abort_signal=controller.signal)
    ends = [(cid, status) for kind, cid, status in log if kind == "end"]
    assert sorted(ends) == sorted(
        [
            ("fast", "ok"),
            ("slow", "ok"),
            ("missing", "not_found"),
            ("invalid", "invalid_arguments"),
            ("raises", "error"),
            ("timeout", "timeout"),
            ("aborted", "aborted"),
            ("queued", "aborted"),
        ]
    )
    errors = {cid: kind for k, cid, kind in log if k == "error"}
    assert errors == {
        "missing": ToolNotFoundError.__name__,
        "invalid": InvalidToolArgumentsError.__name__,
        "raises": "RuntimeError",
        "timeout": ToolTimeoutError.__name__,
        "aborted": ToolAbortedError.__name__,
        "queued": ToolAbortedError.__name__,
    }
    starts = [cid for kind, cid, _ in log if kind == "start"]
    assert sorted(starts) == sorted(["fast", "slow", "raises", "timeout", "aborted"])
    for cid in starts:  # start precedes error/end of the same call
        assert log.index(("start", cid, cid)) < min(
            i for i, entry in enumerate(log) if entry[0] == "end" and entry[1] == cid
        )
    for cid in errors:  # error precedes end of the same call
        error_at = next(i for i, e in enumerate(log) if e[0] == "error" and e[1] == cid)
        end_at = next(i for i, e in enumerate(log) if e[0] == "end" and e[1] == cid)
        assert error_at < end_at


async def test_hook_time_does_not_count_against_the_timeout() -> None:
    probe = Probe()

    async def slow_hook(*args: Any) -> None:
        await anyio.sleep(0.3)

    executor = ToolExecutor(
        make_registry(probe), timeout=0.2, on_tool_start=slow_hook, on_tool_end=slow_hook
    )
    result = await executor.execute_single(sleep_call("c", 0.1))
    assert result.status == "ok"


# 9. Sync handlers never block the event loop -------------------------------------------------


async def test_sync_sleep_does_not_stop_a_concurrent_coroutine_from_ticking() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe))
    ticks: list[float] = []
    done = anyio.Event()

    async def ticker() -> None:
        while not done.is_set():
            ticks.append(time.monotonic())
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        await anyio.sleep(0.02)
        result = await executor.execute_single(sleep_call("t", 0.3, "block"))
        done.set()
    assert result.status == "ok"
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert len(ticks) >= 10
    assert max(gaps) < 0.15  # a blocked loop would show one ~300 ms gap


# Loops and backends ---------------------------------------------------------------------------


def test_one_executor_serves_batches_under_successive_event_loops() -> None:
    probe = Probe()
    executor = ToolExecutor(make_registry(probe), max_concurrency=2)
    for backend in ("asyncio", "asyncio", "trio"):

        async def batch() -> list[ToolCallResult]:
            calls = [sleep_call("a", 0.01), sleep_call("b", 0.01, "block"), sleep_call("c", 0.01)]
            return await executor.execute(calls)

        results = anyio.run(batch, backend=backend)
        assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert executor.in_flight == 0


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_abort_and_timeout_work_on_trio() -> None:
    probe = Probe()
    registry = make_registry(probe)
    registry.register(define_tool(ToolDefinition("park", timeout=30), lambda a, c: time.sleep(2)))
    executor = ToolExecutor(registry, timeout=0.1)
    controller = AbortController()
    timer = threading.Timer(0.3, controller.abort, args=("stop",))
    timer.start()
    results = await executor.execute(
        [sleep_call("t", 5), ToolCall("p", "park")], abort_signal=controller.signal
    )
    timer.join()
    assert [r.status for r in results] == ["timeout", "aborted"]


def test_constructor_rejects_bad_options() -> None:
    registry = ToolRegistry()
    with pytest.raises(ValueError, match="default_policy"):
        ToolExecutor(registry, default_policy="random")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_concurrency"):
        ToolExecutor(registry, max_concurrency=0)
    with pytest.raises(ValueError, match="timeout"):
        ToolExecutor(registry, timeout=0)


async def test_metadata_and_ids_reach_the_handler_read_only() -> None:
    seen: list[ToolContext] = []

    @tool
    async def inspect_ctx(ctx: ToolContext) -> None:
        """Look at the context."""
        seen.append(ctx)

    executor = ToolExecutor(ToolRegistry([inspect_ctx]))
    metadata = {"user": "ada"}
    await executor.execute_single(
        ToolCall("c9", "inspect_ctx"), session_id="s", turn_id="t", metadata=metadata
    )
    ctx = seen[0]
    assert (ctx.call_id, ctx.session_id, ctx.turn_id) == ("c9", "s", "t")
    assert ctx.metadata == {"user": "ada"}
    with pytest.raises(TypeError):
        ctx.metadata["user"] = "eve"  # type: ignore[index]
    metadata["user"] = "changed later"
    assert ctx.metadata["user"] == "ada"


async def test_execute_rejects_things_that_are_not_tool_calls() -> None:
    with pytest.raises(TypeError, match="ToolCall"):
        await ToolExecutor(ToolRegistry()).execute([{"name": "x"}])  # type: ignore[list-item]


async def test_empty_batch_returns_empty_list() -> None:
    assert await ToolExecutor(ToolRegistry()).execute([]) == []
