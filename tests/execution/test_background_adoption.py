"""Moving a background call to another executor of the same process
(`adopt_background_call`, what a resumed session does): a running call lands on the adopter
only, once, reported to the hooks once; the old executor's `cancel_call` / `aclose` no longer
reach it, the adopter's do; a result that landed untaken moves; another process's token, or
an executor that is gone, finds nothing; the registry keeps nothing alive."""

from __future__ import annotations

import gc
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
    ToolRegistry,
    tool,
)
from llmrtc.execution.background import find_background_calls

pytestmark = pytest.mark.anyio

state: dict[str, Any] = {}


@tool(background=True, timeout=30.0)
async def bookTable(restaurant: str, ctx: ToolContext) -> dict[str, Any]:
    """Book a table."""
    state.setdefault("signals", {})[ctx.call_id] = ctx.abort_signal
    await state["release"].wait()
    return {"confirmed": True, "restaurant": restaurant}


REGISTRY = ToolRegistry([bookTable])


class Ends(Hooks):
    def __init__(self) -> None:
        self.ends: list[ToolEndEvent] = []

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.ends.append(event)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    state.clear()
    state["release"] = anyio.Event()


async def started(hooks: Hooks | None = None) -> ToolExecutor:
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    [running] = await executor.execute([ToolCall("c1", "bookTable", {"restaurant": "Nopa"})])
    assert running.status == "running"
    with anyio.fail_after(10):  # its handler runs
        while "c1" not in state.get("signals", {}):
            await anyio.sleep(0.01)
    return executor


async def landed(executor: ToolExecutor) -> ToolCallResult:
    with anyio.fail_after(10):
        async for result in executor.background_results():
            return result
    raise AssertionError("unreachable")


async def test_an_adopted_call_lands_on_the_adopter_only_and_is_reported_once() -> None:
    hooks = Ends()
    old = await started(hooks)
    new = ToolExecutor(REGISTRY)
    assert new.adopt_background_call(old.background_token, "c1")
    assert old.background_calls == () and [c.call_id for c in new.background_calls] == ["c1"]
    await old.aclose()  # no longer its call
    assert await old.cancel_call("c1") is None
    assert not state["signals"]["c1"].aborted
    state["release"].set()
    final = await landed(new)
    assert (final.call_id, final.status) == ("c1", "ok")
    assert old.take_background_results() == [] and new.take_background_results() == []
    assert [e.call_id for e in hooks.ends] == ["c1"]  # once, by the hooks that started it


async def test_the_adopter_cancels_and_closes_the_adopted_call() -> None:
    old = await started()
    new = ToolExecutor(REGISTRY)
    assert new.adopt_background_call(old.background_token, "c1")
    await new.aclose(reason="session ended")
    assert state["signals"]["c1"].aborted
    [final] = new.take_background_results()
    assert final.status == "aborted"


async def test_a_result_that_landed_untaken_moves_and_unknown_calls_are_refused() -> None:
    old = await started()
    state["release"].set()
    with anyio.fail_after(10):
        while old.background_calls:
            await anyio.sleep(0.01)
    new = ToolExecutor(REGISTRY)
    assert not new.adopt_background_call(old.background_token, "other")
    assert new.adopt_background_call(old.background_token, "c1")
    assert old.take_background_results() == []
    [moved] = new.take_background_results()
    assert (moved.call_id, moved.status) == ("c1", "ok")
    assert not new.adopt_background_call(old.background_token, "c1")  # nothing left to take


async def test_another_process_or_a_gone_executor_is_not_found() -> None:
    executor = ToolExecutor(REGISTRY)
    token = executor.background_token
    pid, _, rest = token.partition("-")
    assert find_background_calls(token) is not None
    assert find_background_calls(f"{int(pid) + 1}-{rest}") is None
    assert not ToolExecutor(REGISTRY).adopt_background_call(f"{int(pid) + 1}-{rest}", "c1")
    del executor
    gc.collect()
    assert find_background_calls(token) is None  # the registry kept nothing alive


async def test_a_second_adoption_by_the_first_token_finds_the_call_again() -> None:
    old = await started()
    second, third = ToolExecutor(REGISTRY), ToolExecutor(REGISTRY)
    assert second.adopt_background_call(old.background_token, "c1")
    assert third.adopt_background_call(old.background_token, "c1")
    assert second.background_calls == () and [c.call_id for c in third.background_calls] == ["c1"]
    state["release"].set()
    assert (await landed(third)).status == "ok"
