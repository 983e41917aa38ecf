"""`background=` on definitions and `@tool`, the `"running"` answer, and `ToolContext.progress`
(its checks and its rate limit)."""

from __future__ import annotations

import json

import pytest

from llmrtc import ToolCallResult, ToolContext, ToolDefinition, tool
from llmrtc.abort import AbortController
from llmrtc.tools import PROGRESS_INTERVAL, RUNNING_NOTE, define_tool


def test_background_defaults_to_false_and_flows_through_tool_and_define_tool() -> None:
    assert ToolDefinition(name="plain").background is False

    @tool(background=True, timeout=120.0)
    async def bookTable(restaurant: str, ctx: ToolContext) -> dict[str, bool]:
        """Book a table."""
        return {"confirmed": True}

    assert bookTable.definition.background is True
    assert bookTable.definition.timeout == 120.0
    defined = define_tool(ToolDefinition(name="search", background=True), lambda a, c: None)
    assert defined.definition.background is True


def test_background_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="background must be True or False, got 'yes'"):
        ToolDefinition(name="x", background="yes")  # type: ignore[arg-type]


def test_running_answer_tells_the_model_the_result_follows() -> None:
    result = ToolCallResult("c1", "bookTable", "running", RUNNING_NOTE)
    assert not result.success
    content = json.loads(result.to_content())
    assert content == {"status": "running", "note": RUNNING_NOTE}
    assert "result will follow" in content["note"]


def _context(sink: list[str] | None = None) -> ToolContext:
    async def collect(message: str) -> None:
        assert sink is not None
        sink.append(message)

    return ToolContext(
        "c1", AbortController().signal, progress_sink=None if sink is None else collect
    )


@pytest.mark.anyio
async def test_progress_passes_messages_on_at_most_a_few_per_second(monkeypatch) -> None:
    seen: list[str] = []
    ctx = _context(seen)
    clock = [1000.0]
    monkeypatch.setattr("llmrtc.tools.context.time.monotonic", lambda: clock[0])
    assert await ctx.progress("one") is True
    assert await ctx.progress("too soon") is False
    clock[0] += PROGRESS_INTERVAL
    assert await ctx.progress("two") is True
    assert seen == ["one", "two"]


@pytest.mark.anyio
async def test_progress_without_a_sink_is_checked_and_dropped() -> None:
    assert await _context().progress("nobody listens") is True


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("message", "error", "text"),
    [
        (42, TypeError, "takes a str \\(a one-line status\\), got int"),
        ("   ", ValueError, "non-empty message"),
        ("x" * 501, ValueError, "at most 500 characters, got 501"),
        ("two\nlines", ValueError, "no line breaks"),
    ],
)
async def test_bad_progress_messages_say_what_is_allowed(
    message: object, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        await _context([]).progress(message)  # type: ignore[arg-type]
