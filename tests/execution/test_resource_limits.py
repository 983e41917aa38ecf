"""`ToolDefinition.resources` with `ToolExecutor(resource_limits=...)`: at most that many calls
hold a resource at once, across batches (and background calls), first come first served, the
wait inside the call's timeout; several resources never deadlock; a resource without a limit is
refused when the executor is built, or on the first call of a tool registered later."""

from __future__ import annotations

import json
import logging

import anyio
import pytest

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.abort import AbortController

pytestmark = pytest.mark.anyio


class Gauge:
    """How many calls hold each resource now, and the most at once."""

    def __init__(self) -> None:
        self.now: dict[str, int] = {}
        self.peak: dict[str, int] = {}
        self.order: list[str] = []

    def enter(self, *names: str) -> None:
        for name in names:
            self.now[name] = self.now.get(name, 0) + 1
            self.peak[name] = max(self.peak.get(name, 0), self.now[name])

    def leave(self, *names: str) -> None:
        for name in names:
            self.now[name] -= 1


def crm_tools(gauge: Gauge, delay: float = 0.03) -> list[object]:
    @tool(resources=("crm",))
    async def crm_read(key: str) -> str:
        """Read from the CRM."""
        gauge.enter("crm")
        gauge.order.append(key)
        try:
            await anyio.sleep(delay)
        finally:
            gauge.leave("crm")
        return key

    @tool(resources=("crm", "billing"))
    async def crm_bill(key: str) -> str:
        """Bill through the CRM."""
        gauge.enter("crm", "billing")
        try:
            await anyio.sleep(delay)
        finally:
            gauge.leave("crm", "billing")
        return key

    @tool(resources=("billing", "crm"))
    async def bill_crm(key: str) -> str:
        """The same two resources, named the other way round."""
        gauge.enter("crm", "billing")
        try:
            await anyio.sleep(delay)
        finally:
            gauge.leave("crm", "billing")
        return key

    return [crm_read, crm_bill, bill_crm]


async def test_at_most_the_limit_run_at_once_across_batches() -> None:
    gauge = Gauge()
    executor = ToolExecutor(
        ToolRegistry(crm_tools(gauge)), resource_limits={"crm": 2, "billing": 1}
    )

    async def batch(prefix: str) -> None:
        results = await executor.execute(
            [ToolCall(f"{prefix}{i}", "crm_read", {"key": f"{prefix}{i}"}) for i in range(4)]
        )
        assert [r.status for r in results] == ["ok"] * 4

    async with anyio.create_task_group() as group:
        for prefix in "abc":
            group.start_soon(batch, prefix)
    assert gauge.peak["crm"] == 2
    assert executor._policies.resources["crm"].in_use == 0


async def test_waiters_are_served_first_come_first_served() -> None:
    gauge = Gauge()
    executor = ToolExecutor(
        ToolRegistry(crm_tools(gauge)), resource_limits={"crm": 1, "billing": 1}
    )
    calls = [ToolCall(f"c{i}", "crm_read", {"key": f"k{i}"}) for i in range(5)]
    await executor.execute(calls)
    assert gauge.order == [f"k{i}" for i in range(5)]


async def test_a_call_waiting_past_its_timeout_ends_timeout_and_never_runs() -> None:
    gauge = Gauge()
    ran: list[str] = []

    @tool(resources=("crm",), timeout=0.05)
    async def quick(key: str) -> str:
        """Must answer fast."""
        ran.append(key)
        return key

    executor = ToolExecutor(
        ToolRegistry([*crm_tools(gauge, delay=0.3), quick]),
        resource_limits={"crm": 1, "billing": 1},
    )
    slow, waiting = await executor.execute(
        [ToolCall("s", "crm_read", {"key": "s"}), ToolCall("q", "quick", {"key": "q"})]
    )
    assert slow.status == "ok" and waiting.status == "timeout" and ran == []
    assert waiting.duration_ms == 0.0 and waiting.attempts == 0
    assert "timed out after 0.05 s" in json.loads(waiting.to_content())["error"]


async def test_an_abort_while_waiting_ends_aborted() -> None:
    gauge = Gauge()
    executor = ToolExecutor(
        ToolRegistry(crm_tools(gauge, delay=0.3)), resource_limits={"crm": 1, "billing": 1}
    )
    controller = AbortController()

    async def abort() -> None:
        await anyio.sleep(0.05)
        controller.abort("barge-in")

    async with anyio.create_task_group() as group:
        group.start_soon(abort)
        results = await executor.execute(
            [ToolCall(f"c{i}", "crm_read", {"key": str(i)}) for i in range(3)],
            abort_signal=controller.signal,
        )
    assert [r.status for r in results] == ["aborted"] * 3
    assert gauge.order == ["0"]  # the two waiting never ran
    assert executor._policies.resources["crm"].in_use == 0 and executor.in_flight == 0


async def test_crossed_resources_never_deadlock() -> None:
    gauge = Gauge()
    executor = ToolExecutor(
        ToolRegistry(crm_tools(gauge, delay=0.005)), resource_limits={"crm": 1, "billing": 1}
    )
    calls = [
        ToolCall(f"c{i}", "crm_bill" if i % 2 else "bill_crm", {"key": str(i)}) for i in range(20)
    ]
    with anyio.fail_after(5):
        results = await executor.execute(calls)
    assert all(r.status == "ok" for r in results)
    assert gauge.peak == {"crm": 1, "billing": 1}


async def test_max_concurrency_still_applies_and_waiters_hold_no_slot() -> None:
    gauge = Gauge()
    ran: list[str] = []

    @tool
    async def other() -> str:
        """Needs no resource."""
        ran.append("other")
        return "x"

    executor = ToolExecutor(
        ToolRegistry([*crm_tools(gauge, delay=0.1), other]),
        resource_limits={"crm": 1, "billing": 1},
        max_concurrency=2,
    )
    calls = [ToolCall(f"c{i}", "crm_read", {"key": str(i)}) for i in range(4)]
    async with anyio.create_task_group() as group:
        group.start_soon(executor.execute, calls)
        await anyio.sleep(0.03)
        # Three calls wait for the CRM, yet the second slot is free for another tool.
        with anyio.fail_after(0.08):
            await executor.execute([ToolCall("o", "other", {})])
    assert ran == ["other"] and gauge.peak["crm"] == 1


async def test_a_resource_without_a_limit_is_refused_when_the_executor_is_built() -> None:
    gauge = Gauge()
    with pytest.raises(ValueError, match=r"'billing'.*resource_limits=\{'billing': N\}"):
        ToolExecutor(ToolRegistry(crm_tools(gauge)), resource_limits={"crm": 1})


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"crm": 0}, "must be an integer >= 1"),
        ({"crm": 1.5}, "must be an integer >= 1"),
        ({"c rm": 1}, "is not a resource name"),
        ([("crm", 1)], "must be a mapping"),
    ],
)
async def test_bad_resource_limits_are_refused(limits: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ToolExecutor(ToolRegistry(), resource_limits=limits)  # type: ignore[arg-type]


async def test_a_tool_registered_later_without_a_limit_fails_clearly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = ToolRegistry()
    executor = ToolExecutor(registry, resource_limits={"crm": 1})

    @tool(resources=("ledger",))
    async def post(amount: int) -> int:
        """Post to the ledger."""
        raise AssertionError("never runs")

    registry.register(post)
    with caplog.at_level(logging.ERROR):
        [result] = await executor.execute([ToolCall("c1", "post", {"amount": 1})])
    assert result.status == "error"
    assert result.error == "tool 'post' is not configured to run here"
    assert "'ledger'" in caplog.text and "resource_limits" in caplog.text


async def test_queued_time_adds_the_resource_wait_and_the_slot_wait() -> None:
    # Regression: the slot wait overwrote the resource wait in `queued_s`.
    from llmrtc.telemetry.events import ToolEndEvent
    from llmrtc.testing import RecordingHooks

    gauge = Gauge()

    @tool
    async def other() -> str:
        """No resource, takes the one slot for a while."""
        await anyio.sleep(0.1)
        return "x"

    hooks = RecordingHooks()
    executor = ToolExecutor(
        ToolRegistry([*crm_tools(gauge, delay=0.1), other]),
        resource_limits={"crm": 1, "billing": 1},
        max_concurrency=1,
        hooks=hooks,
    )
    await executor.execute(
        [
            ToolCall("c1", "crm_read", {"key": "1"}),
            ToolCall("c2", "crm_read", {"key": "2"}),
            ToolCall("o", "other", {}),
        ]
    )
    queued = {e.call_id: e.queued_s for e in hooks.of(ToolEndEvent)}
    # c2 waited for the CRM (c1, 0.1 s) and then for the slot (other, 0.1 s).
    assert queued["c2"] >= 0.18, queued


async def test_executors_given_one_resource_limits_share_its_limits() -> None:
    # A server with one executor per session: one CRM limit for all of them.
    from llmrtc import ResourceLimits

    gauge = Gauge()
    shared = ResourceLimits({"crm": 1, "billing": 1})
    assert dict(shared) == {"crm": 1, "billing": 1} and len(shared) == 2
    assert repr(shared) == "ResourceLimits({'crm': 1, 'billing': 1})"
    tools = ToolRegistry(crm_tools(gauge, delay=0.03))
    sessions = [ToolExecutor(tools, resource_limits=shared) for _ in range(3)]
    assert sessions[0].resource_limits == {"crm": 1, "billing": 1}

    async def session(index: int) -> None:
        await sessions[index].execute(
            [ToolCall(f"{index}-{i}", "crm_read", {"key": f"{index}{i}"}) for i in range(2)],
            session_id=f"s{index}",
        )

    async with anyio.create_task_group() as group:
        for index in range(3):
            group.start_soon(session, index)
    assert gauge.peak["crm"] == 1 and shared.in_use("crm") == 0
    # A plain mapping gives each executor pools of its own.
    own = [ToolExecutor(tools, resource_limits={"crm": 1, "billing": 1}) for _ in range(2)]
    assert own[0]._policies.resources["crm"] is not own[1]._policies.resources["crm"]
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        ResourceLimits({"crm": 0})
