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


async def test_a_duck_typed_observer_gets_the_hooks_it_defines() -> None:
    # ModelPool(hooks=...) took any object with `on_model_fallback` before there was one
    # dispatcher: such an observer still works, and one without the hook is simply skipped.
    from llmrtc.catalog.llm_tools import ModelPreference, define_llm_tool
    from llmrtc.catalog.llm_tools.model_pool import ModelPool
    from llmrtc.execution import ToolExecutor
    from llmrtc.testing import ScriptedLLM, ScriptedResponse
    from llmrtc.tools import ToolCall, ToolRegistry

    seen: list[Any] = []

    class Duck:
        def on_model_fallback(self, event: Any) -> None:
            seen.append((event.failed_model, event.next_model))

    summarize = define_llm_tool(
        id="util:summarize@1.0.0",
        description="Summarize.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        system_prompt="Summarize.",
        user_template="{{text}}",
        model_preference=ModelPreference(preferred="a/m1", fallbacks=["b/m2"]),
    )
    first = ScriptedLLM([ScriptedResponse(error="HTTP 500")])
    second = ScriptedLLM(["Summary by m2."])
    pool = ModelPool({"a": lambda: first, "b": lambda: second}, hooks=Duck())  # type: ignore[arg-type]
    async with pool:
        executor = ToolExecutor(ToolRegistry([summarize]), models=pool)
        call = ToolCall("c1", summarize.definition.wire_name, {"text": "x"})
        (result,) = await executor.execute([call])
    assert result.status == "ok" and result.result == "Summary by m2."
    assert seen == [("a/m1", "b/m2")]
    await emit(Duck(), BargeInEvent())  # type: ignore[arg-type]  # no on_barge_in: skipped


async def test_none_in_a_sequence_of_hooks_is_skipped_without_a_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    got: list[Any] = []

    class Seen(Hooks):
        def on_barge_in(self, event: BargeInEvent) -> None:
            got.append(event)

    await emit([None, Seen()], BargeInEvent())  # type: ignore[list-item]
    assert len(got) == 1 and not caplog.records


async def test_a_hook_method_patched_onto_a_class_after_its_first_event_is_called() -> None:
    got: list[Any] = []

    class Late(Hooks):
        pass

    hooks = Late()
    await emit(hooks, BargeInEvent())
    Late.on_barge_in = lambda self, event: got.append(event)  # type: ignore[method-assign,assignment]
    await emit(hooks, BargeInEvent())
    assert len(got) == 1


def test_a_composites_hooks_are_fixed_at_construction() -> None:
    composite = CompositeHooks([Hooks()])
    with pytest.raises(AttributeError):
        composite.hooks = ()  # type: ignore[misc]
