"""The shared test helpers of llmrtc.testing: RecordingHooks, InMemoryTelemetry, abort_after."""

from __future__ import annotations

import threading
import time
from typing import get_args

import anyio
import pytest

from llmrtc import AbortController, CompositeHooks, ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.telemetry import (
    HOOK_NAMES,
    BargeInEvent,
    HookEvent,
    ToolEndEvent,
    ToolErrorEvent,
    ToolStartEvent,
    TurnStartEvent,
    listeners,
    tool_call_context_hooks,
)
from llmrtc.testing import InMemoryTelemetry, RecordingHooks, abort_after

pytestmark = pytest.mark.anyio


@tool
async def nap(seconds: float = 0.0) -> str:
    """Sleep a while.

    Args:
        seconds: How long.
    """
    await anyio.sleep(seconds)
    return "rested"


REGISTRY = ToolRegistry([nap])


async def test_recording_hooks_keep_every_event_in_order() -> None:
    hooks = RecordingHooks()
    executor = ToolExecutor(REGISTRY, hooks=hooks, max_concurrency=1)
    await executor.execute([ToolCall("a", "nap"), ToolCall("b", "nope")])
    # The unknown tool is refused (and reported) before the other call runs.
    assert hooks.names() == ["on_tool_error", "on_tool_end", "on_tool_start", "on_tool_end"]
    assert [type(e) for e in hooks.events] == [
        ToolErrorEvent,
        ToolEndEvent,
        ToolStartEvent,
        ToolEndEvent,
    ]
    assert [e.call_id for e in hooks.of(ToolEndEvent)] == ["b", "a"]
    (missing,) = hooks.of(ToolEndEvent, status="not_found")
    assert missing.call_id == "b"
    assert hooks.of(ToolEndEvent, call_id="a", status="ok")[0].result == "rested"
    assert hooks.of(TurnStartEvent) == []
    hooks.clear()
    assert hooks.events == [] and hooks.names() == []


def test_recording_hooks_listen_to_every_event_hook_and_add_no_handler_context() -> None:
    hooks = RecordingHooks()
    assert all(listeners(hooks, kind) == (hooks,) for kind in get_args(HookEvent))
    assert len(get_args(HookEvent)) == len(HOOK_NAMES)
    assert tool_call_context_hooks(hooks) == ()
    assert hooks.on_barge_in(BargeInEvent(session_id="s")) is None  # sync: nothing to await
    assert hooks.calls == [("on_barge_in", BargeInEvent(session_id="s"))]


def test_recording_hooks_refuse_a_filter_naming_no_field() -> None:
    with pytest.raises(AttributeError, match=r"ToolEndEvent has no field 'state'.*status"):
        RecordingHooks().of(ToolEndEvent, state="ok")


async def test_recording_hooks_record_through_a_composite_called_directly() -> None:
    first, second = RecordingHooks(), RecordingHooks()
    await CompositeHooks([first, second]).on_barge_in(BargeInEvent())  # type: ignore[misc]
    assert first.names() == second.names() == ["on_barge_in"]


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_abort_after_aborts_the_work_in_the_block(anyio_backend: str) -> None:
    hooks = RecordingHooks()
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    started = time.monotonic()
    async with abort_after(0.05, "barge-in") as controller:
        results = await executor.execute(
            [ToolCall("a", "nap", {"seconds": 10})], abort_signal=controller.signal
        )
    assert time.monotonic() - started < 5
    assert results[0].status == "aborted"
    assert controller.signal.reason == "barge-in"
    assert hooks.of(ToolEndEvent)[0].status == "aborted"


async def test_abort_after_from_a_thread_aborts_from_a_plain_thread() -> None:
    seen: list[str] = []
    controller = AbortController()
    controller.signal  # noqa: B018 - the signal exists before the thread aborts it
    async with abort_after(0.05, "hang-up", controller=controller, from_thread=True) as given:
        assert given is controller
        given.signal.subscribe(lambda: seen.append(threading.current_thread().name))
        with anyio.fail_after(5):
            await given.signal.wait()
    assert controller.signal.reason == "hang-up"
    assert seen == [threading.current_thread().name]  # the listener still ran in the loop


@pytest.mark.parametrize("from_thread", [False, True])
async def test_abort_after_does_nothing_when_the_block_ends_first(from_thread: bool) -> None:
    async with abort_after(0.05, from_thread=from_thread) as controller:
        pass
    await anyio.sleep(0.15)
    assert not controller.signal.aborted


@pytest.mark.parametrize("from_thread", [False, True])
async def test_abort_after_lets_what_the_block_raises_through_unchanged(from_thread: bool) -> None:
    with pytest.raises(KeyError, match="mine"):
        async with abort_after(10, from_thread=from_thread):
            raise KeyError("mine")


async def test_abort_after_refuses_a_negative_delay() -> None:
    with pytest.raises(ValueError, match="seconds must be >= 0, got -1"):
        async with abort_after(-1):
            pass


async def test_abort_after_is_cancelled_with_its_block() -> None:
    with anyio.move_on_after(0.05) as outer:
        async with abort_after(10) as controller:
            await anyio.sleep(10)
    assert outer.cancelled_caught and not controller.signal.aborted


async def test_in_memory_telemetry_finds_spans_and_says_what_ended_when_one_is_missing() -> None:
    telemetry = InMemoryTelemetry()
    await ToolExecutor(REGISTRY, hooks=telemetry.hooks).execute([ToolCall("a", "nap")])
    span = telemetry.span("execute_tool nap")
    assert telemetry.spans() == [span] and telemetry.children(span) == []
    assert [p.value for p in telemetry.points("llmrtc.tool.calls")] == [1]
    assert telemetry.points("no.such.metric") == []
    with pytest.raises(LookupError, match=r"0 finished spans named 'nope'; spans: \['execute_tool"):
        telemetry.span("nope")
    telemetry.clear()
    assert telemetry.spans() == []
