"""`transcript_of`: the conversation a resumed page redraws (the `session` message's
`history`), read from the handler's typed history: per turn the user's line, one agent line
and the turn's tool calls with their status (issue 17 items 4-5 review)."""

from __future__ import annotations

import json

from llmrtc.agent.history import ConversationHistory
from llmrtc.llm.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from llmrtc.rtc._handlers import transcript_of
from llmrtc.rtc.messages import SessionMessage
from llmrtc.tools import ToolCall


class Agent:
    """A handler as far as `transcript_of` cares: something with a `.history`."""

    def __init__(self, *messages: object) -> None:
        self.history = ConversationHistory(messages=messages)  # type: ignore[arg-type]


def wire(handler: object) -> list[dict[str, object]]:
    """The history as the page receives it (JSON of the `session` message)."""
    message = SessionMessage(session_id="s", resume_token="t", history=list(transcript_of(handler)))
    return list(json.loads(message.model_dump_json())["history"])


def failure(status: str) -> str:
    return json.dumps({"error": "what went wrong", "status": status})


def test_a_lead_in_a_tool_call_and_the_answer_are_one_agent_line_then_the_tool() -> None:
    agent = Agent(
        SystemMessage("Be brief."),
        UserMessage("Weather in Tokyo?"),
        AssistantMessage("Let me check. ", [ToolCall("c1", "lookupWeather", {"city": "Tokyo"})]),
        ToolMessage("c1", '{"sky": "sunny"}'),
        AssistantMessage("It is sunny."),
    )
    assert wire(agent) == [
        {"role": "user", "text": "Weather in Tokyo?", "interrupted": False},
        {"role": "assistant", "text": "Let me check. It is sunny.", "interrupted": False},
        {"role": "tool", "name": "lookupWeather", "status": "ok"},
    ]


def test_tool_statuses_come_from_the_results_and_a_cut_part_marks_the_line() -> None:
    agent = Agent(
        UserMessage("Do three things"),
        AssistantMessage(
            "",
            [
                ToolCall("a", "nosuchtool", {}),
                ToolCall("b", "lookupWeather", {"city": 3}),
                ToolCall("c", "lookupWeather", {"city": "Oslo"}),
            ],
        ),
        ToolMessage("a", failure("not_found")),
        ToolMessage("b", failure("invalid_arguments")),
        # a result that merely has an "error" key is a result, not a failure
        ToolMessage("c", '{"error": "none", "status": "fine", "temp": 3}'),
        AssistantMessage("In Oslo it is", (), True),
        UserMessage("Stop"),
        AssistantMessage("", [ToolCall("d", "lookupWeather", {"city": "Rome"})]),
        ToolMessage("d", failure("aborted")),
    )
    assert wire(agent) == [
        {"role": "user", "text": "Do three things", "interrupted": False},
        {"role": "assistant", "text": "In Oslo it is", "interrupted": True},
        {"role": "tool", "name": "nosuchtool", "status": "not_found"},
        {"role": "tool", "name": "lookupWeather", "status": "invalid_arguments"},
        {"role": "tool", "name": "lookupWeather", "status": "ok"},
        {"role": "user", "text": "Stop", "interrupted": False},
        {"role": "tool", "name": "lookupWeather", "status": "aborted"},
    ]


def test_a_turn_the_agent_began_itself_is_a_line_of_its_own() -> None:
    agent = Agent(
        UserMessage("Hi"),
        AssistantMessage("Hello!"),
        AssistantMessage("Are you still there?"),  # a stage timeout's nudge: no user line
    )
    assert wire(agent) == [
        {"role": "user", "text": "Hi", "interrupted": False},
        {"role": "assistant", "text": "Hello!", "interrupted": False},
        {"role": "assistant", "text": "Are you still there?", "interrupted": False},
    ]


def test_a_handler_without_a_history_has_nothing_to_show() -> None:
    assert transcript_of(object()) == ()
