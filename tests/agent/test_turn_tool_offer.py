"""Offered == runnable: the tools a turn offers the model are the only ones that may run."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from llmrtc import ToolCall, ToolDefinition, ToolExecutor, ToolRegistry, define_tool, tool
from llmrtc.agent import ToolCallFinished, TurnRunner, TurnSettings
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

ran: list[str] = []


@tool
async def safe() -> str:
    """A harmless tool."""
    ran.append("safe")
    return "ok"


@tool
async def danger() -> str:
    """A tool this turn does not offer."""
    ran.append("danger")
    return "ok"


def results(events: list[Any]) -> dict[str, Any]:
    return {e.result.call_id: e.result for e in events if isinstance(e, ToolCallFinished)}


async def test_a_registered_tool_not_offered_never_runs_and_is_refused() -> None:
    ran.clear()
    llm = ScriptedLLM([[ToolCall("c1", "danger", {}), ToolCall("c2", "safe", {})], "Done."])
    runner = TurnRunner(
        llm, ToolExecutor(ToolRegistry([safe, danger])), system_prompt="s", tools=["safe"]
    )
    events = [e async for e in runner.run_turn("go")]
    assert [t.name for t in llm.requests[0].tools] == ["safe"]
    assert ran == ["safe"]  # danger never ran
    refused = results(events)["c1"]
    assert refused.status == "not_found"
    assert refused.error == "tool 'danger' is not available here; tools available: safe."
    assert results(events)["c2"].status == "ok"


async def test_changing_the_settings_changes_what_may_run_at_once() -> None:
    ran.clear()
    llm = ScriptedLLM(
        [[ToolCall("c1", "danger", {})], "Done.", [ToolCall("c2", "danger", {})], "Ok."]
    )
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([safe, danger])), system_prompt="s")
    runner.settings = replace(runner.settings, tools=("safe",))
    assert [e async for e in runner.run_turn("go")]
    assert ran == []
    runner.settings = replace(runner.settings, tools=None)  # every registered tool
    events = [e async for e in runner.run_turn("go")]
    assert ran == ["danger"] and results(events)["c2"].status == "ok"


async def test_extra_tools_are_offered_and_run_without_being_registered() -> None:
    async def handler(args: dict[str, Any], ctx: Any) -> str:
        ran.append("extra")
        return "moved"

    extra = define_tool(ToolDefinition("extra", "Only for these settings."), handler)
    ran.clear()
    registry = ToolRegistry([safe])
    llm = ScriptedLLM([[ToolCall("c1", "extra", {})], "Done."])
    settings = TurnSettings("s", tools=(), extra_tools=(extra,))
    runner = TurnRunner(llm, ToolExecutor(registry), settings=settings)
    events = [e async for e in runner.run_turn("go")]
    assert [t.name for t in llm.requests[0].tools] == ["extra"]
    assert ran == ["extra"] and results(events)["c1"].status == "ok"
    assert registry.names() == ["safe"]  # the registry was never touched
    with pytest.raises(TypeError, match="extra_tools"):
        TurnSettings("s", extra_tools=("extra",))  # type: ignore[arg-type]


async def test_a_stage_refusal_names_the_stage() -> None:
    llm = ScriptedLLM([[ToolCall("c1", "danger", {})], "Done."])
    runner = TurnRunner(
        llm, ToolExecutor(ToolRegistry([safe, danger])), system_prompt="s", tools=["safe"]
    )
    runner.stage_id = "billing"
    events = [e async for e in runner.run_turn("go")]
    assert results(events)["c1"].error == (
        "tool 'danger' is not available in stage 'billing'; tools available: safe."
    )


async def test_every_registered_tool_means_the_ones_registered_when_the_turn_starts() -> None:
    ran.clear()
    registry = ToolRegistry([safe])
    llm = ScriptedLLM([[ToolCall("c1", "danger", {})], "Done."])
    runner = TurnRunner(llm, ToolExecutor(registry), system_prompt="s")  # tools=None
    registry.register(danger)
    events = [e async for e in runner.run_turn("go")]
    assert [t.name for t in llm.requests[0].tools] == ["safe", "danger"]
    assert ran == ["danger"] and results(events)["c1"].status == "ok"


async def test_a_named_tool_unregistered_between_turns_is_neither_offered_nor_run() -> None:
    ran.clear()
    registry = ToolRegistry([safe, danger])
    llm = ScriptedLLM(["Hi.", [ToolCall("c1", "danger", {})], "Done."])
    runner = TurnRunner(llm, ToolExecutor(registry), system_prompt="s", tools=["safe", "danger"])
    assert [e async for e in runner.run_turn("hello")]
    registry.unregister("danger")  # e.g. a permission switched off mid-session
    events = [e async for e in runner.run_turn("go")]
    assert [t.name for t in llm.requests[1].tools] == ["safe"]
    assert ran == []
    assert results(events)["c1"].status == "not_found"


async def test_a_stage_change_after_a_tool_left_the_registry_does_not_raise() -> None:
    registry = ToolRegistry([safe, danger])
    llm = ScriptedLLM(["Hi."])
    runner = TurnRunner(llm, ToolExecutor(registry), system_prompt="s", tools=["safe", "danger"])
    registry.unregister("danger")
    runner.stage_id = "billing"  # only renames the scope: the settings were checked already
    assert runner.stage_id == "billing"
    assert [t.name for t in runner.tool_definitions()] == ["safe"]
    with pytest.raises(ValueError, match="unknown tools"):  # assigning settings stays strict
        runner.settings = replace(runner.settings, system_prompt="t")


async def test_a_forced_tool_that_left_the_registry_relaxes_to_auto_and_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = ToolRegistry([safe, danger])
    llm = ScriptedLLM(["Hi."])
    runner = TurnRunner(llm, ToolExecutor(registry), system_prompt="s", tools=["safe", "danger"])
    runner.settings = replace(runner.settings, tool_choice={"name": "danger"})
    registry.unregister("danger")
    events = [e async for e in runner.run_turn("go")]
    assert events[-1].stop_reason == "stop" and events[-1].text == "Hi."
    assert llm.requests[0].tool_choice == "auto"
    assert [t.name for t in llm.requests[0].tools] == ["safe"]
    assert "tool_choice forces 'danger', which is not offered" in caplog.text


async def test_a_required_choice_with_no_tools_left_relaxes_to_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = ToolRegistry([danger])
    llm = ScriptedLLM(["Hi."])
    runner = TurnRunner(
        llm, ToolExecutor(registry), system_prompt="s", tools=["danger"], tool_choice="required"
    )
    registry.unregister("danger")
    events = [e async for e in runner.run_turn("go")]
    assert events[-1].text == "Hi."
    assert llm.requests[0].tool_choice == "none" and not llm.requests[0].tools
    assert "tool_choice 'required' but no tools are offered" in caplog.text


async def test_a_tool_choice_naming_a_tool_not_offered_is_still_refused_when_assigned() -> None:
    runner = TurnRunner(
        ScriptedLLM([]), ToolExecutor(ToolRegistry([safe, danger])), system_prompt="s"
    )
    with pytest.raises(ValueError, match="tool_choice names 'danger'"):
        runner.settings = replace(runner.settings, tools=("safe",), tool_choice={"name": "danger"})
