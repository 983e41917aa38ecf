"""Benchmark of `ToolExecutor`: per-call overhead, parallelism, timeout overshoot, abort latency.

Run:  .venv/bin/python benchmarks/executor.py [--quick] [--only N ...]
(full run ~2-3 min, --quick ~40 s). Everything runs under one `anyio.run` on asyncio.
It is a measurement, not a test: it always exits 0 unless it crashes.

What it prints, and how to read it:

1. Per-call cost of `await executor.execute(calls)` for batches of 1, 5 and 10 trivial async
   calls (`async def handler(args, ctx): return args["x"]`, dict arguments), with
   `validate_arguments=True` and `False`, beside two floors run in the same process:
     floor      a bare `anyio.create_task_group()` with one `start_soon(handler, args, None)` per
                call (batch 1: the handler is awaited inline inside a task group, no child task,
                since `execute` also runs a lone call without spawning a task);
     floor+val  the same, plus one `list(validator.iter_errors(args))` per call before the
                handler, on a `jsonschema.Draft202012Validator` compiled once.
   Sides are interleaved round by round (A, B, C, D, A, B, ...) over all batch sizes, so machine
   noise hits them alike. The executors keep their defaults (timeout=30 s, max_concurrency=10)
   and get no abort_signal. A round times 100 back-to-back batches; its per-call figure is
   round time / (100 * batch size). p50 and p99 are taken across rounds (not across single
   batches). The garbage collector is disabled inside rounds and run between cycles. "x floor"
   is p50(ours) / p50(floor); "+us" is p50(ours) - p50(floor). The issue's target: batch 5 with
   validation on costs at most 1.5x floor+val. (The executor itself validates with
   jsonschema-rs since issue 8, so it can come in under floor+val.)
2. Wall time of 5 parallel calls that each `await anyio.sleep(0.1)`, divided by 100 ms
   (target <= 1.05, judged on the max over the runs).
3. Timeout overshoot: a tool with `timeout=0.05` that sleeps 1 s; overshoot = when `execute`
   returns minus (when it was called + 50 ms). Async handler (cancelled) and sync handler
   (a `time.sleep(0.002)` loop in a worker thread that polls `ctx.abort_signal`; the result
   comes back at the deadline either way). Target p99 <= 10 ms.
4. Abort latency: a batch of 3 calls sleeping 1 s (async, or sync `time.sleep` in threads) is
   aborted 20 ms in with `controller.abort("x")`, called (a) from a task on the event loop or
   (b) from a plain `threading.Thread` standing in for a VAD thread; latency = from just before
   `abort()` to `execute` returning. Target p99 <= 10 ms.

5. Per-call cost of `execute` (batch 5, validation on) with `OpenTelemetryHooks` attached vs
   none, interleaved the same way; the hooks export through an SDK `BatchSpanProcessor` to an
   exporter that drops spans, and record metrics into an in-memory reader. Beside them, the
   OpenTelemetry SDK's own floor for the same telemetry (one span with the same attributes,
   two histogram points). Target: with hooks <= no hooks + SDK floor + 20 us per call.
6. The OpenAI Agents SDK's own tool path beside ours (needs the `benchmark` extra): a batch of
   5 `FunctionTool.on_invoke_tool(ctx, json)` calls under `asyncio.gather`, for an
   `@function_tool async def echo(x: int) -> int`, against `executor.execute` of 5 calls with
   the same JSON string arguments (validation on, default timeout and concurrency limit, no
   hooks). Interleaved round by round. Target: llmrtc <= 1.25x the SDK (aim: parity).
7. Per-call cost of `execute` for a batch of 5 validated async calls with JSON string arguments
   (validation on, default timeout and concurrency limit, no hooks, no abort_signal) against
   the bare floor of the same work: `asyncio.gather` of the same 5 handler coroutines, each
   handed `json.loads` of its argument string (no validation, no timeout, no results built).
   Interleaved round by round. Target (issue 18): execute <= 2x the gather floor.
8. Batches without background tools (issue 20): per-call cost of `execute` for a batch of 5
   validated async calls (dict arguments, default options, no hooks), as a ratio against the
   section-1 floors in the same run, on (a) an executor whose registry has only ordinary tools
   and (b) one whose registry also has a background tool, one call of which runs (holding a
   slot) the whole time. Interleaved round by round. "Same path": while the rounds run, the
   background machinery (`BackgroundCalls.start`) is counted and must never be entered. Run
   against another checkout (`PYTHONPATH=<checkout> python benchmarks/executor.py --only 8`),
   it prints (a) alone when that llmrtc has no background tools, so the ratio of (a) compares
   the two checkouts.

9. Side-effect policies (issue 21), per call, interleaved round by round:
   (a) a batch of 5 validated async calls of an ordinary tool (dict arguments, default options,
       no hooks) on an executor whose registry also holds a tool with every policy (reuse,
       a resource, retry, breaker, approval), with `resource_limits` and an approver, beside
       the same batch on an executor without them and the section-1 floors: p50 ratio to the
       floor. Run against another checkout (`PYTHONPATH=<checkout> python
       benchmarks/executor.py --only 9`), it prints the plain executor alone when that llmrtc
       has no policies, so the ratios compare the two checkouts.
   (b) a batch of 5 calls (session id set, distinct arguments every batch, so no call is a
       duplicate) of a tool with `on_duplicate="reuse"` and `resources=("r",)` (limit 1000)
       against the same tool without them: the difference in us per call. Target (issue 21):
       at most 10 us. The duplicate table is emptied between rounds (outside the timing), so
       it holds at most one round's 500 calls, as a session would.
   (c) informational: a batch of 5 reuse hits (the same 5 calls again: no handler runs) against
       (b)'s plain tool, and a reuse tool's call while the duplicate table is full (10 000
       calls remembered within the window).

With ~50 samples a p99 is close to the max. The machine this runs on may be shared and noisy:
treat single MISSes near the line with suspicion and re-run; ratios within one run are more
trustworthy than absolute microseconds.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from importlib.metadata import version
from typing import Any

import anyio
from jsonschema import Draft202012Validator
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from llmrtc import (
    AbortController,
    OpenTelemetryHooks,
    ToolCall,
    ToolCallResult,
    ToolDefinition,
    ToolExecutor,
    ToolRegistry,
    define_tool,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"x": {"type": "integer"}},
    "required": ["x"],
}
BATCH_SIZES = (1, 5, 10)
BATCHES_PER_ROUND = 100
OVERHEAD_TARGET = 1.5  # batch 5, validation on, vs floor+val
OTEL_BUDGET_US = 20.0  # with OpenTelemetryHooks: at most no hooks + SDK floor + this, per call
PARALLEL_TARGET = 1.05
LATENCY_TARGET_MS = 10.0

now_ns = time.perf_counter_ns


# ----------------------------------------------------------------------------- helpers


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100)."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    k = (len(ordered) - 1) * q / 100
    lo = math.floor(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def make_tool(name: str, handler: Callable[..., Any], timeout: float | None = None) -> Any:
    return define_tool(
        ToolDefinition(
            name=name, description=f"benchmark tool {name}", parameters=SCHEMA, timeout=timeout
        ),
        handler,
    )


def check(results: list[ToolCallResult], status: str) -> None:
    bad = [r for r in results if r.status != status]
    if bad:
        raise RuntimeError(f"expected status {status!r}, got {bad[0]!r}")


async def echo(args: Any, ctx: Any) -> Any:
    return args["x"]


# ----------------------------------------------------------------------------- 1. overhead

RoundFn = Callable[[int], Awaitable[None]]


def executor_side(executor: ToolExecutor, calls: list[ToolCall]) -> RoundFn:
    execute = executor.execute

    async def run(batches: int) -> None:
        for _ in range(batches):
            await execute(calls)

    return run


def floor_side(size: int, validator: Draft202012Validator | None) -> RoundFn:
    arg_list = [{"x": i} for i in range(size)]
    create_task_group = anyio.create_task_group

    if validator is None:
        call: Callable[[Any, Any], Coroutine[Any, Any, Any]] = echo
    else:
        iter_errors = validator.iter_errors

        async def call(args: Any, ctx: Any) -> Any:
            if list(iter_errors(args)):
                raise ValueError("invalid arguments")
            return await echo(args, ctx)

    if size == 1:
        only = arg_list[0]

        async def run(batches: int) -> None:
            for _ in range(batches):
                async with create_task_group():
                    await call(only, None)

        return run

    async def run_many(batches: int) -> None:
        for _ in range(batches):
            async with create_task_group() as group:
                for args in arg_list:
                    group.start_soon(call, args, None)

    return run_many


async def bench_overhead(cycles: int, warmup_cycles: int) -> list[str]:
    registry = ToolRegistry([make_tool("echo", echo)])
    with_validation = ToolExecutor(registry, validate_arguments=True)
    without_validation = ToolExecutor(registry, validate_arguments=False)
    validator = Draft202012Validator(SCHEMA)

    side_names = ("execute(validate=True)", "execute(validate=False)", "floor", "floor+val")
    sides: dict[tuple[int, str], RoundFn] = {}
    for size in BATCH_SIZES:
        calls = [ToolCall(f"call_{i}", "echo", {"x": i}) for i in range(size)]
        check(await with_validation.execute(calls), "ok")
        check(await without_validation.execute(calls), "ok")
        sides[size, side_names[0]] = executor_side(with_validation, calls)
        sides[size, side_names[1]] = executor_side(without_validation, calls)
        sides[size, side_names[2]] = floor_side(size, None)
        sides[size, side_names[3]] = floor_side(size, validator)

    samples: dict[tuple[int, str], list[float]] = {key: [] for key in sides}
    gc.collect()
    gc.disable()
    try:
        for cycle in range(warmup_cycles + cycles):
            for key, run in sides.items():
                started = now_ns()
                await run(BATCHES_PER_ROUND)
                elapsed = now_ns() - started
                if cycle >= warmup_cycles:
                    samples[key].append(elapsed / 1000 / (BATCHES_PER_ROUND * key[0]))
            gc.collect()
    finally:
        gc.enable()

    lines = [
        "1) per-call cost of `await executor.execute(calls)`, trivial async tool, dict arguments",
        "   ToolExecutor(registry, validate_arguments=...), default timeout=30 s, no abort_signal",
        f"   p50/p99 across {cycles} interleaved rounds per row; per-call = round time /"
        f" ({BATCHES_PER_ROUND} batches * size); gc off in rounds",
        "   floor     = bare anyio task group, start_soon(handler) per call"
        " (batch 1: handler awaited inline in a task group)",
        "   floor+val = floor + list(Draft202012Validator.iter_errors(args)) per call"
        " (validator compiled once)",
        "",
        f"   {'batch':>5}  {'side':<24}{'p50 us':>8}{'p99 us':>8}"
        f"{'x floor':>9}{'+us':>7}{'x floor+val':>13}{'+us':>7}",
    ]
    p50 = {key: percentile(values, 50) for key, values in samples.items()}
    for size in BATCH_SIZES:
        base, base_val = p50[size, "floor"], p50[size, "floor+val"]
        for name in side_names:
            key = (size, name)
            row = f"   {size:>5}  {name:<24}{p50[key]:>8.2f}{percentile(samples[key], 99):>8.2f}"
            if name.startswith("execute"):
                row += f"{p50[key] / base:>8.2f}x{p50[key] - base:>7.2f}"
                row += f"{p50[key] / base_val:>12.2f}x{p50[key] - base_val:>7.2f}"
            lines.append(row)
    ratio = p50[5, side_names[0]] / p50[5, "floor+val"]
    lines += [
        "",
        f"   target: batch 5, validate=True <= {OVERHEAD_TARGET}x floor+val (p50 vs p50):"
        f" {ratio:.2f}x  {verdict(ratio <= OVERHEAD_TARGET)}",
    ]
    return lines


# ----------------------------------------------------------------------------- 2. parallelism


async def nap(args: Any, ctx: Any) -> None:
    await anyio.sleep(0.1)


async def bench_parallel(runs: int) -> list[str]:
    executor = ToolExecutor(ToolRegistry([make_tool("nap", nap)]))
    calls = [ToolCall(f"nap_{i}", "nap", {"x": i}) for i in range(5)]
    ratios = []
    for _ in range(runs):
        started = now_ns()
        results = await executor.execute(calls)
        ratios.append((now_ns() - started) / 100e6)
        check(results, "ok")
    worst = max(ratios)
    return [
        "2) 5 parallel calls each `await anyio.sleep(0.1)`: wall time / 100 ms",
        f"   {runs} runs: p50 {percentile(ratios, 50):.3f}  max {worst:.3f}"
        f"   target max <= {PARALLEL_TARGET}  {verdict(worst <= PARALLEL_TARGET)}",
    ]


# ----------------------------------------------------------------------------- 3. timeouts


async def slow_async(args: Any, ctx: Any) -> None:
    await anyio.sleep(1)


def slow_sync(args: Any, ctx: Any) -> None:
    # A well-behaved blocking tool: sleeps in 2 ms steps and stops once its signal is set
    # (on timeout or abort). One that ignores the signal keeps its thread for the full second,
    # and the executor bounds such abandoned threads (2 x max_concurrency alive).
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline and not ctx.abort_signal.aborted:
        time.sleep(0.002)


def latency_row(label: str, values_ms: list[float]) -> str:
    p99 = percentile(values_ms, 99)
    return (
        f"   {label:<31}n={len(values_ms):<3} p50 {percentile(values_ms, 50):5.2f}"
        f"  p99 {p99:5.2f}  max {max(values_ms):5.2f} ms"
        f"   target p99 <= {LATENCY_TARGET_MS:g} ms  {verdict(p99 <= LATENCY_TARGET_MS)}"
    )


async def bench_timeouts(samples: int) -> list[str]:
    registry = ToolRegistry(
        [
            make_tool("slow_async", slow_async, timeout=0.05),
            make_tool("slow_sync", slow_sync, timeout=0.05),
        ]
    )
    executor = ToolExecutor(registry)
    overshoot: dict[str, list[float]] = {"slow_async": [], "slow_sync": []}
    for _ in range(samples):
        for name, values in overshoot.items():
            calls = [ToolCall("t", name, {"x": 1})]
            started = now_ns()
            results = await executor.execute(calls)
            values.append((now_ns() - started - 50e6) / 1e6)
            check(results, "timeout")
    return [
        "3) timeout overshoot: timeout=0.05, handler sleeps 1 s;"
        " overshoot = return - (call + 50 ms)",
        latency_row("async (await anyio.sleep)", overshoot["slow_async"]),
        latency_row("sync (thread, polls its signal)", overshoot["slow_sync"]),
    ]


# ----------------------------------------------------------------------------- 4. abort


class VadThread:
    """A long-lived plain thread that aborts controllers on request, as a VAD thread would."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[tuple[AbortController, float, list[int]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name="fake-vad", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (request := self._requests.get()) is not None:
            controller, delay, stamp = request
            time.sleep(delay)
            stamp.append(now_ns())
            controller.abort("x")

    def abort_after(self, controller: AbortController, delay: float, stamp: list[int]) -> None:
        self._requests.put((controller, delay, stamp))

    def close(self) -> None:
        self._requests.put(None)
        self._thread.join()


async def abort_sample(
    executor: ToolExecutor, calls: list[ToolCall], vad: VadThread | None
) -> float:
    controller = AbortController()
    stamp: list[int] = []

    async def abort_from_loop() -> None:
        await anyio.sleep(0.02)
        stamp.append(now_ns())
        controller.abort("x")

    async with anyio.create_task_group() as group:
        if vad is None:
            group.start_soon(abort_from_loop)
        else:
            vad.abort_after(controller, 0.02, stamp)
        results = await executor.execute(calls, abort_signal=controller.signal)
        returned = now_ns()
    check(results, "aborted")
    return (returned - stamp[0]) / 1e6


async def bench_abort(samples: int) -> list[str]:
    registry = ToolRegistry(
        [make_tool("slow_async", slow_async), make_tool("slow_sync", slow_sync)]
    )
    executor = ToolExecutor(registry)
    vad = VadThread()
    cases = {
        "async batch, abort from loop": ("slow_async", False),
        "async batch, abort from thread": ("slow_async", True),
        "sync batch, abort from loop": ("slow_sync", False),
        "sync batch, abort from thread": ("slow_sync", True),
    }
    latency: dict[str, list[float]] = {label: [] for label in cases}
    try:
        for _ in range(samples):
            for label, (name, from_thread) in cases.items():
                calls = [ToolCall(f"a{i}", name, {"x": i}) for i in range(3)]
                latency[label].append(
                    await abort_sample(executor, calls, vad if from_thread else None)
                )
    finally:
        vad.close()
    return [
        "4) abort latency: 3 calls sleeping 1 s, abort() 20 ms in;"
        " latency = abort() -> execute returned",
        *(latency_row(label, values) for label, values in latency.items()),
    ]


# ----------------------------------------------------------------------------- main


# ----------------------------------------------------------------------------- 5. telemetry


class _DroppingExporter(SpanExporter):
    """Accepts spans and throws them away: the cost measured is ours and the SDK's, not I/O."""

    def export(self, spans: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS


async def bench_otel(cycles: int, warmup_cycles: int) -> list[str]:
    tracer_provider = TracerProvider()
    # A queue large enough for this synthetic rate: an overflowing one logs on every span.
    tracer_provider.add_span_processor(
        BatchSpanProcessor(_DroppingExporter(), max_queue_size=2**16, schedule_delay_millis=100)
    )
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    hooks = OpenTelemetryHooks(tracer_provider=tracer_provider, meter_provider=meter_provider)
    registry = ToolRegistry([make_tool("echo", echo)])
    size = 5
    calls = [ToolCall(f"call_{i}", "echo", {"x": i}) for i in range(size)]
    tracer = tracer_provider.get_tracer("floor")
    histogram = meter_provider.get_meter("floor").create_histogram("floor", unit="s")
    span_attributes = {f"attribute.{i}": "value" for i in range(6)}
    metric_attributes = {"gen_ai.tool.name": "echo", "llmrtc.tool.status": "ok"}

    async def sdk_floor(batches: int) -> None:
        # What the SDK itself costs per call for one span and two histogram points.
        for _ in range(batches * size):
            tracer.start_span("floor", attributes=span_attributes).end()
            histogram.record(0.001, metric_attributes)
            histogram.record(0.0, metric_attributes)

    sides = {
        "no hooks": executor_side(ToolExecutor(registry), calls),
        "OpenTelemetryHooks": executor_side(ToolExecutor(registry, hooks=hooks), calls),
        "SDK floor (span+2 points)": sdk_floor,
    }
    samples: dict[str, list[float]] = {name: [] for name in sides}
    gc.collect()
    gc.disable()
    try:
        for cycle in range(warmup_cycles + cycles):
            for name, run in sides.items():
                started = now_ns()
                await run(BATCHES_PER_ROUND)
                if cycle >= warmup_cycles:
                    elapsed = now_ns() - started
                    samples[name].append(elapsed / 1000 / (BATCHES_PER_ROUND * size))
            gc.collect()
    finally:
        gc.enable()
        tracer_provider.shutdown()
        meter_provider.shutdown()
    p50 = {name: percentile(values, 50) for name, values in samples.items()}
    ratio = p50["OpenTelemetryHooks"] / p50["no hooks"]
    ours = p50["OpenTelemetryHooks"] - p50["no hooks"] - p50["SDK floor (span+2 points)"]
    lines = [
        "5) per-call cost with OpenTelemetryHooks (a span + 2 histogram points per call) vs none",
        f"   batch {size}, validation on; SDK TracerProvider + BatchSpanProcessor (dropping"
        " exporter), SDK MeterProvider + in-memory reader; content capture off",
    ]
    for name, values in samples.items():
        lines.append(f"   {name:<24}p50 {p50[name]:7.2f} us   p99 {percentile(values, 99):7.2f} us")
    budget = p50["no hooks"] + p50["SDK floor (span+2 points)"] + OTEL_BUDGET_US
    lines.append(
        f"   with hooks {p50['OpenTelemetryHooks']:.2f} us = no hooks + SDK floor + {ours:.2f} us"
        f" ({ratio:.2f}x no hooks)"
    )
    lines.append(
        f"   target: <= no hooks + SDK floor + {OTEL_BUDGET_US:g} us = {budget:.2f} us:"
        f" {verdict(p50['OpenTelemetryHooks'] <= budget)}"
    )
    return lines


# ----------------------------------------------------------------------------- 6. Agents SDK

SDK_TARGET = 1.25


async def bench_agents_sdk(cycles: int, warmup_cycles: int) -> list[str]:
    import asyncio

    try:
        from agents import function_tool
        from agents.tool_context import ToolContext as SdkToolContext
    except ImportError:
        return ["6) OpenAI Agents SDK comparison skipped: pip install -e '.[benchmark]'"]

    @function_tool
    async def sdk_echo(x: int) -> int:
        """Echo x."""
        return x

    size = 5
    arguments = [f'{{"x": {i}}}' for i in range(size)]
    contexts = [
        SdkToolContext(
            context=None, tool_name="sdk_echo", tool_call_id=f"call_{i}", tool_arguments=raw
        )
        for i, raw in enumerate(arguments)
    ]
    invoke = sdk_echo.on_invoke_tool
    pairs = list(zip(contexts, arguments, strict=True))
    gather = asyncio.gather

    async def sdk_side(batches: int) -> None:
        for _ in range(batches):
            await gather(*[invoke(ctx, raw) for ctx, raw in pairs])

    executor = ToolExecutor(ToolRegistry([make_tool("echo", echo)]))
    calls = [ToolCall(f"call_{i}", "echo", raw) for i, raw in enumerate(arguments)]
    check(await executor.execute(calls), "ok")
    if [int(v) for v in await gather(*[invoke(c, r) for c, r in pairs])] != list(range(size)):
        raise RuntimeError("the SDK tool did not echo its arguments")
    sides = {"llmrtc execute": executor_side(executor, calls), "Agents SDK gather": sdk_side}
    samples: dict[str, list[float]] = {name: [] for name in sides}
    gc.collect()
    gc.disable()
    try:
        for cycle in range(warmup_cycles + cycles):
            for name, run in sides.items():
                started = now_ns()
                await run(BATCHES_PER_ROUND)
                if cycle >= warmup_cycles:
                    elapsed = now_ns() - started
                    samples[name].append(elapsed / 1000 / (BATCHES_PER_ROUND * size))
            gc.collect()
    finally:
        gc.enable()
    p50 = {name: percentile(values, 50) for name, values in samples.items()}
    ratio = p50["llmrtc execute"] / p50["Agents SDK gather"]
    lines = [
        f"6) vs the OpenAI Agents SDK {version('openai-agents')}: batch of {size}, JSON string"
        " arguments, per call",
        "   llmrtc: execute(calls), validation on, timeout 30 s, max_concurrency 10, no hooks",
        "   SDK:    asyncio.gather(FunctionTool.on_invoke_tool(ctx, json) x 5), @function_tool",
    ]
    for name, values in samples.items():
        lines.append(f"   {name:<24}p50 {p50[name]:7.2f} us   p99 {percentile(values, 99):7.2f} us")
    lines.append(
        f"   target: llmrtc <= {SDK_TARGET}x the SDK (p50 vs p50): {ratio:.2f}x"
        f"  {verdict(ratio <= SDK_TARGET)}"
    )
    return lines


# ----------------------------------------------------------------------------- 7. gather floor

GATHER_TARGET = 2.0


async def bench_gather_floor(cycles: int, warmup_cycles: int) -> list[str]:
    import asyncio
    import json

    size = 5
    arguments = [f'{{"x": {i}}}' for i in range(size)]
    executor = ToolExecutor(ToolRegistry([make_tool("echo", echo)]))
    calls = [ToolCall(f"call_{i}", "echo", raw) for i, raw in enumerate(arguments)]
    gather = asyncio.gather
    loads = json.loads

    async def gather_side(batches: int) -> None:
        for _ in range(batches):
            await gather(*[echo(loads(raw), None) for raw in arguments])

    check(await executor.execute(calls), "ok")
    if await gather(*[echo(loads(raw), None) for raw in arguments]) != list(range(size)):
        raise RuntimeError("the gather floor did not echo its arguments")
    sides = {"llmrtc execute": executor_side(executor, calls), "gather+json.loads": gather_side}
    samples: dict[str, list[float]] = {name: [] for name in sides}
    gc.collect()
    gc.disable()
    try:
        for cycle in range(warmup_cycles + cycles):
            for name, run in sides.items():
                started = now_ns()
                await run(BATCHES_PER_ROUND)
                if cycle >= warmup_cycles:
                    elapsed = now_ns() - started
                    samples[name].append(elapsed / 1000 / (BATCHES_PER_ROUND * size))
            gc.collect()
    finally:
        gc.enable()
    p50 = {name: percentile(values, 50) for name, values in samples.items()}
    ratio = p50["llmrtc execute"] / p50["gather+json.loads"]
    lines = [
        f"7) vs a bare asyncio.gather of the same handlers: batch of {size}, JSON string"
        " arguments, per call",
        "   llmrtc: execute(calls), validation on, timeout 30 s, max_concurrency 10, no hooks",
        "   floor:  asyncio.gather(handler(json.loads(raw), None) x 5)",
    ]
    for name, values in samples.items():
        lines.append(f"   {name:<24}p50 {p50[name]:7.2f} us   p99 {percentile(values, 99):7.2f} us")
    lines.append(
        f"   target: llmrtc <= {GATHER_TARGET}x the gather floor (p50 vs p50): {ratio:.2f}x"
        f"  {verdict(ratio <= GATHER_TARGET)}"
    )
    return lines


# ----------------------------------------------------------------------------- 8. no background


async def bench_no_background(cycles: int, warmup_cycles: int) -> list[str]:
    size = 5
    calls = [ToolCall(f"call_{i}", "echo", {"x": i}) for i in range(size)]
    validator = Draft202012Validator(SCHEMA)
    plain = ToolExecutor(ToolRegistry([make_tool("echo", echo)]))
    check(await plain.execute(calls), "ok")
    sides: dict[str, RoundFn] = {
        "execute, ordinary tools": executor_side(plain, calls),
        "floor": floor_side(size, None),
        "floor+val": floor_side(size, validator),
    }
    try:  # issue 20's background calls; an older llmrtc has none
        from llmrtc.execution.background import BackgroundCalls
    except ImportError:
        BackgroundCalls = None  # the class, or None
    mixed: ToolExecutor | None = None
    if BackgroundCalls is not None:

        async def forever(args: Any, ctx: Any) -> None:
            await anyio.sleep_forever()

        later = define_tool(
            ToolDefinition(
                name="later",
                description="benchmark background tool",
                parameters=SCHEMA,
                background=True,  # type: ignore[call-arg]  # absent before issue 20
            ),
            forever,
        )
        mixed = ToolExecutor(ToolRegistry([make_tool("echo", echo), later]))
        check(await mixed.execute([ToolCall("bg", "later", {"x": 0})]), "running")
        check(await mixed.execute(calls), "ok")
        sides["execute, a background call running"] = executor_side(mixed, calls)
        original_start = BackgroundCalls.start
        entered = [0]

        def counted_start(self: Any, *args: Any) -> None:
            entered[0] += 1
            original_start(self, *args)

        BackgroundCalls.start = counted_start  # type: ignore[method-assign]
    samples: dict[str, list[float]] = {name: [] for name in sides}
    gc.collect()
    gc.disable()
    try:
        for cycle in range(warmup_cycles + cycles):
            for name, run in sides.items():
                started = now_ns()
                await run(BATCHES_PER_ROUND)
                if cycle >= warmup_cycles:
                    elapsed = now_ns() - started
                    samples[name].append(elapsed / 1000 / (BATCHES_PER_ROUND * size))
            gc.collect()
    finally:
        gc.enable()
        if BackgroundCalls is not None:
            BackgroundCalls.start = original_start  # type: ignore[method-assign]
    if mixed is not None:
        if [c.call_id for c in mixed.background_calls] != ["bg"]:
            raise RuntimeError("the background call stopped during the rounds")
        await mixed.aclose()
    p50 = {name: percentile(values, 50) for name, values in samples.items()}
    lines = [
        f"8) batches without background tools: batch of {size}, validation on, dict arguments,"
        " per call",
        "   floor = bare anyio task group (section 1); floor+val = floor + jsonschema per call",
    ]
    for name, values in samples.items():
        row = f"   {name:<36}p50 {p50[name]:7.2f} us   p99 {percentile(values, 99):7.2f} us"
        if name.startswith("execute"):
            row += f"   {p50[name] / p50['floor']:.2f}x floor"
            row += f"   {p50[name] / p50['floor+val']:.2f}x floor+val"
        lines.append(row)
    if BackgroundCalls is None:
        lines.append("   (this llmrtc has no background tools: (a) only)")
    else:
        lines.append(
            f"   background machinery entered during the rounds: {entered[0]} times"
            f"  {verdict(entered[0] == 0)}"
        )
    return lines


# ----------------------------------------------------------------------------- 9. policies

POLICY_BUDGET_US = 10.0  # reuse + a resource: at most this much more per call than without


def policy_tool(name: str, **policies: Any) -> Any:
    """A `make_tool` echo whose definition also carries issue 21's `policies`."""
    return define_tool(
        ToolDefinition(
            name=name,
            description=f"benchmark tool {name}",
            parameters=SCHEMA,
            **policies,
        ),
        echo,
    )


class PolicySide:
    """One side of section 9: `prepare()` (outside the timing) builds the round's batches."""

    def __init__(
        self,
        prepare: Callable[[int], RoundFn],
        size: int = 5,
    ) -> None:
        self.prepare = prepare
        self.size = size


def fresh_calls(name: str, size: int, counter: list[int]) -> Callable[[int], list[list[ToolCall]]]:
    """Batches whose arguments never repeat (no call is a duplicate of another)."""

    def build(batches: int) -> list[list[ToolCall]]:
        start = counter[0]
        counter[0] += batches * size
        return [
            [
                ToolCall(f"c{start + b * size + i}", name, {"x": start + b * size + i})
                for i in range(size)
            ]
            for b in range(batches)
        ]

    return build


def batches_side(
    executor_for_round: Callable[[], ToolExecutor],
    build: Callable[[int], list[list[ToolCall]]],
    session_id: str | None,
) -> Callable[[int], RoundFn]:
    """A side that runs prebuilt batches on the executor `executor_for_round()` gives."""

    def prepare(batches: int) -> RoundFn:
        executor = executor_for_round()
        batch_list = build(batches)
        execute = executor.execute

        async def run(count: int) -> None:
            for calls in batch_list[:count]:
                await execute(calls, session_id=session_id)

        return run

    return prepare


async def bench_policies(cycles: int, warmup_cycles: int) -> list[str]:
    size = 5
    calls = [ToolCall(f"call_{i}", "echo", {"x": i}) for i in range(size)]
    validator = Draft202012Validator(SCHEMA)
    plain = ToolExecutor(ToolRegistry([make_tool("echo", echo)]))
    check(await plain.execute(calls), "ok")
    sides: dict[str, PolicySide] = {
        "floor": PolicySide(lambda _: floor_side(size, None)),
        "floor+val": PolicySide(lambda _: floor_side(size, validator)),
        "(a) execute, no policies": PolicySide(lambda _: executor_side(plain, calls)),
    }
    try:  # issue 21's policies; an older llmrtc has none
        from llmrtc import CircuitBreaker, RetryPolicy

        has_policies = True
    except ImportError:
        has_policies = False
    counter = [0]
    if has_policies:

        async def approve(call: ToolCall, ctx: Any) -> bool:
            return True

        refund = policy_tool(
            "refund",
            on_duplicate="reuse",
            resources=("payments",),
            retry=RetryPolicy(max_retries=2, base_delay=0.2, max_delay=2.0),
            breaker=CircuitBreaker(failures=5, reset_after=30.0),
            needs_approval=True,
        )
        guarded = ToolExecutor(
            ToolRegistry([make_tool("echo", echo), refund]),
            resource_limits={"payments": 2},
            approver=approve,
        )
        check(await guarded.execute(calls), "ok")
        check(await guarded.execute([ToolCall("r", "refund", {"x": 1})], session_id="s"), "ok")
        sides["(a) execute, policies held"] = PolicySide(lambda _: executor_side(guarded, calls))

        # (b): the same echo, with and without reuse + a resource; a fresh executor per round
        # keeps the duplicate table at one round's calls.
        booking = ToolRegistry([policy_tool("book", on_duplicate="reuse", resources=("r",))])
        bare = ToolRegistry([make_tool("book", echo)])

        def booking_executor() -> ToolExecutor:
            return ToolExecutor(booking, resource_limits={"r": 1000})

        def bare_executor() -> ToolExecutor:
            return ToolExecutor(bare)

        sides["(b) book, no policies"] = PolicySide(
            batches_side(bare_executor, fresh_calls("book", size, counter), "s")
        )
        sides["(b) book, reuse + resource"] = PolicySide(
            batches_side(booking_executor, fresh_calls("book", size, counter), "s")
        )
        # (c): the same 5 calls again and again (all reuse hits), and fresh calls against a
        # full duplicate table.
        hits_executor = booking_executor()
        repeated = [ToolCall(f"h{i}", "book", {"x": -1 - i}) for i in range(size)]
        first = await hits_executor.execute(repeated, session_id="s")
        check(first, "ok")
        again = await hits_executor.execute(repeated, session_id="s")
        if any(r.reused_from is None for r in again):
            raise RuntimeError("the repeated calls were not reused")
        sides["(c) book, reuse hits"] = PolicySide(
            lambda _: executor_side_in_session(hits_executor, repeated, "s")
        )
        full_executor = booking_executor()
        filling = fresh_calls("book", 100, counter)
        for batch in filling(100):  # 10 000 calls remembered
            await full_executor.execute(batch, session_id="s")
        sides["(c) book, table full"] = PolicySide(
            batches_side(lambda: full_executor, fresh_calls("book", size, counter), "s")
        )
    samples: dict[str, list[float]] = {name: [] for name in sides}
    gc.collect()
    gc.disable()
    try:
        for cycle in range(warmup_cycles + cycles):
            for name, side in sides.items():
                run = side.prepare(BATCHES_PER_ROUND)
                started = now_ns()
                await run(BATCHES_PER_ROUND)
                if cycle >= warmup_cycles:
                    elapsed = now_ns() - started
                    samples[name].append(elapsed / 1000 / (BATCHES_PER_ROUND * side.size))
            gc.collect()
    finally:
        gc.enable()
    p50 = {name: percentile(values, 50) for name, values in samples.items()}
    lines = [
        f"9) side-effect policies: batches of {size}, validation on, dict arguments, per call",
        "   floor = bare anyio task group (section 1); floor+val = floor + jsonschema per call",
    ]
    for name, values in samples.items():
        row = f"   {name:<32}p50 {p50[name]:7.2f} us   p99 {percentile(values, 99):7.2f} us"
        if name.startswith("(a)"):
            row += f"   {p50[name] / p50['floor']:.2f}x floor"
            row += f"   {p50[name] / p50['floor+val']:.2f}x floor+val"
        lines.append(row)
    if not has_policies:
        lines.append("   (this llmrtc has no side-effect policies: (a) without them only)")
        return lines
    delta = p50["(b) book, reuse + resource"] - p50["(b) book, no policies"]
    held = p50["(a) execute, policies held"] / p50["(a) execute, no policies"]
    lines += [
        f"   (a) policies held / none: {held:.2f}x (ordinary calls never enter the policies)",
        f"   (b) target: reuse + a resource <= +{POLICY_BUDGET_US:g} us per call:"
        f" {delta:+.2f} us  {verdict(delta <= POLICY_BUDGET_US)}",
        "   (c) informational: a reuse hit"
        f" {p50['(c) book, reuse hits'] - p50['(b) book, no policies']:+.2f} us, a call with the"
        f" table full {p50['(c) book, table full'] - p50['(b) book, no policies']:+.2f} us per"
        " call vs (b) without policies",
    ]
    return lines


def executor_side_in_session(
    executor: ToolExecutor, calls: list[ToolCall], session_id: str
) -> RoundFn:
    execute = executor.execute

    async def run(batches: int) -> None:
        for _ in range(batches):
            await execute(calls, session_id=session_id)

    return run


async def main(quick: bool, only: list[int] | None = None) -> None:
    cycles, warmup = (40, 4) if quick else (300, 10)
    samples = 20 if quick else 50
    print(
        f"llmrtc ToolExecutor benchmark ({'quick' if quick else 'full'}) | Python"
        f" {platform.python_version()} | anyio {version('anyio')} on asyncio | {os.cpu_count()}"
        f" CPUs, load avg {os.getloadavg()[0]:.2f}"
    )
    print(
        "caveat: shared, noisy machine: absolute us drift between runs; compare the interleaved"
        " sides within a run\n"
    )
    sections: list[Callable[[], Awaitable[list[str]]]] = [
        lambda: bench_overhead(cycles, warmup),
        lambda: bench_parallel(10),
        lambda: bench_timeouts(samples),
        lambda: bench_abort(samples),
        lambda: bench_otel(cycles // 3, warmup),
        lambda: bench_agents_sdk(cycles // 3, warmup),
        lambda: bench_gather_floor(cycles // 3, warmup),
        lambda: bench_no_background(cycles // 3, warmup),
        lambda: bench_policies(cycles // 3, warmup),
    ]
    for index, section in enumerate(sections):
        if only and index + 1 not in only:
            continue
        started = time.monotonic()
        lines = await section()
        lines[0] += f"  [{time.monotonic() - started:.0f} s]"
        print("\n".join(lines), end="\n\n", flush=True)
        if index == 2 and not only:
            await anyio.sleep(1.1)  # let the threads abandoned by timeouts finish their sleeps


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run (~20 s)")
    parser.add_argument(
        "--only", type=int, action="append", metavar="N", help="run only section N (repeatable)"
    )
    options = parser.parse_args()
    anyio.run(main, options.quick, options.only, backend="asyncio")
    sys.exit(0)
