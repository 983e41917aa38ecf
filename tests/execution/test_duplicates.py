"""`on_duplicate`: the same tool with the same arguments in the same session, while the first
call runs or within `duplicate_window` after it ended ok, is reused (the handler runs once) or
rejected; failed first calls are never reused; calls without a session never match."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from llmrtc import (
    ToolCall,
    ToolDefinition,
    ToolError,
    ToolExecutor,
    ToolRegistry,
    define_tool,
    tool,
)
from llmrtc.abort import AbortController
from llmrtc.execution.duplicates import Duplicates, duplicate_key
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import RecordingHooks

pytestmark = pytest.mark.anyio


class Booking:
    """A booking backend that counts its calls and can be told to fail or wait."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []
        self.release = anyio.Event()
        self.hold = False
        self.fail: BaseException | None = None
        self.fail_runs = 0  # with `fail`, fail only the first this many runs (0: every run)

    def tool(self, on_duplicate: str = "reuse", **options: Any) -> Any:
        async def book(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
            self.runs.append(dict(args))
            if self.hold:
                await self.release.wait()
            if self.fail is not None and (not self.fail_runs or len(self.runs) <= self.fail_runs):
                raise self.fail
            return {"booked": args["restaurant"], "seats": args["seats"]}

        return define_tool(
            ToolDefinition(
                name="book",
                description="Book a table.",
                parameters={
                    "type": "object",
                    "properties": {
                        "restaurant": {"type": "string"},
                        "seats": {"type": "integer"},
                        "note": {"type": "string", "default": ""},
                    },
                    "required": ["restaurant", "seats"],
                },
                on_duplicate=on_duplicate,  # type: ignore[arg-type]
                **options,
            ),
            book,
        )


def call(call_id: str, arguments: Any = None) -> ToolCall:
    return ToolCall(call_id, "book", arguments or {"restaurant": "Nopa", "seats": 2})


async def test_reuse_of_a_finished_call_runs_the_handler_once() -> None:
    backend = Booking()
    hooks = RecordingHooks()
    executor = ToolExecutor(ToolRegistry([backend.tool()]), hooks=hooks)
    [first] = await executor.execute([call("c1")], session_id="s1")
    # Key order, whitespace, a JSON string and a filled-in default do not matter.
    repeat = '{ "seats": 2,   "restaurant": "Nopa", "note": "" }'
    [second] = await executor.execute([call("c2", repeat)], session_id="s1")
    assert len(backend.runs) == 1
    assert first.status == second.status == "ok" and first.reused_from is None
    assert second.reused_from == "c1" and second.attempts == 0 and first.attempts == 1
    assert second.result == first.result and second.to_content() == first.to_content()
    assert second.call_id == "c2"
    ends = {e.call_id: e for e in hooks.of(ToolEndEvent)}
    assert ends["c2"].reused_from == "c1" and not ends["c2"].started
    assert ends["c1"].reused_from is None and ends["c1"].attempts == 1


async def test_reuse_waits_for_a_running_first_call_in_the_same_batch() -> None:
    backend = Booking()
    backend.hold = True
    executor = ToolExecutor(ToolRegistry([backend.tool()]))

    async def release() -> None:
        await anyio.sleep(0.05)
        backend.release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(release)
        results = await executor.execute([call("c1"), call("c2"), call("c3")], session_id="s")
    assert len(backend.runs) == 1
    assert [r.status for r in results] == ["ok"] * 3
    assert [r.reused_from for r in results] == [None, "c1", "c1"]


async def test_reuse_across_concurrent_batches() -> None:
    backend = Booking()
    backend.hold = True
    executor = ToolExecutor(ToolRegistry([backend.tool()]))
    results: dict[str, Any] = {}

    async def run(call_id: str) -> None:
        [results[call_id]] = await executor.execute([call(call_id)], session_id="s")

    async with anyio.create_task_group() as group:
        group.start_soon(run, "c1")
        await anyio.sleep(0.02)
        group.start_soon(run, "c2")
        await anyio.sleep(0.02)
        backend.release.set()
    assert len(backend.runs) == 1
    assert results["c2"].reused_from == "c1" and results["c2"].result == results["c1"].result


async def test_reject_names_the_earlier_call_and_its_result() -> None:
    backend = Booking()
    executor = ToolExecutor(ToolRegistry([backend.tool("reject")]))
    await executor.execute([call("c1")], session_id="s")
    [again] = await executor.execute([call("c2")], session_id="s")
    assert again.status == "duplicate" and len(backend.runs) == 1
    content = json.loads(again.to_content())
    assert content["status"] == "duplicate"
    assert "'c1'" in content["error"] and '"booked":"Nopa"' in content["error"]
    assert "do not call it again" in content["error"]


async def test_reject_while_the_first_call_still_runs() -> None:
    backend = Booking()
    backend.hold = True
    executor = ToolExecutor(ToolRegistry([backend.tool("reject")]))

    async def release() -> None:
        await anyio.sleep(0.05)
        backend.release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(release)
        first, second = await executor.execute([call("c1"), call("c2")], session_id="s")
    assert first.status == "ok" and second.status == "duplicate"
    assert "still running" in (second.error or "")


@pytest.mark.parametrize(
    "failure", [RuntimeError("backend down"), ToolError("no table"), TimeoutError()]
)
async def test_a_failed_first_call_is_not_reused(failure: BaseException) -> None:
    backend = Booking()
    backend.fail = failure
    executor = ToolExecutor(ToolRegistry([backend.tool()]))
    [first] = await executor.execute([call("c1")], session_id="s")
    assert first.status == "error"
    backend.fail = None
    [second] = await executor.execute([call("c2")], session_id="s")
    assert second.status == "ok" and second.reused_from is None
    assert len(backend.runs) == 2


async def test_followers_of_a_failed_first_call_run_once_more_not_each() -> None:
    backend = Booking()
    backend.hold = True
    backend.fail = RuntimeError("down")
    backend.fail_runs = 1
    executor = ToolExecutor(ToolRegistry([backend.tool()]))

    async def release() -> None:
        await anyio.sleep(0.05)
        backend.release.set()

    async with anyio.create_task_group() as group:
        group.start_soon(release)
        results = await executor.execute([call("c1"), call("c2"), call("c3")], session_id="s")
    # c1 failed; c2 became the first call and ran; c3 reused c2's result.
    assert [r.status for r in results] == ["error", "ok", "ok"]
    assert [r.reused_from for r in results] == [None, None, "c2"]
    assert len(backend.runs) == 2


async def test_a_timed_out_or_aborted_first_call_is_not_reused() -> None:
    backend = Booking()
    backend.hold = True
    executor = ToolExecutor(ToolRegistry([backend.tool(timeout=0.05)]))
    [first] = await executor.execute([call("c1")], session_id="s")
    assert first.status == "timeout"
    controller = AbortController()

    async def abort() -> None:
        await anyio.sleep(0.01)
        controller.abort("barge-in")

    async with anyio.create_task_group() as group:
        group.start_soon(abort)
        [second] = await executor.execute(
            [call("c2")], session_id="s", abort_signal=controller.signal
        )
    assert second.status == "aborted"
    backend.hold = False
    [third] = await executor.execute([call("c3")], session_id="s")
    assert third.status == "ok" and third.reused_from is None
    assert len(backend.runs) == 3


async def test_an_aborted_follower_leaves_the_first_call_alone() -> None:
    backend = Booking()
    backend.hold = True
    executor = ToolExecutor(ToolRegistry([backend.tool()]))
    controller = AbortController()
    results: dict[str, Any] = {}

    async def first() -> None:
        [results["c1"]] = await executor.execute([call("c1")], session_id="s")

    async with anyio.create_task_group() as group:
        group.start_soon(first)
        await anyio.sleep(0.02)

        async def abort() -> None:
            await anyio.sleep(0.03)
            controller.abort("barge-in")
            await anyio.sleep(0.03)
            backend.release.set()

        group.start_soon(abort)
        [results["c2"]] = await executor.execute(
            [call("c2")], session_id="s", abort_signal=controller.signal
        )
    assert results["c2"].status == "aborted" and results["c1"].status == "ok"
    assert len(backend.runs) == 1


async def test_different_sessions_arguments_or_no_session_never_match() -> None:
    backend = Booking()
    executor = ToolExecutor(ToolRegistry([backend.tool()]))
    await executor.execute([call("c1")], session_id="s1")
    [other_session] = await executor.execute([call("c2")], session_id="s2")
    [other_args] = await executor.execute(
        [call("c3", {"restaurant": "Nopa", "seats": 3})], session_id="s1"
    )
    [no_session_1] = await executor.execute([call("c4")])
    [no_session_2] = await executor.execute([call("c5")])
    results = (other_session, other_args, no_session_1, no_session_2)
    assert all(r.reused_from is None and r.status == "ok" for r in results)
    assert len(backend.runs) == 5


async def test_allow_runs_every_repeat() -> None:
    backend = Booking()
    executor = ToolExecutor(ToolRegistry([backend.tool("allow")]))
    for index in range(3):
        await executor.execute([call(f"c{index}")], session_id="s")
    assert len(backend.runs) == 3


async def test_the_window_ends_reuse() -> None:
    backend = Booking()
    executor = ToolExecutor(ToolRegistry([backend.tool()]), duplicate_window=0.05)
    await executor.execute([call("c1")], session_id="s")
    [soon] = await executor.execute([call("c2")], session_id="s")
    await anyio.sleep(0.1)
    [late] = await executor.execute([call("c3")], session_id="s")
    assert soon.reused_from == "c1" and late.reused_from is None
    assert len(backend.runs) == 2


async def test_typed_tools_compare_parsed_arguments() -> None:
    runs: list[str] = []

    @tool(on_duplicate="reuse")
    async def reserve(city: str, nights: int = 1) -> str:
        """Reserve a room."""
        runs.append(city)
        return f"{city} x{nights}"

    executor = ToolExecutor(ToolRegistry([reserve]))
    await executor.execute([ToolCall("a", "reserve", {"city": "Oslo"})], session_id="s")
    [again] = await executor.execute(
        [ToolCall("b", "reserve", '{"nights": 1, "city": "Oslo"}')], session_id="s"
    )
    assert again.reused_from == "a" and runs == ["Oslo"]


def test_the_table_forgets_failures_and_keeps_ok_results_for_the_window() -> None:
    now = [0.0]
    table = Duplicates(10.0, clock=lambda: now[0])
    key = duplicate_key("s", "book", {"b": 1, "a": [1, 2]})
    assert key == duplicate_key("s", "book", {"a": [1, 2], "b": 1})
    entry = table.lead(key, "c1")
    assert table.find(key) is entry and not entry.ended
    from llmrtc.tools.calls import ToolCallResult

    table.end(entry, ToolCallResult("c1", "book", "error", error="x"))
    assert table.find(key) is None and entry.ended and entry.result is None
    entry = table.lead(key, "c2")
    table.end(entry, ToolCallResult("c2", "book", "ok", result=1))
    now[0] = 9.0
    assert table.find(key) is entry
    now[0] = 10.5
    assert table.find(key) is None


async def test_a_repeat_in_the_same_batch_of_a_call_that_ended_at_once_is_reused() -> None:
    # Regression: the first call ran to its end without yielding (no await in its handler)
    # before the repeat began to wait for it; the repeat then waited forever.
    runs: list[int] = []

    @tool(on_duplicate="reuse")
    async def instant(n: int) -> int:
        """Answers without awaiting anything."""
        runs.append(n)
        return n

    executor = ToolExecutor(ToolRegistry([instant]))
    with anyio.fail_after(2):
        results = await executor.execute(
            [ToolCall("a", "instant", {"n": 1}), ToolCall("b", "instant", {"n": 1})],
            session_id="s",
        )
    assert [r.reused_from for r in results] == [None, "a"] and runs == [1]


async def test_the_session_the_calling_task_serves_is_the_default_session_id() -> None:
    # Over WebRTC the agent factory builds its runner with no session id; the voice loop sets
    # current_session_id for its turns, and the executor takes it.
    from llmrtc.telemetry.correlation import current_session_id
    from llmrtc.tools.context import ToolContext

    sessions: list[str | None] = []

    @tool(on_duplicate="reuse")
    async def book(slot: str, ctx: ToolContext) -> str:
        """Book."""
        sessions.append(ctx.session_id)
        return slot

    executor = ToolExecutor(ToolRegistry([book]))
    token = current_session_id.set("rtc-session-1")
    try:
        await executor.execute([ToolCall("a", "book", {"slot": "8pm"})])
        [again] = await executor.execute([ToolCall("b", "book", {"slot": "8pm"})])
        [explicit] = await executor.execute(
            [ToolCall("c", "book", {"slot": "8pm"})], session_id="other"
        )
    finally:
        current_session_id.reset(token)
    assert again.reused_from == "a" and explicit.reused_from is None
    assert sessions == ["rtc-session-1", "other"]
