"""`ctx.progress(message)` from a running tool reaches `on_tool_progress` hooks, the
executor's `on_tool_progress` callback, and the call's `execute_tool` span as an
`llmrtc.tool.progress` event (its message only with content capture, masked)."""

from __future__ import annotations

import pytest

from llmrtc import Hooks, ToolCall, ToolContext, ToolExecutor, ToolProgressEvent, ToolRegistry, tool
from llmrtc.telemetry import HOOK_NAMES
from llmrtc.testing import InMemoryTelemetry

pytestmark = pytest.mark.anyio

CARD = "4111111111111111"


@tool(sensitive_fields=["card"])
async def charge(card: str, ctx: ToolContext) -> str:
    """Charge a card."""
    passed = [await ctx.progress(f"Contacting the bank for {card}")]
    passed.append(await ctx.progress("dropped: too soon after the first"))
    return "done" if passed == [True, False] else f"unexpected {passed}"


class Progress(Hooks):
    def __init__(self) -> None:
        self.events: list[ToolProgressEvent] = []

    def on_tool_progress(self, event: ToolProgressEvent) -> None:
        self.events.append(event)


def test_on_tool_progress_is_a_hook() -> None:
    assert "on_tool_progress" in HOOK_NAMES


async def test_progress_reaches_hooks_and_the_executor_callback_with_its_ids() -> None:
    hooks = Progress()
    called: list[ToolProgressEvent] = []
    executor = ToolExecutor(ToolRegistry([charge]), hooks=hooks, on_tool_progress=called.append)
    [result] = await executor.execute(
        [ToolCall("c1", "charge", {"card": CARD})], session_id="s1", turn_id="t1"
    )
    assert result.result == "done"
    [event] = hooks.events
    assert called == [event]
    assert (event.call_id, event.tool_name, event.session_id, event.turn_id) == (
        "c1",
        "charge",
        "s1",
        "t1",
    )
    assert event.message == f"Contacting the bank for {CARD}"
    assert event.background is False
    assert event.execution_id


async def test_progress_is_an_event_on_the_calls_span_with_content_only_by_consent() -> None:
    for consent in (False, True):
        telemetry = InMemoryTelemetry(capture_content=consent)
        executor = ToolExecutor(ToolRegistry([charge]), hooks=telemetry.hooks)
        await executor.execute([ToolCall("c1", "charge", {"card": CARD})])
        span = telemetry.span("execute_tool charge")
        [event] = [e for e in span.events if e.name == "llmrtc.tool.progress"]
        attributes = dict(event.attributes or {})
        assert attributes["gen_ai.tool.call.id"] == "c1"
        if consent:
            message = attributes["llmrtc.tool.progress.message"]
            assert CARD not in str(message) and "Contacting the bank" in str(message)
        else:
            assert "llmrtc.tool.progress.message" not in attributes


async def test_without_progress_listeners_the_handler_gets_no_sink() -> None:
    sinks: list[object] = []

    @tool
    async def look(ctx: ToolContext) -> bool:
        """Look."""
        sinks.append(ctx.progress_sink)
        return await ctx.progress("nobody listens")

    [result] = await ToolExecutor(ToolRegistry([look])).execute([ToolCall("c1", "look", {})])
    assert result.result is True
    assert sinks == [None]


async def test_a_sync_handler_reports_progress_through_anyio_from_thread() -> None:
    import anyio.from_thread

    @tool
    def crunch(ctx: ToolContext) -> bool:
        """Crunch numbers (in a worker thread)."""
        return anyio.from_thread.run(ctx.progress, "Crunching")

    hooks = Progress()
    [result] = await ToolExecutor(ToolRegistry([crunch]), hooks=hooks).execute(
        [ToolCall("c1", "crunch", {})]
    )
    assert result.result is True
    assert [e.message for e in hooks.events] == ["Crunching"]
