"""`Turn`: one turn run from the dependencies it is given, and a runner's configuration changed
mid-turn reaching the running turn from its next model request."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import (
    ConversationHistory,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnRunner,
    TurnSettings,
)
from llmrtc.agent.turn import BatchDecision, Turn
from llmrtc.llm import AssistantMessage, ToolMessage, UserMessage
from llmrtc.telemetry.events import TurnEndEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import ScriptedLLM
from llmrtc.testing.scripted import check_chat_messages

pytestmark = pytest.mark.anyio


@tool
async def lookup(city: str) -> dict[str, Any]:
    """Look a city up."""
    return {"city": city, "temp": 21}


REGISTRY = ToolRegistry([lookup])


async def test_a_turn_runs_from_the_dependencies_it_is_given() -> None:
    llm = ScriptedLLM([[ToolCall("c1", "lookup", {"city": "Oslo"})], "It is 21 degrees."])
    history = ConversationHistory()
    turn = Turn(
        llm,
        ToolExecutor(REGISTRY),
        history,
        settings=TurnSettings(system_prompt="You look things up."),
        tools=REGISTRY.scoped(["lookup"]),
        turn_id="turn_given",
    )
    events = [event async for event in turn.run("Weather in Oslo?")]
    assert [type(e) for e in events[:2]] == [ToolCallStarted, ToolCallFinished]
    assert "".join(e.text for e in events[2:] if isinstance(e, TextDelta)) == "It is 21 degrees."
    assert not any(isinstance(e, TurnCompleted) for e in events)  # completed() is the last one
    completed = turn.completed()
    assert completed == TurnCompleted(
        text="It is 21 degrees.",
        tool_results=completed.tool_results,
        usage=completed.usage,
        stop_reason="stop",
    )
    assert [r.status for r in completed.tool_results] == ["ok"]
    messages = history.messages
    assert messages[0] == UserMessage("Weather in Oslo?")
    assert isinstance(messages[1], AssistantMessage) and isinstance(messages[2], ToolMessage)
    assert messages[3] == AssistantMessage("It is 21 degrees.")
    check_chat_messages(list(history.for_request("s")))


async def test_settings_changed_after_a_batch_apply_from_the_next_request() -> None:
    ended: list[TurnEndEvent] = []

    class Record(Hooks):
        def on_turn_end(self, event: TurnEndEvent) -> None:
            ended.append(event)

    llm = ScriptedLLM([[ToolCall("c1", "lookup", {"city": "Oslo"})], "Billing here."])
    runner = TurnRunner(llm, ToolExecutor(REGISTRY), system_prompt="Front desk.", hooks=Record())
    during: list[str | None] = []

    async def after_batch(calls: list[ToolCall], results: list[Any]) -> BatchDecision:
        during.append(runner.current_turn_id)
        runner.stage_id = "billing"  # what a playbook transition does
        runner.settings = replace(runner.settings, system_prompt="Billing desk.", tools=())
        return BatchDecision()

    seen_at_end: list[str | None] = []
    async for event in runner.run_turn("hi", after_batch=after_batch, turn_id="turn_7"):
        if isinstance(event, TurnCompleted):
            seen_at_end.append(runner.current_turn_id)
    assert during == ["turn_7"] and seen_at_end == [None]
    first, second = llm.requests
    assert first.messages[0].content == "Front desk." and [t.name for t in first.tools] == [
        "lookup"
    ]
    assert second.messages[0].content == "Billing desk." and second.tools == []
    assert [(e.turn_id, e.stage_id) for e in ended] == [("turn_7", "billing")]
