"""Parallel calls are cancelled the anyio way: a handler's shielded cleanup completes before
`execute` returns, whether the batch is aborted, times out or the caller is cancelled."""

from __future__ import annotations

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


async def _abort_after(controller: AbortController, delay: float) -> None:
    await anyio.sleep(delay)
    controller.abort("barge-in")
