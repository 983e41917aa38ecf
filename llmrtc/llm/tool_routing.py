"""Tool routing for small models: a short constrained question decides whether the user's last
message needs one of the offered tools, and a call forced that way is kept only when its
arguments come from what the user said.

Why: the offline 1.5B model calls its tool for a first question, but once one answer in plain
words is in the history it goes on answering in plain words and *invents* the tool's result
("It is 10 degrees in Oslo"): measured on the weather playbook, 0 of 10 weather questions in
a conversation that began with "Hello?" were calls, in every prompt wording, tool-call format
and few-shot variant tried (benchmarks/tool_use.py `--conversation`). Asked separately, in a
prompt of its own with only the tools and the message, the same model recognises nearly every
request for a tool; what it gets wrong there are messages that do not give what the tool needs
("What's the weather?", "What can you do?"). So:

1. `route_request` asks the model which tool the message needs, answer constrained by a
   grammar to a tool name or "none" (a few tokens);
2. the answer request is then constrained to a call to that tool (the server's grammar);
3. `grounded` keeps that call only if each free-text argument it needs (a required string
   without an enum: a city, an order number) appears in the user's recent words; a call whose
   argument the model made up ("London" for "Hi there!") is dropped and the model answers
   freely, as without routing.

Only tools with such an argument are routed: a forced call with nothing to check (no required
free-text argument) could not be told from a made-up one, so those stay the model's own choice.
"""

from __future__ import annotations

import difflib
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Final

from llmrtc.llm.messages import SystemMessage, UserMessage
from llmrtc.llm.types import LLMRequest
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.validation import validate_tool_arguments

__all__ = [
    "NO_TOOL",
    "ROUTER_PROMPT",
    "answered_message",
    "chosen",
    "grounded",
    "recent_user_words",
    "required_free_text",
    "routable_tools",
    "router_grammar",
    "router_messages",
    "routes",
]

NO_TOOL: Final = "none"
"""The router's answer when the message needs no tool."""

ROUTER_PROMPT: Final = (
    "You route a voice assistant's requests. The assistant has these tools:\n{tools}\n"
    "Reply with the name of the tool the user's message asks for, if it gives what the tool "
    "needs; otherwise reply none."
)
"""The router's system prompt ({tools}: one line per tool). Its wording decided the router's
recall in measurements: change it only with numbers (benchmarks/tool_use.py)."""

_USER_WINDOW: Final = 3
"""User messages a forced call's arguments may come from: the last and the two before it
("What's the weather in Oslo?" ... "and tomorrow?")."""

_MATCH: Final = 0.8
"""How close a word of an argument must be to a word the user said (difflib ratio): "Tokio"
is Tokyo, a speech recogniser's "Osloh" is Oslo."""


def _free_text(schema: Mapping[str, Any]) -> bool:
    return schema.get("type") == "string" and "enum" not in schema and "const" not in schema


def required_free_text(tool: ToolDefinition) -> list[str]:
    """The tool's required string parameters without an enum: what a user must say."""
    params = tool.parameters
    assert isinstance(params, Mapping)  # a ToolDefinition's parameters are a schema dict
    properties = params.get("properties", {})
    return [
        name
        for name in params.get("required", ())
        if isinstance(properties.get(name), Mapping) and _free_text(properties[name])
    ]


def routable_tools(tools: Sequence[ToolDefinition]) -> list[ToolDefinition]:
    """The offered tools the router may force: those with a required free-text argument."""
    return [tool for tool in tools if required_free_text(tool)]


def answered_message(request: LLMRequest) -> UserMessage | None:
    """The user's message `request` answers: its last message, or the last before the system
    messages that follow it (a playbook's stage change appends one after the user's words,
    and the new stage answers them). None when the request answers tool results."""
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            return message
        if not isinstance(message, SystemMessage):
            return None
    return None


def routes(request: LLMRequest) -> list[ToolDefinition]:
    """The tools to route `request` over: none unless the model is free to choose a tool
    (tool_choice "auto", no response_format) and the request answers a user's message with
    words in it (not tool results)."""
    if request.tool_choice != "auto" or request.response_format:
        return []  # forced, or constrained by a schema: nothing for a router to decide
    message = answered_message(request)
    if message is None or not _words(message.content):
        return []
    return routable_tools(request.tools)


def _describe(tool: ToolDefinition) -> str:
    params = tool.parameters
    assert isinstance(params, Mapping)
    properties = params.get("properties", {})
    needs = ", ".join(
        f"{name} ({properties[name].get('description', name)})"
        if properties[name].get("description")
        else name
        for name in required_free_text(tool)
    )
    return f"- {tool.wire_name}: {tool.description.strip() or tool.name}. Needs: {needs}."


def router_messages(tools: Sequence[ToolDefinition], message: str) -> list[dict[str, str]]:
    """The router's request: the tools, then the user's message alone (no history: in a long
    conversation the small model reads its own earlier answers as the pattern to follow)."""
    lines = "\n".join(_describe(tool) for tool in tools)
    return [
        {"role": "system", "content": ROUTER_PROMPT.format(tools=lines)},
        {"role": "user", "content": message},
    ]


def router_grammar(tools: Sequence[ToolDefinition]) -> str:
    """The router's answer: one of the tools' wire names, or `NO_TOOL`."""
    names = [json.dumps(tool.wire_name) for tool in tools] + [json.dumps(NO_TOOL)]
    return "root ::= " + " | ".join(names)


def chosen(tools: Sequence[ToolDefinition], answer: str) -> ToolDefinition | None:
    """The tool the router's answer names, or None (`NO_TOOL`, or anything else)."""
    answer = answer.strip()
    return next((tool for tool in tools if tool.wire_name == answer), None)


_WORD = re.compile(r"[^\W_]+")


def _normal(text: str) -> str:
    """Compatibility-composed and case-folded: "Zürich" typed or recognised either way,
    full-width digits, ligatures compare equal."""
    return unicodedata.normalize("NFKC", text).casefold()


def _words(text: str) -> list[str]:
    return _WORD.findall(_normal(text))


_NUMBER_WORDS = {
    word: str(number)
    for number, word in enumerate(
        (
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
        )
    )
}
"""Numbers as people say them (and STT writes them): "at eight" grounds a time "8 pm"."""
_CLOCK = re.compile(r"(?<=\d)(?::00)?\s*(?:[ap]\.?\s?m\b\.?|o'?\s?clock\b|h\b)|:00\b")
"""What the model adds to a time the user said as a bare number ("8" → "8 pm", "8:00",
"8 o'clock"): a qualifier, as "Norway" is in "Oslo, Norway"."""


def _said(value: str, heard: list[str]) -> bool:
    """Whether `value` is something the user said: every word of it close to a word they
    said, or (scripts written without spaces: "東京" in "東京の天気は") contained in what
    they said. What follows a comma is the model's qualifier ("Oslo, Norway"), as is a
    clock's "pm", ":00" or "o'clock" after a number: only the rest must have been said; a
    number said in words ("eight") is its digits."""
    head = _CLOCK.sub(" ", _normal(value).split(",")[0])
    words = [_NUMBER_WORDS.get(word, word) for word in _words(head)]
    heard = heard + [_NUMBER_WORDS[word] for word in heard if word in _NUMBER_WORDS]
    if not words:
        return False
    if all(
        any(difflib.SequenceMatcher(None, word, h).ratio() >= _MATCH for h in heard)
        for word in words
    ):
        return True
    return "".join(words) in "".join(heard)


def recent_user_words(request: LLMRequest) -> list[str]:
    """The words of the user's last few messages (since the last of them, the model's own
    earlier answers do not count: an argument it took from there, it may have made up).
    System messages after the last of them (a stage change) are passed over; one before it
    starts a new stage, and the user's words before it do not count."""
    texts: list[str] = []
    for message in reversed(request.messages):
        if isinstance(message, UserMessage):
            texts.append(message.content)
            if len(texts) == _USER_WINDOW:
                break
        elif isinstance(message, SystemMessage) and texts:
            break  # the start of the stage the user's last words were said in
    return [word for text in texts for word in _words(text)]


def grounded(call: ToolCall, tool: ToolDefinition, request: LLMRequest) -> bool:
    """Whether a forced `call` is one to keep: its arguments valid for the tool (the
    executor's own check: a forced call the model could not fill is not its decision), and
    every required free-text argument something the user said (word by word, misspellings
    within `_MATCH`)."""
    checked = validate_tool_arguments(tool, call.arguments)
    if not checked.valid or not isinstance(checked.arguments, Mapping):
        return False
    arguments: Mapping[str, Any] = checked.arguments
    heard = recent_user_words(request)
    for name in required_free_text(tool):
        value = arguments.get(name)
        if not isinstance(value, str) or not _said(value, heard):
            return False
    return True
