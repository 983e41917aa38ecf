"""`emit(hooks, event)`: one dispatcher, choosing the hook by the event's type."""

from __future__ import annotations

from dataclasses import fields
from typing import Any, get_args

import pytest

import llmrtc.agent.events as stream_events
from llmrtc import CompositeHooks, Hooks
from llmrtc.agent.events import AgentEvent, TurnCompleted, TurnFailed
from llmrtc.telemetry import (
    HOOK_NAMES,
    BargeInEvent,
    ErrorEvent,
    HookEvent,
    ToolEndEvent,
    TurnStartEvent,
    emit,
    listeners,
)

pytestmark = pytest.mark.anyio


def test_every_hook_event_names_its_hook_one_to_one() -> None:
    hook_of = {kind: kind.hook for kind in get_args(HookEvent)}
    assert sorted(hook_of.values()) == sorted(HOOK_NAMES)  # a bijection onto Hooks.on_*
    assert all(kind.__name__.endswith("Event") for kind in hook_of)
    assert all("hook" not in {f.name for f in fields(kind)} for kind in hook_of)  # not a field


def test_no_stream_event_has_a_hook() -> None:
    kinds = get_args(AgentEvent)
    assert TurnFailed in kinds and TurnCompleted in kinds
    assert not hasattr(stream_events, "TurnError") and not hasattr(stream_events, "TurnEvent")
    assert all(not hasattr(kind, "hook") for kind in kinds)


async def test_emit_calls_the_hook_named_by_the_event_type() -> None:
    calls: list[tuple[str, Any]] = []

    class Recorder(Hooks):
        def on_barge_in(self, event: BargeInEvent) -> None:
            calls.append(("on_barge_in", event))

        async def on_turn_start(self, event: TurnStartEvent) -> None:
            calls.append(("on_turn_start", event))

    recorder = Recorder()
    barge, start = BargeInEvent(session_id="s"), TurnStartEvent(turn_id="t")
    await emit(recorder, barge)
    await emit(recorder, start)
    await emit(CompositeHooks([recorder, Hooks()]), barge)
    await emit(listeners(recorder, TurnStartEvent), start)
    await emit(None, barge)
    await emit(recorder, ToolEndEvent(execution_id="x", call_id="1", tool_name="t", status="ok"))
    assert calls == [
        ("on_barge_in", barge),
        ("on_turn_start", start),
        ("on_barge_in", barge),
        ("on_turn_start", start),
    ]


async def test_emit_refuses_what_is_not_a_hook_event() -> None:
    for not_an_event in (TurnFailed("boom", "LLMError"), TurnCompleted(""), object(), None):
        with pytest.raises(TypeError, match="not a hook event"):
            await emit(Hooks(), not_an_event)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a hook event"):
        listeners(Hooks(), TurnCompleted)  # type: ignore[arg-type]


def test_emit_to_hooks_overriding_nothing_returns_without_awaiting() -> None:
    class Quiet(Hooks):
        """Overrides no hook: its no-op methods are never called."""

        def __getattribute__(self, name: str) -> Any:
            if name.startswith("on_"):
                raise AssertionError(f"{name} was looked up")
            return super().__getattribute__(name)

    event = ErrorEvent(error=RuntimeError("x"), where="test")
    for hooks in (Quiet(), Hooks(), CompositeHooks([Quiet()]), ()):
        coroutine = emit(hooks, event)
        # One step runs it to the end: nothing was awaited, no hook was called.
        with pytest.raises(StopIteration):
            coroutine.send(None)
