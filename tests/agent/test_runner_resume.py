"""TurnRunner as a ResumableHandler: snapshot, a JSON round trip, restore on a new runner from
the same factory, and the next turn continues the conversation (ScriptedLLM checks the
history a chat API would get); malformed states are refused without changing anything."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import ResumableHandler, TurnCompleted, TurnHandler, TurnRunner
from llmrtc.agent.history import ConversationHistory
from llmrtc.llm import AssistantMessage, ToolMessage, UserMessage
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio


@tool
async def lookup_weather(city: str) -> dict[str, Any]:
    """The current weather.

    Args:
        city: The city.
    """
    return {"city": city, "sky": "sunny", "celsius": 21}


def factory(llm: ScriptedLLM, *, max_messages: int = 50) -> TurnRunner:
    registry = ToolRegistry([lookup_weather])
    return TurnRunner(
        llm,
        ToolExecutor(registry),
        system_prompt="You answer weather questions.",
        history=ConversationHistory(max_messages=max_messages),
    )


async def turn(handler: TurnHandler, text: str) -> TurnCompleted:
    events = [event async for event in handler.run_turn(text)]
    last = events[-1]
    assert isinstance(last, TurnCompleted)
    return last


def weather_call(call_id: str, city: str) -> ToolCall:
    return ToolCall(call_id, "lookup_weather", {"city": city})


async def test_a_restored_runner_continues_the_conversation_with_its_tool_calls() -> None:
    first = factory(ScriptedLLM([[weather_call("c1", "Tokyo")], "Sunny in Tokyo, 21 degrees."]))
    assert isinstance(first, ResumableHandler)
    await turn(first, "Weather in Tokyo?")
    state = json.loads(json.dumps(first.snapshot()))
    assert state["playbook"] is None

    llm = ScriptedLLM([[weather_call("c2", "Oslo")], "Oslo is sunny too."])
    second = factory(llm)
    second.restore(state)
    done = await turn(second, "And Oslo?")
    assert done.stop_reason == "stop" and done.text == "Oslo is sunny too."
    sent = llm.requests[0].messages[1:]  # after the system prompt
    assert [type(m) for m in sent] == [
        UserMessage,
        AssistantMessage,
        ToolMessage,
        AssistantMessage,
        UserMessage,
    ]
    assert sent[0] == UserMessage("Weather in Tokyo?")
    assert isinstance(sent[1], AssistantMessage) and sent[1].tool_calls[0].call_id == "c1"
    assert isinstance(sent[2], ToolMessage) and json.loads(sent[2].content)["city"] == "Tokyo"
    assert sent[3] == AssistantMessage("Sunny in Tokyo, 21 degrees.")
    assert sent[4] == UserMessage("And Oslo?")
    llm.assert_consumed()
    # the restored history keeps going: the next snapshot has both turns
    assert len(second.snapshot()["history"]["messages"]) == 8


async def test_the_new_runner_keeps_its_own_history_limit() -> None:
    first = factory(ScriptedLLM(["One.", "Two.", "Three."]))
    for text in ("a", "b", "c"):
        await turn(first, text)
    second = factory(ScriptedLLM([]), max_messages=4)
    second.restore(first.snapshot())
    assert second.history.max_messages == 4
    assert second.history.messages == (
        UserMessage("b"),
        AssistantMessage("Two."),
        UserMessage("c"),
        AssistantMessage("Three."),
    )


async def test_a_state_without_history_leaves_a_fresh_runner() -> None:
    runner = factory(ScriptedLLM(["Hi."]))
    runner.restore({"history": None, "playbook": None})
    runner.restore({})
    assert len(runner.history) == 0
    await turn(runner, "Hello")


BROKEN = [
    ("not a dict", "must be a mapping"),
    ({"history": {}, "playbook": None}, "'messages' list"),
    ({"history": {"messages": [{"role": "wizard"}]}}, "malformed message"),
    ({"history": {"messages": []}, "extra": 1}, "unknown keys ['extra']"),
    ({"history": None, "playbook": "support"}, "'playbook' must be a PlaybookEngine snapshot"),
    (
        {"history": {"messages": [{"role": "tool", "call_id": "x", "content": "{}"}]}},
        "answers tool call 'x'",
    ),
    (
        {
            "history": {
                "messages": [
                    {"role": "user", "content": "Hi"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"call_id": "c1", "name": "lookup_weather"}],
                    },
                    {"role": "user", "content": "Hello?"},
                ]
            }
        },
        "tool calls ['c1'] have no tool message",
    ),
    (
        {"history": {"messages": []}, "playbook": {"playbook_id": "support"}},
        "playbook 'support'",
    ),
]


@pytest.mark.parametrize(("state", "message"), BROKEN)
async def test_a_malformed_state_is_refused_and_changes_nothing(state: Any, message: str) -> None:
    first = factory(ScriptedLLM(["Hello."]))
    await turn(first, "Hi")
    runner = factory(ScriptedLLM(["Fresh."]))
    with pytest.raises(ValueError, match="handler state") as caught:
        runner.restore(state)
    assert message in str(caught.value)
    assert len(runner.history) == 0
    await turn(runner, "Hi")


async def test_restore_after_a_turn_is_a_programming_error() -> None:
    runner = factory(ScriptedLLM(["Hello."]))
    saved = runner.snapshot()
    await turn(runner, "Hi")
    with pytest.raises(RuntimeError, match="before the first turn"):
        runner.restore(saved)
