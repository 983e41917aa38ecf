"""`observe_tools`: hooks for every batch run within a block, each call's end as it happens."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolDefinition, ToolExecutor, ToolRegistry, define_tool
from llmrtc.execution import observe_tools
from llmrtc.testing import RecordingHooks

pytestmark = pytest.mark.anyio


def _registry(ended: list[str]) -> ToolRegistry:
    async def quick(args: dict[str, Any], ctx: Any) -> str:
        return "quick"

    async def slow(args: dict[str, Any], ctx: Any) -> str:
        # The quick call's end must already have been observed while this one still runs.
        with anyio.fail_after(10):
            while "quick" not in ended:
                await anyio.sleep(0.01)
        return "slow"

    registry = ToolRegistry()
    registry.register(define_tool(ToolDefinition(name="quick", description="q"), quick))
    registry.register(define_tool(ToolDefinition(name="slow", description="s"), slow))
    return registry


async def test_each_end_is_observed_as_it_happens_in_started_tasks_too() -> None:
    ended: list[str] = []

    class Observer(RecordingHooks):
        async def on_tool_end(self, event: Any) -> None:  # type: ignore[override]
            ended.append(event.tool_name)

    executor = ToolExecutor(_registry(ended))
    calls = [ToolCall("a", "slow", {}), ToolCall("b", "quick", {})]
    results: list[Any] = []

    async def turn() -> None:
        results.extend(await executor.execute(calls))

    with observe_tools(Observer()):
        async with anyio.create_task_group() as group:
            group.start_soon(turn)  # a task started inside the block inherits it
    assert ended == ["quick", "slow"]
    assert [r.result for r in results] == ["slow", "quick"]


async def test_outside_the_block_nothing_is_observed() -> None:
    hooks = RecordingHooks()
    registry = ToolRegistry()
    registry.register(define_tool(ToolDefinition(name="t", description="d"), lambda a, c: 1))
    executor = ToolExecutor(registry)
    with observe_tools(hooks):
        await executor.execute([ToolCall("1", "t", {})])
    await executor.execute([ToolCall("2", "t", {})])
    ends = [e.call_id for e in hooks.events if type(e).__name__ == "ToolEndEvent"]
    assert ends == ["1"]
