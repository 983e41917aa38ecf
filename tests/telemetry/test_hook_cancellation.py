"""Cancellation and async hooks: a hook is shielded from an abort, but never swallows a real
cancellation of its caller (on asyncio, a native one cannot be shielded at all)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import anyio
import pytest

from llmrtc import (
    AbortController,
    Hooks,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolEndEvent,
    ToolExecutor,
    ToolRegistry,
    define_tool,
    tool,
)
from llmrtc.agent import TurnRunner
from llmrtc.telemetry.events import LLMEndEvent, ToolStartEvent
from llmrtc.telemetry.hooks import emit
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

SLOW = 30.0
"""How long a slow hook would run if nothing cut it short (far past any test's bound)."""


@tool
async def quick() -> str:
    """Answer at once."""
    return "ok"


class SlowEnd(Hooks):
    """An async end hook that would take `SLOW` seconds; its time limit is longer still."""

    hook_timeout = SLOW * 2

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.finished = False

    async def on_tool_end(self, event: ToolEndEvent) -> None:
        self.started.set()
        await anyio.sleep(SLOW)
        self.finished = True


class SwallowingEnd(Hooks):
    """An async end hook that catches the cancellation meant for its caller and returns."""

    hook_timeout = SLOW * 2

    async def on_tool_end(self, event: ToolEndEvent) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(SLOW)


def executor(hooks: Hooks) -> ToolExecutor:
    return ToolExecutor(ToolRegistry([quick]), hooks=hooks)


@pytest.mark.parametrize("hooks", [SlowEnd(), SwallowingEnd()], ids=["slow", "swallowing"])
async def test_asyncio_timeout_around_execute_fires_while_an_async_hook_runs(
    hooks: Hooks, caplog: Any
) -> None:
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="llmrtc"), pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            await executor(hooks).execute([ToolCall("1", "quick")])
            await asyncio.sleep(SLOW)  # reached only if the timeout was lost
    assert time.monotonic() - started < SLOW / 3
    assert "cancellation; ignored" not in caplog.text


async def test_cancelling_the_task_running_execute_cancels_it_while_an_async_hook_runs() -> None:
    hooks = SlowEnd()
    task = asyncio.create_task(executor(hooks).execute([ToolCall("1", "quick")]))
    with anyio.fail_after(SLOW / 3):
        await hooks.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert task.cancelled() and not hooks.finished


async def test_asyncio_timeout_around_a_turn_fires_while_an_async_llm_hook_runs() -> None:
    class SlowLLMEnd(Hooks):
        hook_timeout = SLOW * 2

        async def on_llm_end(self, event: LLMEndEvent) -> None:
            await asyncio.sleep(SLOW)

    runner = TurnRunner(
        ScriptedLLM(["Hello."]),
        executor(Hooks()),
        system_prompt="Be brief.",
        hooks=SlowLLMEnd(),
    )
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.1):
            async for _ in runner.run_turn("hi"):
                pass
            await asyncio.sleep(SLOW)  # reached only if the timeout was lost
    assert time.monotonic() - started < SLOW / 3


async def test_a_hook_awaiting_something_cancelled_elsewhere_changes_nothing(
    caplog: Any,
) -> None:
    class AwaitsACancelledFuture(Hooks):
        async def on_tool_end(self, event: ToolEndEvent) -> None:
            future = asyncio.get_running_loop().create_future()
            future.cancel()
            await future  # raises CancelledError, yet nobody cancelled the caller

    with caplog.at_level(logging.WARNING, logger="llmrtc"):
        async with asyncio.timeout(SLOW):  # a native timeout around it, not yet expired
            (result,) = await executor(AwaitsACancelledFuture()).execute([ToolCall("1", "quick")])
            await anyio.sleep(0)  # the caller goes on normally: nothing pending for it
    assert result.status == "ok"
    assert "AwaitsACancelledFuture.on_tool_end raised a cancellation; ignored" in caplog.text


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_an_anyio_cancellation_lets_a_shielded_hook_finish_then_applies(
    anyio_backend: str,
) -> None:
    finished: list[str] = []

    class Reporting(Hooks):
        hook_timeout = SLOW

        async def on_tool_end(self, event: ToolEndEvent) -> None:
            await anyio.sleep(0.3)
            finished.append(event.status)

    with anyio.fail_after(SLOW / 3):
        with anyio.move_on_after(0.05) as scope:
            await executor(Reporting()).execute([ToolCall("1", "quick")])
            await anyio.sleep(SLOW)  # reached only if the cancellation was lost
    assert scope.cancelled_caught
    assert finished == ["ok"]  # the report was not cut short


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_an_unshielded_hook_is_cut_short_by_the_callers_cancellation(
    anyio_backend: str,
) -> None:
    hooks = SlowEnd()
    with anyio.fail_after(SLOW / 3):
        with anyio.move_on_after(0.05) as scope:
            end = ToolEndEvent(execution_id="x1", call_id="1", tool_name="quick", status="ok")
            await emit(hooks, end, shield=False)
    assert scope.cancelled_caught and not hooks.finished


class AwaitsACancelledFutureAtStart(Hooks):
    """A start hook whose own await is cancelled (say, an exporter shutting down)."""

    async def on_tool_start(self, event: ToolStartEvent) -> None:
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        await future  # raises CancelledError, yet nobody cancelled the caller


@pytest.mark.parametrize("count", [1, 2], ids=["one call", "a parallel group"])
async def test_a_start_hook_awaiting_something_cancelled_elsewhere_changes_nothing(
    count: int, caplog: Any
) -> None:
    async def answer(args: Any, ctx: ToolContext) -> str:
        return "ok"

    registry = ToolRegistry(
        [define_tool(ToolDefinition("answer", execution_policy="parallel"), answer)]
    )
    calls = [ToolCall(str(i), "answer") for i in range(count)]
    with caplog.at_level(logging.WARNING, logger="llmrtc"), anyio.fail_after(SLOW / 3):
        results = await ToolExecutor(registry, hooks=AwaitsACancelledFutureAtStart()).execute(calls)
        await anyio.sleep(0)  # the caller goes on normally: nothing pending for it
    assert [(r.status, r.result) for r in results] == [("ok", "ok")] * count
    assert "on_tool_start raised a cancellation; ignored" in caplog.text


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_an_abort_still_cuts_a_slow_start_hook_short(anyio_backend: str) -> None:
    class SlowStart(Hooks):
        hook_timeout = SLOW * 2

        async def on_tool_start(self, event: ToolStartEvent) -> None:
            await anyio.sleep(SLOW)

    controller = AbortController()
    with anyio.fail_after(SLOW / 3):
        async with anyio.create_task_group() as group:
            group.start_soon(_abort_after, controller, 0.05)
            (result,) = await executor(SlowStart()).execute(
                [ToolCall("1", "quick")], abort_signal=controller.signal
            )
    assert result.status == "aborted"


async def _abort_after(controller: AbortController, delay: float) -> None:
    await anyio.sleep(delay)
    controller.abort("barge-in")
