"""`TurnHandler`: TurnRunner and PlaybookOrchestrator are both one, and behave as one."""

from __future__ import annotations

from typing import Any

import pytest

from llmrtc import ToolExecutor, ToolRegistry
from llmrtc.agent import (
    AgentEvent,
    ConversationHistory,
    StageChanged,
    TextDelta,
    TurnCompleted,
    TurnFailed,
    TurnHandler,
    TurnRunner,
)
from llmrtc.playbook import Playbook, PlaybookOrchestrator
from llmrtc.testing import ScriptedLLM, ScriptedResponse

pytestmark = pytest.mark.anyio

PLAYBOOK = Playbook.model_validate(
    {
        "id": "p",
        "initial_stage": "a",
        "stages": [{"id": "a"}, {"id": "b", "terminal": True}],
        "transitions": [
            {
                "id": "quiet",
                "from_stage": "a",
                "condition": {"type": "timeout", "seconds": 30},
                "action": {"target_stage": "b"},
            }
        ],
    }
)


def runner(script: list[Any]) -> TurnRunner:
    return TurnRunner(ScriptedLLM(script), ToolExecutor(ToolRegistry()), system_prompt="s")


def orchestrator(script: list[Any]) -> PlaybookOrchestrator:
    return PlaybookOrchestrator(PLAYBOOK, ScriptedLLM(script), ToolRegistry())


async def drive(handler: TurnHandler, text: str | None) -> list[AgentEvent]:
    """What a voice loop does: it only knows the protocol."""
    if text is None:
        return [event async for event in handler.run_timeout_turn()]
    return [event async for event in handler.run_turn(text)]


@pytest.mark.parametrize("make", [runner, orchestrator])
async def test_both_handlers_satisfy_the_protocol_and_answer_turns(make: Any) -> None:
    handler = make(["Hello there.", ScriptedResponse(error="HTTP 500"), "Again."])
    assert isinstance(handler, TurnHandler)
    assert isinstance(handler.history, ConversationHistory)
    events = await drive(handler, "hi")
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there."
    assert isinstance(events[-1], TurnCompleted)
    failed = await drive(handler, "and?")
    assert isinstance(failed[0], TurnFailed) and failed[-1].stop_reason == "error"  # type: ignore[union-attr]
    assert (await drive(handler, "again"))[-1].stop_reason == "stop"  # type: ignore[union-attr]
    assert len(handler.history) == 6


async def test_a_plain_runner_has_no_deadline_and_its_timeout_turn_is_empty() -> None:
    handler = runner([])
    assert handler.next_deadline() is None
    assert await drive(handler, None) == []
    assert len(handler.history) == 0


async def test_an_orchestrator_deadline_runs_its_timeout_turn_then_has_none() -> None:
    handler = orchestrator(["Are you still there?"])
    assert handler.next_deadline() is not None
    events = await drive(handler, None)
    assert isinstance(events[0], StageChanged) and events[0].conversation_ended
    assert isinstance(events[-1], TurnCompleted)
    assert handler.next_deadline() is None
    assert await drive(handler, None) == []


async def test_a_turn_can_carry_the_id_its_caller_chose() -> None:
    """A voice loop reports STT under an id before the turn starts; the turn keeps that id."""
    from llmrtc.telemetry.events import TurnStartEvent
    from llmrtc.testing import RecordingHooks, ScriptedLLM, ScriptedResponse

    hooks = RecordingHooks()
    runner = TurnRunner(
        ScriptedLLM([ScriptedResponse(text="Hi.")]),
        ToolExecutor(ToolRegistry()),
        system_prompt="Be brief.",
        hooks=hooks,
    )
    async for _ in runner.run_turn("hello", turn_id="turn_voice_1"):
        pass
    assert [e.turn_id for e in hooks.of(TurnStartEvent)] == ["turn_voice_1"]
