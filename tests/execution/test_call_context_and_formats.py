"""Hooks can wrap the handler in a context of their own (defect 5, executor side), and
`validate_formats` decides whether `format` is an assertion."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolContext, ToolDefinition, ToolExecutor, ToolRegistry, define_tool
from llmrtc.telemetry.events import ToolStartEvent
from llmrtc.telemetry.hooks import Hooks

pytestmark = pytest.mark.anyio

current_span: ContextVar[str | None] = ContextVar("current_span", default=None)


class SpanLikeHooks(Hooks):
    """Makes a value current while each handler runs, as OpenTelemetryHooks makes its span."""

    def __init__(self) -> None:
        self.exits: list[tuple[str, str | None]] = []
        self.threads: set[int] = set()

    @contextlib.contextmanager
    def _context(self, event: ToolStartEvent) -> Iterator[None]:
        self.threads.add(threading.get_ident())
        token = current_span.set(f"span-of-{event.call_id}")
        try:
            yield
        except BaseException as exc:
            self.exits.append((event.call_id, type(exc).__name__))
            raise
        else:
            self.exits.append((event.call_id, None))
        finally:
            current_span.reset(token)

    def tool_call_context(self, event: ToolStartEvent) -> contextlib.AbstractContextManager[None]:
        return self._context(event)


async def async_reader(args: Any, ctx: ToolContext) -> str | None:
    await anyio.sleep(0.01)
    return current_span.get()


def sync_reader(args: Any, ctx: ToolContext) -> str | None:
    return current_span.get()  # runs in a worker thread


async def failing(args: Any, ctx: ToolContext) -> None:
    raise RuntimeError("nope")


def registry() -> ToolRegistry:
    return ToolRegistry(
        [
            define_tool(ToolDefinition("async_reader"), async_reader),
            define_tool(ToolDefinition("sync_reader"), sync_reader),
            define_tool(ToolDefinition("failing"), failing),
        ]
    )


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_handlers_run_inside_the_context_a_hook_gives_async_and_sync() -> None:
    hooks = SpanLikeHooks()
    executor = ToolExecutor(registry(), hooks=hooks)
    loop_thread = threading.get_ident()
    calls = [
        ToolCall("a", "async_reader"),
        ToolCall("s", "sync_reader"),
        ToolCall("f", "failing"),
    ]
    results = await executor.execute(calls)
    assert [r.result for r in results[:2]] == ["span-of-a", "span-of-s"]
    assert sorted(hooks.exits) == [("a", None), ("f", "RuntimeError"), ("s", None)]
    assert hooks.threads == {loop_thread}  # entered in the loop, seen in the worker thread
    assert current_span.get() is None  # nothing leaks into the caller
    single = await executor.execute_single(ToolCall("one", "async_reader"))
    assert single.result == "span-of-one" and current_span.get() is None


async def test_a_context_is_per_batch_hooks_too_and_absent_without_hooks() -> None:
    executor = ToolExecutor(registry())
    plain = await executor.execute_single(ToolCall("p", "async_reader"))
    assert plain.result is None
    batch_hooks = await executor.execute_single(ToolCall("h", "sync_reader"), hooks=SpanLikeHooks())
    assert batch_hooks.result == "span-of-h"


async def test_a_context_hook_that_raises_is_logged_and_the_call_still_runs(caplog: Any) -> None:
    class Broken(Hooks):
        def tool_call_context(self, event: ToolStartEvent) -> None:
            raise ValueError("hook bug")

    executor = ToolExecutor(registry(), hooks=Broken())
    result = await executor.execute_single(ToolCall("x", "sync_reader"))
    assert result.status == "ok"
    assert "hook bug" in caplog.text


async def test_formats_are_assertions_unless_turned_off() -> None:
    seen: list[Any] = []
    schema = {"type": "object", "properties": {"day": {"type": "string", "format": "date"}}}
    book = define_tool(ToolDefinition("book", parameters=schema), lambda a, c: seen.append(a))
    strict = ToolExecutor(ToolRegistry([book]))
    assert strict.validate_formats is True
    refused = await strict.execute_single(ToolCall("1", "book", {"day": "2020-13-45"}))
    assert refused.status == "invalid_arguments" and seen == []
    lenient = ToolExecutor(ToolRegistry([book]), validate_formats=False)
    accepted = await lenient.execute_single(ToolCall("2", "book", {"day": "2020-13-45"}))
    assert accepted.status == "ok" and seen == [{"day": "2020-13-45"}]
