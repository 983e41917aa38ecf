"""What the caller and the model receive: `on_result` per call, and errors meant for the model
(`ToolError`) versus internal errors, whose detail goes to hooks and logs only (defect 4):
also the executor's own error classes when a handler raises them, and abort reasons that are
not a short word."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from llmrtc import (
    AbortController,
    InvalidToolArgumentsError,
    ToolAbortedError,
    ToolCall,
    ToolCallResult,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolNotFoundError,
    ToolRegistry,
    ToolTimeoutError,
    define_tool,
)
from llmrtc.telemetry.events import ToolEndEvent, ToolErrorEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools import ToolError

pytestmark = pytest.mark.anyio

SECRET = "postgresql://admin:hunter2@db.internal:5432/bookings"


async def leaky(args: Any, ctx: ToolContext) -> None:
    raise KeyError(f"no pool for {SECRET}")


async def fully_booked(args: Any, ctx: ToolContext) -> None:
    raise ToolError("No table is free at 8 pm; offer 9 pm.")


def leaky_sync(args: Any, ctx: ToolContext) -> None:
    raise KeyError(f"no pool for {SECRET}")


async def nap(args: Any, ctx: ToolContext) -> str:
    await anyio.sleep(args.get("s", 0))
    return "rested"


NAP_SCHEMA = {"type": "object", "properties": {"s": {"type": "number"}}}


def registry() -> ToolRegistry:
    return ToolRegistry(
        [
            define_tool(ToolDefinition("leaky"), leaky),
            define_tool(ToolDefinition("leaky_sync"), leaky_sync),
            define_tool(ToolDefinition("book"), fully_booked),
            define_tool(ToolDefinition("nap", parameters=NAP_SCHEMA), nap),
        ]
    )


class Recorder(Hooks):
    def __init__(self) -> None:
        self.ends: dict[str, ToolEndEvent] = {}
        self.errors: dict[str, ToolErrorEvent] = {}

    def on_tool_error(self, event: ToolErrorEvent) -> None:
        self.errors[event.call_id] = event

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.ends[event.call_id] = event


@pytest.mark.parametrize("name", ["leaky", "leaky_sync"])
async def test_an_internal_error_never_reaches_the_model_but_hooks_and_log_get_it(
    name: str, caplog: Any
) -> None:
    hooks = Recorder()
    executor = ToolExecutor(registry(), hooks=hooks)
    with caplog.at_level(logging.WARNING, logger="llmrtc.execution"):
        result = await executor.execute_single(ToolCall("c1", name))
    assert result.status == "error"
    assert result.error == f"tool {name!r} failed because of an internal error"
    assert SECRET not in result.to_content() and "KeyError" not in result.to_content()
    end = hooks.ends["c1"]
    assert isinstance(end.exception, KeyError) and SECRET in str(end.exception)
    assert end.error_type == "KeyError"
    assert SECRET not in (end.error or "") and SECRET not in (end.result_content or "")
    assert isinstance(hooks.errors["c1"].error, KeyError)
    [record] = [r for r in caplog.records if r.name == "llmrtc.execution.call"]
    assert record.levelno == logging.WARNING
    assert record.exc_info is not None and record.exc_info[1] is end.exception
    assert name in record.getMessage() and "c1" in record.getMessage()


async def test_a_tool_error_message_goes_to_the_model_as_is() -> None:
    hooks = Recorder()
    result = await ToolExecutor(registry(), hooks=hooks).execute_single(ToolCall("c", "book"))
    assert result.status == "error"
    assert result.error == "No table is free at 8 pm; offer 9 pm."
    end = hooks.ends["c"]
    assert isinstance(end.exception, ToolError)
    assert end.error_type == "llmrtc.tools.errors.ToolError"


async def test_exception_is_none_when_the_handler_did_not_raise() -> None:
    hooks = Recorder()
    executor = ToolExecutor(registry(), hooks=hooks, timeout=0.05)
    await executor.execute(
        [ToolCall("ok", "nap"), ToolCall("slow", "nap", {"s": 5}), ToolCall("gone", "nope")]
    )
    assert {cid: e.status for cid, e in hooks.ends.items()} == {
        "ok": "ok",
        "slow": "timeout",
        "gone": "not_found",
    }
    assert all(event.exception is None for event in hooks.ends.values())


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_on_result_gets_every_call_once_in_finish_order_in_the_callers_task() -> None:
    received: list[tuple[str, str]] = []
    caller = anyio.get_current_task().id

    def on_result(result: ToolCallResult) -> None:
        assert anyio.get_current_task().id == caller
        received.append((result.call_id, result.status))

    calls = [
        ToolCall("slow", "nap", {"s": 0.2}),
        ToolCall("fast", "nap", {"s": 0}),
        ToolCall("missing", "nope"),
        ToolCall("bad", "nap", {"s": "x"}),
        ToolCall("boom", "leaky"),
    ]
    results = await ToolExecutor(registry()).execute(calls, on_result=on_result)
    assert sorted(received) == sorted((r.call_id, r.status) for r in results)
    # Calls that never ran first (as they are refused), then as the handlers finish.
    assert received.index(("fast", "ok")) < received.index(("slow", "ok"))
    assert received[-1] == ("slow", "ok")


async def test_on_result_reports_aborted_and_cancelled_calls_before_execute_ends() -> None:
    received: list[tuple[str, str]] = []
    executor = ToolExecutor(registry(), max_concurrency=1)
    controller = AbortController()
    controller.abort("barge-in")
    await executor.execute(
        [ToolCall("a", "nap")],
        abort_signal=controller.signal,
        on_result=lambda r: received.append((r.call_id, r.status)),
    )
    assert received == [("a", "aborted")]

    received.clear()
    with anyio.move_on_after(0.1):
        await executor.execute(
            [ToolCall("done", "nap"), ToolCall("long", "nap", {"s": 10}), ToolCall("q", "nap")],
            on_result=lambda r: received.append((r.call_id, r.status)),
        )
    assert received == [("done", "ok"), ("long", "aborted"), ("q", "aborted")]


async def test_an_on_result_that_raises_is_logged_and_changes_nothing(caplog: Any) -> None:
    def broken(result: ToolCallResult) -> None:
        raise RuntimeError("callback bug")

    with caplog.at_level(logging.ERROR, logger="llmrtc.execution"):
        results = await ToolExecutor(registry()).execute(
            [ToolCall("1", "nap"), ToolCall("2", "nap")], on_result=broken
        )
    assert [r.status for r in results] == ["ok", "ok"]
    assert "callback bug" in caplog.text


async def test_json_string_arguments_arrive_exactly_as_the_model_wrote_them() -> None:
    seen: dict[str, Any] = {}  # by call id: the two sync handlers run in two worker threads
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "n": {}}}
    echo = define_tool(
        ToolDefinition("echo", parameters=schema), lambda a, c: seen.__setitem__(c.call_id, a)
    )
    raw = '{"city": "Z\\u00fcrich \\u09ea \\ud83d\\ude00", "n": 123456789012345678901234567890}'
    lone = '{"city": "\\ud800"}'  # a lone surrogate: Python's json takes it
    results = await ToolExecutor(ToolRegistry([echo])).execute(
        [ToolCall("1", "echo", raw), ToolCall("2", "echo", lone), ToolCall("3", "echo", "{")]
    )
    assert [r.status for r in results] == ["ok", "ok", "invalid_arguments"]
    assert seen == {
        "1": {"city": "Zürich \u09ea \U0001f600", "n": 123456789012345678901234567890},
        "2": {"city": "\ud800"},
    }
    assert "arguments are not valid JSON" in (results[2].error or "")


@pytest.mark.parametrize(
    "raised",
    [
        ToolNotFoundError("db", f"db at {SECRET} is missing"),
        ToolTimeoutError("db", 3.0),
        InvalidToolArgumentsError("db", [f"bad dsn {SECRET}"]),
        ToolAbortedError("db", f"aborted talking to {SECRET}"),
    ],
    ids=lambda error: type(error).__name__,
)
async def test_the_executors_error_classes_raised_by_a_handler_are_internal_errors(
    raised: Exception,
) -> None:
    async def nested(args: Any, ctx: ToolContext) -> None:
        raise raised  # e.g. a handler that runs a nested lookup of its own

    hooks = Recorder()
    executor = ToolExecutor(
        ToolRegistry([define_tool(ToolDefinition("nested"), nested)]), hooks=hooks
    )
    result = await executor.execute_single(ToolCall("c", "nested"))
    assert result.status == "error"
    assert result.error == "tool 'nested' failed because of an internal error"
    assert hooks.ends["c"].exception is raised


async def test_a_tool_error_that_is_also_an_executor_error_speaks_its_own_words() -> None:
    class NoSuchTable(ToolError, ToolNotFoundError):
        pass

    async def book(args: Any, ctx: ToolContext) -> None:
        raise NoSuchTable("table", "There is no table by the window; offer the terrace.")

    executor = ToolExecutor(ToolRegistry([define_tool(ToolDefinition("book"), book)]))
    result = await executor.execute_single(ToolCall("c", "book"))
    assert (result.status, result.error) == (
        "error",
        "There is no table by the window; offer the terrace.",
    )


@pytest.mark.parametrize(
    ("reason", "told"),
    [
        ("barge-in", "tool call 'nap' aborted (barge-in)"),
        (ConnectionResetError(f"peer 10.1.2.3:443 reset, {SECRET}"), "tool call 'nap' aborted"),
        ("user hung up; " + SECRET, "tool call 'nap' aborted"),  # too long to be a word
        ("line\nbreak", "tool call 'nap' aborted"),
        (None, "tool call 'nap' aborted"),
    ],
    ids=["short word", "exception", "long text", "two lines", "none"],
)
async def test_the_model_hears_an_abort_reason_only_when_it_is_a_short_word(
    reason: object, told: str
) -> None:
    hooks = Recorder()
    controller = AbortController()
    executor = ToolExecutor(registry(), hooks=hooks)
    async with anyio.create_task_group() as group:
        group.start_soon(_abort_after, controller, 0.05, reason)
        [running, sibling] = await executor.execute(
            [ToolCall("run", "nap", {"s": 10}), ToolCall("q", "nap", {"s": 10})],
            abort_signal=controller.signal,
        )
    assert running.status == sibling.status == "aborted"
    assert running.error == sibling.error == told
    error = hooks.errors["run"].error
    assert isinstance(error, ToolAbortedError) and error.reason is reason  # hooks get it all


async def _abort_after(controller: AbortController, delay: float, reason: object) -> None:
    await anyio.sleep(delay)
    controller.abort(reason)
