"""The policies on background calls (`ToolDefinition.background`): approval is asked in the
batch before the call is answered `"running"` (a denied one is answered `denied`); a repeat of a
running background call is answered `"running"` and its final result is the first call's; a
background call holds its resource while it runs."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolCallResult, ToolEndEvent, ToolExecutor, ToolRegistry, tool
from llmrtc.execution import Approval
from llmrtc.testing import RecordingHooks
from llmrtc.tools.context import ToolContext

pytestmark = pytest.mark.anyio

runs: list[str] = []
gate: dict[str, anyio.Event] = {}


@tool(background=True, needs_approval=True, on_duplicate="reuse", resources=("kitchen",))
async def cater(event: str) -> dict[str, Any]:
    """Order catering for an event."""
    runs.append(event)
    await gate["release"].wait()
    return {"ordered": event}


@tool(resources=("kitchen",))
async def menu() -> str:
    """Read the menu (needs the kitchen)."""
    return "soup"


@pytest.fixture(autouse=True)
def _reset() -> None:
    runs.clear()
    gate["release"] = anyio.Event()


async def take(executor: ToolExecutor, count: int) -> list[ToolCallResult]:
    taken: list[ToolCallResult] = []
    with anyio.fail_after(5):
        async for result in executor.background_results():
            taken.append(result)
            if len(taken) == count:
                return taken
    return taken


async def test_a_denied_background_call_is_answered_denied_not_running() -> None:
    async def approver(call: ToolCall, ctx: ToolContext) -> Approval:
        return Approval(call.arguments["event"] != "wedding", "over budget")  # type: ignore[index]

    executor = ToolExecutor(
        ToolRegistry([cater, menu]), resource_limits={"kitchen": 1}, approver=approver
    )
    denied, approved = await executor.execute(
        [ToolCall("w", "cater", {"event": "wedding"}), ToolCall("p", "cater", {"event": "party"})],
        session_id="s",
    )
    assert denied.status == "denied" and approved.status == "running"
    gate["release"].set()
    [final] = await take(executor, 1)
    assert final.call_id == "p" and final.status == "ok" and runs == ["party"]
    await executor.aclose()


async def test_a_repeat_of_a_running_background_call_reuses_its_final_result() -> None:
    hooks = RecordingHooks()
    executor = ToolExecutor(
        ToolRegistry([cater, menu]),
        resource_limits={"kitchen": 1},
        approver=lambda call, ctx: _yes(),
        hooks=hooks,
    )
    [first] = await executor.execute([ToolCall("c1", "cater", {"event": "gala"})], session_id="s")
    [second] = await executor.execute([ToolCall("c2", "cater", {"event": "gala"})], session_id="s")
    assert first.status == second.status == "running"
    gate["release"].set()
    finals = {r.call_id: r for r in await take(executor, 2)}
    assert finals["c1"].status == finals["c2"].status == "ok"
    assert finals["c2"].reused_from == "c1" and finals["c2"].result == {"ordered": "gala"}
    assert runs == ["gala"]  # the handler ran once
    ends = {e.call_id: e for e in hooks.of(ToolEndEvent)}
    assert ends["c2"].background and ends["c2"].reused_from == "c1"
    await executor.aclose()


async def test_a_background_call_holds_its_resource_while_it_runs() -> None:
    executor = ToolExecutor(
        ToolRegistry([cater, menu]), resource_limits={"kitchen": 1}, approver=lambda c, x: _yes()
    )
    [running] = await executor.execute([ToolCall("c1", "cater", {"event": "gala"})])
    assert running.status == "running"
    await anyio.sleep(0.02)
    pool = executor._policies.resources["kitchen"]
    assert pool.in_use == 1 and executor.in_flight == 0  # its resource, but no slot
    results: list[ToolCallResult] = []

    async def read_menu() -> None:
        results.extend(await executor.execute([ToolCall("m", "menu", {})]))

    async with anyio.create_task_group() as group:
        group.start_soon(read_menu)
        await anyio.sleep(0.05)
        assert results == []  # waits for the kitchen
        gate["release"].set()
    assert results[0].status == "ok"
    await take(executor, 1)
    assert pool.in_use == 0
    await executor.aclose()


async def _yes() -> bool:
    return True


async def test_a_resumed_session_still_reuses_a_running_booking_it_adopted() -> None:
    # Review: the new executor of a resumed session adopted the running booking but not its
    # duplicate entry; the restored model's repeat then ran the handler a second time.
    @tool(background=True, on_duplicate="reuse", side_effects=["books"])
    async def book(slot: str) -> str:
        """Book."""
        runs.append(slot)
        await gate["release"].wait()
        return f"booked {slot}"

    @tool(on_duplicate="reuse")
    async def note(text: str) -> str:
        """Note."""
        runs.append(text)
        return text

    registry = ToolRegistry([book, note])
    before = ToolExecutor(registry)
    await before.execute([ToolCall("n1", "note", {"text": "window seat"})], session_id="s")
    [running] = await before.execute([ToolCall("c1", "book", {"slot": "9"})], session_id="s")
    assert running.status == "running"
    after = ToolExecutor(registry)  # the session resumed: a new handler, a new executor
    assert after.adopt_background_call(before.background_token, "c1")
    [repeat] = await after.execute([ToolCall("c2", "book", {"slot": "9"})], session_id="s")
    [noted] = await after.execute([ToolCall("n2", "note", {"text": "window seat"})], session_id="s")
    assert repeat.status == "running" and noted.reused_from == "n1"
    gate["release"].set()
    finals = {r.call_id: r for r in await take(after, 2)}
    assert finals["c2"].reused_from == "c1" and finals["c2"].result == "booked 9"
    assert runs == ["window seat", "9"]
    await after.aclose()
