"""The Hooks protocol: typed events, fan-out, isolation, time limits, per-batch hooks, context."""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from typing import Any

import anyio
import pytest

from llmrtc import (
    BargeInEvent,
    CompositeHooks,
    CorrelationFilter,
    Hooks,
    ToolCall,
    ToolCallResult,
    ToolContext,
    ToolDefinition,
    ToolEndEvent,
    ToolErrorEvent,
    ToolExecutor,
    ToolRegistry,
    ToolStartEvent,
    define_tool,
    tool,
)
from llmrtc.execution.errors import ToolTimeoutError
from llmrtc.telemetry.hooks import HOOK_NAMES, emit, listeners
from llmrtc.testing import RecordingHooks, abort_after

pytestmark = pytest.mark.anyio

tool_logger = logging.getLogger("llmrtc.tests.tools")


class Named(Hooks):
    """Writes `(its name, hook kind)` to a log shared with other hooks: shows the order
    across several hooks (an async end hook, to cover the awaited path too)."""

    def __init__(self, name: str, log: list[tuple[str, str]]) -> None:
        self.name = name
        self.log = log

    def on_tool_start(self, event: ToolStartEvent) -> None:
        self.log.append((self.name, "start"))

    async def on_tool_end(self, event: ToolEndEvent) -> None:
        await anyio.sleep(0)
        self.log.append((self.name, "end"))


@tool(timeout=0.1)
async def sleepy(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: How long.
    """
    await anyio.sleep(seconds)
    return "rested"


@tool
async def crash() -> None:
    """Always fails."""
    raise KeyError("boom")


@tool(sensitive_fields=["pin"])
def unlock(door: str, pin: str) -> str:
    """Unlock a door (runs in a thread)."""
    tool_logger.info("unlocking %s", door)
    return f"{door} open"


REGISTRY = ToolRegistry([sleepy, crash, unlock])


def test_every_hook_of_the_product_is_declared() -> None:
    assert set(HOOK_NAMES) == {
        "on_tool_start",
        "on_tool_end",
        "on_model_fallback",
        "on_tool_warning",
        "on_tool_error",
        "on_tool_progress",
        "on_tool_retry",
        "on_breaker_change",
        "on_turn_start",
        "on_turn_end",
        "on_llm_start",
        "on_llm_first_token",
        "on_llm_end",
        "on_stage_enter",
        "on_stage_exit",
        "on_transition",
        "on_speech_start",
        "on_speech_end",
        "on_stt_end",
        "on_tts_start",
        "on_tts_end",
        "on_barge_in",
        "on_session_start",
        "on_session_end",
        "on_error",
    }
    base = Hooks()
    assert all(getattr(base, name)(None) is None for name in HOOK_NAMES)  # all optional no-ops


async def test_tool_events_carry_ids_and_pair_start_with_end_by_execution_id() -> None:
    recorder = RecordingHooks()
    executor = ToolExecutor(REGISTRY, hooks=recorder, max_concurrency=1)
    calls = [
        ToolCall("c1", "sleepy", {"seconds": 0.01}),
        ToolCall("c1", "sleepy", {"seconds": 0.01}),  # the same call id twice
        ToolCall("c2", "crash"),
        ToolCall("c3", "nope"),
        ToolCall("c4", "sleepy", {"seconds": 5}),
    ]
    await executor.execute(calls, session_id="s1", turn_id="t1", stage_id="greeting")
    starts, ends = recorder.of(ToolStartEvent), recorder.of(ToolEndEvent)
    assert len(ends) == 5 and len(starts) == 4  # "nope" never started
    assert len({e.execution_id for e in ends}) == 5  # unique although call ids repeat
    assert {s.execution_id for s in starts} <= {e.execution_id for e in ends}
    for event in starts + ends:
        assert (event.session_id, event.turn_id, event.stage_id) == ("s1", "t1", "greeting")
    first = starts[0]
    assert (first.call_id, first.tool_name, first.tool_description) == ("c1", "sleepy", "Sleep.")
    assert first.arguments == {"seconds": 0.01}
    assert isinstance(first.context, ToolContext)
    by_call = {(e.call_id, e.status) for e in ends}
    assert by_call == {
        ("c1", "ok"),
        ("c2", "error"),
        ("c3", "not_found"),
        ("c4", "timeout"),
    }
    ok = next(e for e in ends if e.status == "ok")
    assert ok.result == "rested" and ok.result_content == '"rested"'
    assert ok.started and ok.duration_s > 0 and ok.error is None and ok.error_type is None
    crashed = next(e for e in ends if e.status == "error")
    assert crashed.error_type == "KeyError" and "boom" not in (crashed.error or "")
    assert isinstance(crashed.exception, KeyError)  # the full detail is for hooks, not the model
    missing = next(e for e in ends if e.status == "not_found")
    assert not missing.started and missing.duration_s == 0 and missing.error_type == "not_found"
    timed_out = next(e for e in ends if e.status == "timeout")
    assert timed_out.error_type == "timeout"
    errors = recorder.of(ToolErrorEvent)
    assert {type(e.error) for e in errors} >= {KeyError, ToolTimeoutError}


async def test_queued_time_is_reported() -> None:
    recorder = RecordingHooks()
    executor = ToolExecutor(REGISTRY, hooks=recorder, max_concurrency=1)
    await executor.execute(
        [ToolCall("a", "sleepy", {"seconds": 0.05}), ToolCall("b", "sleepy", {"seconds": 0})],
    )
    queued = {e.call_id: e.queued_s for e in recorder.of(ToolEndEvent)}
    assert queued["a"] < 0.03 <= queued["b"]


async def test_composite_fans_out_in_order_and_isolates_a_failing_hook(caplog: Any) -> None:
    log: list[tuple[str, str]] = []

    class Broken(Hooks):
        def on_tool_end(self, event: ToolEndEvent) -> None:
            raise RuntimeError("hook bug")

    first, second = Named("first", log), Named("second", log)
    composite = CompositeHooks([first, Broken(), CompositeHooks([second, first])])
    assert composite.hooks == (first, composite.hooks[1], second)  # flattened, deduplicated
    executor = ToolExecutor(REGISTRY, hooks=composite)
    with caplog.at_level(logging.ERROR, logger="llmrtc"):
        results = await executor.execute([ToolCall("c", "sleepy", {"seconds": 0})])
    assert results[0].status == "ok"
    assert log == [("first", "start"), ("second", "start"), ("first", "end"), ("second", "end")]
    assert "Broken.on_tool_end raised" in caplog.text


async def test_per_batch_hooks_add_to_the_executors_without_calling_twice() -> None:
    own, extra = RecordingHooks(), RecordingHooks()
    executor = ToolExecutor(REGISTRY, hooks=own)
    await executor.execute(
        [ToolCall("c", "sleepy", {"seconds": 0})], hooks=CompositeHooks([own, extra])
    )
    assert len(own.of(ToolEndEvent)) == 1 and len(extra.of(ToolEndEvent)) == 1
    await executor.execute([ToolCall("d", "sleepy", {"seconds": 0})])
    assert (
        len(own.of(ToolEndEvent)) == 2 and len(extra.of(ToolEndEvent)) == 1
    )  # batch hooks were for one batch


async def test_a_slow_async_hook_is_bounded_and_logged(caplog: Any) -> None:
    class Slow(Hooks):
        hook_timeout = 0.05

        async def on_tool_end(self, event: ToolEndEvent) -> None:
            await anyio.sleep(10)

    executor = ToolExecutor(REGISTRY, hooks=Slow())
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="llmrtc"):
        results = await executor.execute(
            [ToolCall(str(i), "sleepy", {"seconds": 0}) for i in range(3)]
        )
    assert time.monotonic() - started < 2
    assert [r.status for r in results] == ["ok"] * 3
    assert "Slow.on_tool_end took longer than 0.05 s" in caplog.text


async def test_every_hook_has_returned_when_execute_returns() -> None:
    finished: list[str] = []

    class Lagging(Hooks):
        async def on_tool_end(self, event: ToolEndEvent) -> None:
            await anyio.sleep(0.02)
            finished.append(event.call_id)

    executor = ToolExecutor(REGISTRY, hooks=Lagging())
    calls = [ToolCall("a", "sleepy", {"seconds": 0}), ToolCall("b", "sleepy", {"seconds": 5})]
    async with abort_after(0.05, "stop") as controller:
        await executor.execute(calls, abort_signal=controller.signal)
        assert sorted(finished) == ["a", "b"]


async def test_hooks_run_in_the_callers_context() -> None:
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")
    seen: list[str] = []

    class ContextReader(Hooks):
        def on_tool_start(self, event: ToolStartEvent) -> None:
            seen.append(request_id.get("missing"))

        def on_tool_end(self, event: ToolEndEvent) -> None:
            seen.append(request_id.get("missing"))

    request_id.set("req-42")
    executor = ToolExecutor(REGISTRY, hooks=ContextReader())
    calls = [ToolCall(str(i), "sleepy", {"seconds": 0}) for i in range(3)]  # parallel tasks
    await executor.execute(calls)
    await executor.execute([ToolCall("x", "nope")])
    assert seen == ["req-42"] * 7


async def test_callbacks_are_a_convenience_on_the_same_mechanism() -> None:
    ended: list[ToolCallResult] = []
    errored: list[tuple[ToolCall, BaseException]] = []
    started: list[tuple[ToolCall, ToolContext]] = []

    async def on_start(call: ToolCall, ctx: ToolContext) -> None:
        started.append((call, ctx))

    executor = ToolExecutor(
        REGISTRY,
        on_tool_start=on_start,
        on_tool_end=ended.append,
        on_tool_error=lambda call, error: errored.append((call, error)),
    )
    calls = [ToolCall("a", "sleepy", '{"seconds": 0}'), ToolCall("b", "crash")]
    results = await executor.execute(calls)
    assert sorted(ended, key=lambda r: r.call_id) == results  # equal, field for field
    assert [c for c, _ in started] == calls  # the call as the model sent it
    assert errored[0][0] == calls[1] and isinstance(errored[0][1], KeyError)


@pytest.mark.usefixtures("log_correlation")
async def test_log_records_carry_the_call_id_in_sync_and_async_handlers(caplog: Any) -> None:
    @tool
    async def note() -> None:
        """Log something."""
        tool_logger.info("async note")

    executor = ToolExecutor(ToolRegistry([note, unlock]))
    with caplog.at_level(logging.INFO, logger="llmrtc"):
        await executor.execute(
            [ToolCall("n1", "note"), ToolCall("u1", "unlock", {"door": "front", "pin": "1234"})]
        )
    records = {r.getMessage(): r for r in caplog.records if r.name == tool_logger.name}
    assert records["async note"].call_id == "n1"  # type: ignore[attr-defined]
    assert records["unlocking front"].call_id == "u1"  # type: ignore[attr-defined]
    assert records["async note"].session_id is None  # type: ignore[attr-defined]


def test_correlation_filter_can_be_added_to_a_users_own_handler() -> None:
    from llmrtc.telemetry.correlation import current_session_id

    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    handler.addFilter(CorrelationFilter())
    app_logger = logging.getLogger("my_app")
    app_logger.addHandler(handler)
    token = current_session_id.set("sess-9")
    try:
        app_logger.warning("hello")
    finally:
        current_session_id.reset(token)
        app_logger.removeHandler(handler)
    assert records[0].session_id == "sess-9"  # type: ignore[attr-defined]


async def test_emit_calls_only_overriding_hooks() -> None:
    calls: list[str] = []

    class OnlyBargeIn(Hooks):
        def on_barge_in(self, event: Any) -> None:
            calls.append(threading.current_thread().name)

    chosen = listeners([OnlyBargeIn(), Hooks()], BargeInEvent)
    assert len(chosen) == 1
    assert listeners([OnlyBargeIn()], ToolEndEvent) == ()
    await emit(chosen, BargeInEvent())
    assert calls == [threading.current_thread().name]


def test_composite_rejects_non_hooks() -> None:
    with pytest.raises(TypeError, match="Hooks instance"):
        CompositeHooks([object()])  # type: ignore[list-item]


async def test_sensitive_fields_reach_the_events() -> None:
    recorder = RecordingHooks()
    registry = ToolRegistry(
        [define_tool(ToolDefinition("pay", sensitive_fields=["card"]), lambda a, c: 1)]
    )
    await ToolExecutor(registry, hooks=recorder).execute([ToolCall("p", "pay")])
    assert recorder.of(ToolStartEvent)[0].sensitive_fields == ("card",)
    assert recorder.of(ToolEndEvent)[0].sensitive_fields == ("card",)


async def test_each_combined_hook_keeps_its_own_time_limit(caplog: Any) -> None:
    finished: list[str] = []

    class Patient(Hooks):
        hook_timeout = 2.0

        async def on_tool_end(self, event: ToolEndEvent) -> None:
            await anyio.sleep(0.2)
            finished.append("patient")

    class Hasty(Hooks):
        hook_timeout = 0.05

        async def on_tool_end(self, event: ToolEndEvent) -> None:
            await anyio.sleep(0.2)
            finished.append("hasty")

    executor = ToolExecutor(REGISTRY, hooks=CompositeHooks([Hasty(), Patient()]))
    with caplog.at_level(logging.WARNING, logger="llmrtc"):
        await executor.execute_single(ToolCall("c", "sleepy", {"seconds": 0}))
    assert finished == ["patient"]  # the hasty one was cut at 0.05 s, the patient one was not
    assert "Hasty.on_tool_end took longer than 0.05 s" in caplog.text


def test_a_composite_enters_each_hooks_tool_call_context_in_order() -> None:
    log: list[str] = []

    class Around(Hooks):
        def __init__(self, name: str, swallow: bool = False) -> None:
            self.name, self.swallow = name, swallow

        def tool_call_context(self, event: ToolStartEvent) -> Any:
            hook = self

            class Context:
                def __enter__(self) -> None:
                    log.append(f"enter {hook.name}")

                def __exit__(self, *exc_info: Any) -> bool:
                    log.append(f"exit {hook.name} {exc_info[0].__name__ if exc_info[0] else ''}")
                    return hook.swallow  # a context that would swallow the handler's error

            return Context()

    event = ToolStartEvent(execution_id="x1", call_id="c1", tool_name="t")
    assert CompositeHooks([RecordingHooks(), Hooks()]).tool_call_context(event) is None
    composite = CompositeHooks([Around("a"), RecordingHooks(), Around("b", swallow=True)])
    context = composite.tool_call_context(event)
    assert context is not None
    with pytest.raises(KeyError), context:
        log.append("handler")
        raise KeyError("handler failed")
    assert log == ["enter a", "enter b", "handler", "exit b KeyError", "exit a KeyError"]


def test_a_tool_call_context_that_raises_is_logged_and_skipped(caplog: Any) -> None:
    entered: list[str] = []

    class Asks(Hooks):
        def tool_call_context(self, event: ToolStartEvent) -> Any:
            raise RuntimeError("bug asking")

    class Enters(Hooks):
        def tool_call_context(self, event: ToolStartEvent) -> Any:
            class Context:
                def __enter__(self) -> None:
                    raise RuntimeError("bug entering")

                def __exit__(self, *exc_info: Any) -> None:
                    entered.append("exit of a context never entered")

            return Context()

    class Leaves(Hooks):
        def tool_call_context(self, event: ToolStartEvent) -> Any:
            class Context:
                def __enter__(self) -> None:
                    entered.append("fine")

                def __exit__(self, *exc_info: Any) -> None:
                    raise RuntimeError("bug leaving")

            return Context()

    event = ToolStartEvent(execution_id="x1", call_id="c1", tool_name="t")
    context = CompositeHooks([Asks(), Enters(), Leaves()]).tool_call_context(event)
    assert context is not None
    with caplog.at_level(logging.ERROR, logger="llmrtc"), context:
        entered.append("handler")
    assert entered == ["fine", "handler"]
    assert "Asks.tool_call_context raised" in caplog.text
    assert "Enters.tool_call_context raised on enter" in caplog.text
    assert "Leaves.tool_call_context raised on exit" in caplog.text
