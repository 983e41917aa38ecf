"""The app changes the tool registry mid-session (e.g. a permission switched off): stage changes
and turns go on, offering what is left."""

from __future__ import annotations

from typing import Any

import pytest

from llmrtc import ToolCall, ToolRegistry, tool
from llmrtc.agent import TurnCompleted
from llmrtc.playbook import Playbook, PlaybookOrchestrator, StageChanged
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio


@tool
async def note(text: str) -> str:
    """Take a note.

    Args:
        text: What to note.
    """
    return f"noted {text}"


@tool
async def finish() -> str:
    """Finish the task."""
    return "finished"


def two_stages() -> Playbook:
    return Playbook.model_validate(
        {
            "id": "p",
            "initial_stage": "a",
            "stages": [
                {"id": "a", "tools": ["note"]},
                {"id": "b", "tools": ["finish"], "system_prompt": "In B."},
            ],
            "transitions": [
                {
                    "id": "a-b",
                    "from_stage": "a",
                    "condition": {"type": "llm_decision", "description": "the user wants B"},
                    "action": {"target_stage": "b"},
                }
            ],
        }
    )


def offered(request: Any) -> list[str]:
    return [t.name for t in request.tools]


async def test_moving_on_after_the_stages_tool_left_the_registry_completes_the_turn() -> None:
    registry = ToolRegistry([note, finish])
    move = ToolCall("t1", "playbook_transition", {"target_stage": "b"})
    llm = ScriptedLLM(["Hello.", [move], "Now in B.", "Still B."])
    orchestrator = PlaybookOrchestrator(two_stages(), llm, registry)
    assert [e async for e in orchestrator.run_turn("hi")]
    registry.unregister("note")  # stage a's only tool

    events = [e async for e in orchestrator.run_turn("take me to B")]
    assert [(e.from_stage, e.to_stage) for e in events if isinstance(e, StageChanged)] == [
        ("a", "b")
    ]
    assert isinstance(events[-1], TurnCompleted) and events[-1].stop_reason != "error"
    assert "Now in B." in events[-1].text
    # fully switched: the engine, the runner's stage and its settings all say b
    assert orchestrator.engine.current_stage.id == "b"
    assert orchestrator.runner.stage_id == "b"
    assert orchestrator.runner.tools == ("finish",)
    assert offered(llm.requests[1]) == ["playbook_transition"]  # a, without note
    assert "finish" in offered(llm.requests[2])  # b's answer is made in b

    events = [e async for e in orchestrator.run_turn("and now?")]
    assert events[-1].text == "Still B."
    assert offered(llm.requests[3])[0] == "finish"


async def test_moving_into_a_stage_whose_tool_left_the_registry_completes_the_turn() -> None:
    registry = ToolRegistry([note, finish])
    move = ToolCall("t1", "playbook_transition", {"target_stage": "b"})
    llm = ScriptedLLM(["Hello.", [move], "Now in B."])
    orchestrator = PlaybookOrchestrator(two_stages(), llm, registry)
    assert [e async for e in orchestrator.run_turn("hi")]
    registry.unregister("finish")  # stage b's only tool

    events = [e async for e in orchestrator.run_turn("take me to B")]
    assert isinstance(events[-1], TurnCompleted) and events[-1].stop_reason != "error"
    assert orchestrator.engine.current_stage.id == "b"
    assert orchestrator.runner.stage_id == "b"
    assert orchestrator.runner.tools == ()
    assert offered(llm.requests[2]) == []
