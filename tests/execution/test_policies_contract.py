"""The executor's contract with every side-effect policy on (issue 21): seeded random batches
of calls to tools with duplicates (reuse, reject), retries whose attempts fail, circuit
breakers, resources with limits of 1 and 2, approval (approved, denied, too slow, raising),
short timeouts, crashing handlers, batches running side by side on one executor and aborts at
random moments. Whatever happens: one result per call, in request order; `on_result` and the
end hook once per call; no handler left running when `execute` returns; every pool back to
zero; no resource ever held by more handlers than its limit; a reused result names an earlier
`ok` call of the same tool and arguments, whose handler ran, and has its content."""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from typing import Any

import anyio
import pytest

from llmrtc import (
    AbortController,
    Approval,
    CircuitBreaker,
    RetryPolicy,
    ToolCall,
    ToolCallResult,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    define_tool,
)

pytestmark = pytest.mark.anyio

SEED = 2121
BATCHES = 200
LIMITS = {"a": 1, "b": 2}
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"k": {"type": "integer"}},
    "required": ["k"],
}
STATUSES = {
    "ok",
    "error",
    "timeout",
    "aborted",
    "duplicate",
    "unavailable",
    "denied",
}
FAST_RETRY = RetryPolicy(max_retries=2, base_delay=0.001, max_delay=0.004)


def asks_approval(call: ToolCall) -> bool:
    """A refund of order 0 needs nobody's approval (it sees the parsed arguments)."""
    return isinstance(call.arguments, dict) and call.arguments["k"] != 0


class World:
    """The tools, the approver and everything they saw, driven by one seeded random source."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.live: set[str] = set()  # call ids whose async handler is running
        self.holding: Counter[str] = Counter()  # resource -> handlers running that hold it
        self.peak: Counter[str] = Counter()
        self.ran: Counter[str] = Counter()  # call id -> handler attempts
        self.asked: list[str] = []  # call ids the approver was asked about

    def definitions(self) -> list[ToolDefinition]:
        return [
            # A booking: reused when repeated, one at a time, retried, may finish after an abort.
            ToolDefinition(
                "book",
                parameters=SCHEMA,
                on_duplicate="reuse",
                resources=("a",),
                retry=FAST_RETRY,
                side_effects=("books",),
                on_interrupt="finish",
                timeout=0.06,
            ),
            # A cancellation: a repeat is rejected; needs approval; holds both resources.
            ToolDefinition(
                "cancel",
                parameters=SCHEMA,
                on_duplicate="reject",
                resources=("b", "a"),
                needs_approval=True,
                timeout=0.05,
            ),
            # A flaky lookup: retried (also a slow attempt), behind a breaker, two at a time.
            ToolDefinition(
                "lookup",
                parameters=SCHEMA,
                retry=RetryPolicy(
                    max_retries=1, base_delay=0.001, max_delay=0.004, attempt_timeout=0.02
                ),
                breaker=CircuitBreaker(failures=2, reset_after=0.03),
                resources=("b",),
                timeout=0.07,
            ),
            # A refund: approval decided per call, reused, behind a breaker.
            ToolDefinition(
                "refund",
                parameters=SCHEMA,
                on_duplicate="reuse",
                needs_approval=asks_approval,
                breaker=CircuitBreaker(failures=2, reset_after=0.02),
                resources=("b",),
                timeout=0.05,
            ),
            # A sequential tool with no policies at all, among the others.
            ToolDefinition("plain", parameters=SCHEMA, execution_policy="sequential", timeout=0.05),
        ]

    def registry(self) -> ToolRegistry:
        return ToolRegistry(
            [define_tool(definition, self.handler(definition)) for definition in self.definitions()]
        )

    def handler(self, definition: ToolDefinition) -> Any:
        resources = tuple(definition.resources)

        async def handle(args: dict[str, Any], ctx: ToolContext) -> Any:
            call_id = ctx.call_id
            self.ran[call_id] += 1
            self.live.add(call_id)
            for name in resources:
                self.holding[name] += 1
                self.peak[name] = max(self.peak[name], self.holding[name])
            try:
                roll = self.rng.random()
                if roll < 0.55:
                    await anyio.sleep(self.rng.uniform(0, 0.01))
                    return {"tool": definition.name, "k": args["k"], "by": call_id}
                if roll < 0.72:
                    raise RuntimeError("backend crashed")  # retried where a policy says so
                if roll < 0.8:
                    raise ToolError("no such order")  # never retried
                if roll < 0.94:
                    await anyio.sleep(0.2)  # past every timeout
                    return "late"
                try:
                    await anyio.sleep(0.2)
                finally:
                    raise RuntimeError("crashed while being stopped")
            finally:
                for name in resources:
                    self.holding[name] -= 1
                self.live.discard(call_id)

        return handle

    async def approver(self, call: ToolCall, ctx: ToolContext) -> Approval | bool:
        self.asked.append(call.call_id)
        roll = self.rng.random()
        if roll < 0.45:
            return True
        if roll < 0.6:
            await anyio.sleep(0.005)
            return Approval(True)
        if roll < 0.75:
            return Approval(False, "the manager said no")
        if roll < 0.9:
            await anyio.sleep(1.0)  # past approval_timeout
            return True
        raise RuntimeError("approval service down")

    def batch(self, number: int) -> list[ToolCall]:
        rng = self.rng
        calls = []
        for index in range(rng.randint(1, 6)):
            name = rng.choice(["book", "book", "cancel", "lookup", "refund", "refund", "plain"])
            k = rng.randint(0, 2)
            # The same arguments as JSON text now and then, with other spacing.
            arguments: Any = {"k": k} if rng.random() < 0.5 else json.dumps({"k": k}, indent=1)
            calls.append(ToolCall(f"b{number}c{index}", name, arguments))
        return calls


def key(session: str | None, call: ToolCall) -> tuple[str | None, str, int]:
    arguments = call.arguments
    if isinstance(arguments, str):
        arguments = json.loads(arguments)
    return session, call.name, arguments["k"]


async def test_a_repeat_whose_first_call_ended_before_it_waited_gets_its_result() -> None:
    # Regression: the repeat waited forever on an event its ended first call never set.
    runs: list[str] = []

    async def book(args: dict[str, Any], ctx: ToolContext) -> str:
        runs.append(ctx.call_id)
        return "booked"  # no await: it ends before the repeat's task starts waiting

    tool = define_tool(ToolDefinition("book", parameters=SCHEMA, on_duplicate="reuse"), book)
    executor = ToolExecutor(ToolRegistry([tool]))
    calls = [ToolCall("c1", "book", {"k": 1}), ToolCall("c2", "book", {"k": 1})]
    with anyio.fail_after(2):
        results = await executor.execute(calls, session_id="s")
    assert [(r.status, r.reused_from) for r in results] == [("ok", None), ("ok", "c1")]
    assert runs == ["c1"]


async def test_every_policy_on_the_contract_holds() -> None:
    world = World(SEED)
    rng = world.rng
    ended: Counter[str] = Counter()
    reported: Counter[str] = Counter()
    executor = ToolExecutor(
        world.registry(),
        max_concurrency=3,
        resource_limits=LIMITS,
        approver=world.approver,
        approval_timeout=0.02,
        on_tool_end=lambda result: ended.update([result.call_id]),
    )
    pools = executor._policies.resources  # the executor's own pools, read by this test only
    results: dict[str, ToolCallResult] = {}
    keys: dict[str, tuple[str | None, str, int]] = {}
    problems: list[str] = []

    async def run(number: int, session: str | None) -> None:
        calls = world.batch(number)
        for call in calls:
            keys[call.call_id] = key(session, call)
        controller = AbortController()
        async with anyio.create_task_group() as group:
            if rng.random() < 0.35:

                async def abort_later(delay: float) -> None:
                    await anyio.sleep(delay)
                    controller.abort("barge-in")

                group.start_soon(abort_later, rng.uniform(0, 0.04))
            with anyio.fail_after(5):  # a batch that hangs fails the test at once
                got = await executor.execute(
                    calls,
                    session_id=session,
                    abort_signal=controller.signal,
                    on_result=lambda result: reported.update([result.call_id]),
                )
            group.cancel_scope.cancel()
        if [r.call_id for r in got] != [c.call_id for c in calls]:
            problems.append(f"batch {number}: results out of order or missing: {got}")
        left = world.live & {c.call_id for c in calls}
        if left:
            problems.append(f"batch {number}: handlers still running after execute: {left}")
        for result in got:
            results[result.call_id] = result

    started = time.monotonic()
    number = 0
    with anyio.fail_after(60):
        while number < BATCHES:
            # One to three batches side by side, in one or two sessions (or none).
            side_by_side = rng.randint(1, 3)
            async with anyio.create_task_group() as group:
                for _ in range(side_by_side):
                    group.start_soon(run, number, rng.choice(["s1", "s1", "s2", None]))
                    number += 1
            if rng.random() < 0.1:
                await anyio.sleep(0.03)  # let an open breaker reach its half-open trial

    assert not problems, "\n".join(problems)
    assert executor.in_flight == 0
    assert {name: pool.in_use for name, pool in pools.items()} == {"a": 0, "b": 0}
    assert not world.live and all(count == 0 for count in world.holding.values())
    for name, limit in LIMITS.items():
        assert world.peak[name] <= limit, (name, world.peak[name])
    assert set(results) == set(keys)
    assert all(count == 1 for count in reported.values()) and set(reported) == set(results)
    assert all(count == 1 for count in ended.values()) and set(ended) == set(results)

    statuses = Counter(r.status for r in results.values())
    print(f"{len(results)} calls in {time.monotonic() - started:.1f} s: {dict(statuses)}")
    assert set(statuses) <= STATUSES, statuses
    by_tool: dict[str, set[str]] = defaultdict(set)
    for call_id, result in results.items():
        by_tool[result.tool_name].add(result.status)
        if result.status == "unavailable":
            assert call_id not in world.asked  # a breaker-open call never waits for approval
        if result.reused_from is None:
            continue
        assert result.tool_name in ("book", "refund")
        assert world.ran[call_id] == 0, f"{call_id} was reused yet its handler ran"
        first = results[result.reused_from]
        assert first.status == "ok" and first.reused_from is None, (result, first)
        assert world.ran[first.call_id] >= 1
        assert keys[first.call_id] == keys[call_id] and keys[call_id][0] is not None
        assert result.status == "ok" and result.result == first.result
    # Each policy was exercised, not only configured.
    assert "duplicate" in by_tool["cancel"] and "denied" in by_tool["cancel"]
    assert "unavailable" in by_tool["lookup"] | by_tool["refund"]
    assert any(r.reused_from for r in results.values())
    assert any(r.attempts > 1 for r in results.values())
    assert statuses["timeout"] and statuses["aborted"] and statuses["error"]
    assert time.monotonic() - started < 40  # generous: ~10 s here
