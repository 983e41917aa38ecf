"""What a `CompatProfile` changes: retry without tools, continuing a cut answer by prefill,
plain answers without tools, and call-shaped JSON never reaching the user in any request."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from llmrtc import ToolDefinition
from llmrtc.llm import (
    CompatProfile,
    LLMError,
    LLMRequest,
    LLMTextDelta,
    LLMToolCall,
    OpenAIProvider,
    RetryPolicy,
    SystemMessage,
    UserMessage,
)
from llmrtc.llm.local import LLAMA_CPP_PROFILE, PLAIN_ANSWER_HINT, TOOL_HINT, qwen_tool_prompt
from llmrtc.testing import ScriptedOpenAIServer, StreamReply, chunk, text_reply

pytestmark = pytest.mark.anyio

WEATHER = ToolDefinition(
    "lookupWeather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
MESSAGES = [SystemMessage("You are a weather bot."), UserMessage("Is it raining in Oslo?")]
UNCONSTRAINED = dataclasses.replace(LLAMA_CPP_PROFILE, grammar=False, route_tools=False)
"""The local profile on a server without a grammar: what the model writes reaches the parser."""


def provider(server: ScriptedOpenAIServer, **options: Any) -> OpenAIProvider:
    options.setdefault("retry", RetryPolicy(max_retries=0))
    return OpenAIProvider("m", base_url=server.base_url, api_key="test", **options)


def failing_after(*texts: str) -> StreamReply:
    """Text chunks, then llama.cpp's error event inside the stream."""
    return StreamReply(
        [
            *(chunk(content=text) for text in texts),
            {"error": {"message": "does not match the expected peg-native format"}},
        ]
    )


def text_of(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, LLMTextDelta))


async def test_an_answer_cut_by_a_server_error_is_continued_without_repeating_words() -> None:
    replies = [failing_after("To check, ", "I would "), text_reply("look it up. It rains.")]
    compat = CompatProfile(retry_without_tools=True, continue_after_stream_error=True)
    async with ScriptedOpenAIServer(replies) as server:
        request = LLMRequest(MESSAGES, tools=[WEATHER])
        events = [e async for e in provider(server, compat=compat).stream(request)]
        first, second = (r.body for r in server.requests)
    assert text_of(events) == "To check, I would look it up. It rains."  # each word once
    assert "tools" in first and "tools" not in second
    assert second["messages"][-1] == {"role": "assistant", "content": "To check, I would "}
    assert events[-1].stop_reason == "stop"


async def test_without_continuation_an_error_after_text_is_a_one_line_llm_error() -> None:
    compat = CompatProfile(retry_without_tools=True)
    async with ScriptedOpenAIServer([failing_after("Sure, ")]) as server:
        with pytest.raises(LLMError) as info:
            async for _ in provider(server, compat=compat).stream(LLMRequest(MESSAGES, [WEATHER])):
                pass
    message = str(info.value)
    assert "\n" not in message and "peg-native" in message and server.base_url in message


@pytest.mark.parametrize(
    "answer",
    [
        '{"name": "issue_report", "arguments": {"summary": "bill"}}',
        'Here:\n```json\n{\n  "name": "openweathermap",\n  "arguments": {"q": "tokyo", '
        '"appid": "YOUR_API_KEY"}\n}\n```',
        '```\n{"type": "function", "function": {"name": "x", "arguments": {}}}\n```',
    ],
    ids=["bare-no-tools", "fenced-undeclared", "fenced-openai-shape"],
)
@pytest.mark.parametrize("tools", [[], [WEATHER]], ids=["no-tools", "tools"])
async def test_call_shaped_json_naming_no_declared_tool_is_never_text(
    answer: str, tools: list[ToolDefinition]
) -> None:
    async with ScriptedOpenAIServer([text_reply(answer, pieces=5)]) as server:
        llm = provider(server, tool_call_format="auto")
        events = [e async for e in llm.stream(LLMRequest(MESSAGES, tools=tools))]
    assert "{" not in text_of(events) and "name" not in text_of(events)
    assert not [e for e in events if isinstance(e, LLMToolCall)]


async def test_tool_choice_none_sends_no_tools_drops_calls_and_asks_for_plain_words() -> None:
    # Without a grammar (with one, tests/llm/test_grammar.py: the prompt stays, prose only).
    answer = '{"name": "lookupWeather", "arguments": {"city": "Oslo"}}'
    async with ScriptedOpenAIServer([text_reply(answer)]) as server:
        llm = provider(server, tool_call_format="text", compat=UNCONSTRAINED)
        request = LLMRequest(MESSAGES, tools=[WEATHER], tool_choice="none")
        events = [e async for e in llm.stream(request)]
        body = server.requests[0].body
    assert "tools" not in body
    system = body["messages"][0]["content"]
    assert system.endswith(PLAIN_ANSWER_HINT) and "lookupWeather" not in system
    assert not [e for e in events if isinstance(e, LLMToolCall)] and text_of(events) == ""


async def test_the_local_profile_writes_tools_in_qwen_words_after_the_hint() -> None:
    # The profile routes first (tests/llm/test_tool_routing.py): the answer is the 2nd request.
    async with ScriptedOpenAIServer([text_reply("none"), text_reply("ok")]) as server:
        llm = provider(server, tool_call_format="text", compat=LLAMA_CPP_PROFILE)
        [_ async for _ in llm.stream(LLMRequest(MESSAGES, tools=[WEATHER]))]
        body = server.requests[1].body
    assert "tools" not in body  # the server never parses a call, so it cannot fail on one
    assert body["messages"][0]["content"] == "\n\n".join(
        ["You are a weather bot.", TOOL_HINT, qwen_tool_prompt([WEATHER])]
    )


async def test_a_fenced_pretty_printed_call_after_text_runs_as_a_call() -> None:
    answer = (
        "To determine if it is raining in Oslo, here is the call:\n\n```json\n{\n"
        '  "name": "lookupWeather",\n  "arguments": {\n    "city": "Oslo"\n  }\n}\n```'
    )
    # What a model writes when nothing constrains it (a server without a grammar).
    async with ScriptedOpenAIServer([text_reply(answer, pieces=9)]) as server:
        llm = provider(server, tool_call_format="text", compat=UNCONSTRAINED)
        events = [e async for e in llm.stream(LLMRequest(MESSAGES, tools=[WEATHER]))]
    (call,) = [e.call for e in events if isinstance(e, LLMToolCall)]
    assert (call.name, call.arguments) == ("lookupWeather", {"city": "Oslo"})
    assert "```" not in text_of(events) and "{" not in text_of(events)
