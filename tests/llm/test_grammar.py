"""The text format's grammar on a server that honours one (`CompatProfile.grammar`): a call
or prose with tools, prose only when the answer must not call, and the prompt of the answer
after tool results byte-identical to the prompt of the request that called (the server's
prefix cache keeps it)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from llmrtc import ToolDefinition
from llmrtc.llm import (
    AssistantMessage,
    CompatProfile,
    LLMRequest,
    OpenAIProvider,
    RetryPolicy,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from llmrtc.llm.grammar import PROSE_GRAMMAR, tool_call_grammar
from llmrtc.llm.local import LLAMA_CPP_PROFILE
from llmrtc.testing import ScriptedOpenAIServer, text_reply
from llmrtc.tools import ToolCall

pytestmark = pytest.mark.anyio

WEATHER = ToolDefinition(
    "lookupWeather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
ORDERS = ToolDefinition(
    "crm.lookup", "Look up an order.", {"type": "object", "properties": {}, "required": []}
)
ASKED = [SystemMessage("You are a weather bot."), UserMessage("Is it raining in Oslo?")]
CALL = ToolCall("c1", "lookupWeather", {"city": "Oslo"})
ANSWERED = [
    *ASKED,
    AssistantMessage("", tool_calls=(CALL,)),
    ToolMessage("c1", '{"temperature": 4, "conditions": "rainy"}'),
]
GRAMMAR = dataclasses.replace(LLAMA_CPP_PROFILE, grammar=True, route_tools=False)


def provider(server: ScriptedOpenAIServer, compat: CompatProfile, **options: Any) -> OpenAIProvider:
    options.setdefault("tool_call_format", "text")
    return OpenAIProvider(
        "m",
        base_url=server.base_url,
        api_key="test",
        retry=RetryPolicy(max_retries=0),
        compat=compat,
        **options,
    )


async def bodies(compat: CompatProfile, *requests: LLMRequest, **options: Any) -> list[Any]:
    async with ScriptedOpenAIServer([text_reply("ok") for _ in requests]) as server:
        llm = provider(server, compat, **options)
        for request in requests:
            [_ async for _ in llm.stream(request)]
        return [r.body for r in server.requests]


def test_the_call_grammar_names_only_the_offered_tools_in_their_wire_form() -> None:
    grammar = tool_call_grammar([WEATHER, ORDERS])
    assert grammar.startswith("root ::= call | prose\n")
    assert 'name ::= "\\"lookupWeather\\"" | "\\"crm__lookup\\""' in grammar
    assert tool_call_grammar(["x"], allow_prose=False).startswith("root ::= call\n")
    # Prose can never open or hold a call: no brace, no tag, no code.
    assert "prose ::= [^{<`] [^{<`]*" in PROSE_GRAMMAR
    with pytest.raises(ValueError, match="PROSE_GRAMMAR"):
        tool_call_grammar([])


async def test_a_request_with_tools_sends_the_call_or_prose_grammar() -> None:
    (body,) = await bodies(GRAMMAR, LLMRequest(ASKED, tools=[WEATHER]))
    assert body["grammar"] == tool_call_grammar([WEATHER])
    assert "tools" not in body


async def test_a_forcing_tool_choice_allows_only_the_call() -> None:
    forced = LLMRequest(ASKED, tools=[WEATHER, ORDERS], tool_choice={"name": "crm.lookup"})
    required = LLMRequest(ASKED, tools=[WEATHER], tool_choice="required")
    first, second = await bodies(GRAMMAR, forced, required)
    assert first["grammar"] == tool_call_grammar(["crm__lookup"], allow_prose=False)
    assert second["grammar"] == tool_call_grammar([WEATHER], allow_prose=False)


async def test_after_tool_results_the_prompt_is_unchanged_and_only_prose_is_allowed() -> None:
    call, answer = await bodies(
        GRAMMAR, LLMRequest(ASKED, tools=[WEATHER]), LLMRequest(ANSWERED, tools=[WEATHER])
    )
    assert answer["grammar"] == PROSE_GRAMMAR
    # The same system prompt and user turn: the server's cached prefix serves the answer.
    assert answer["messages"][: len(call["messages"])] == call["messages"]


async def test_without_the_grammar_the_answer_after_results_is_asked_without_tools() -> None:
    free = dataclasses.replace(LLAMA_CPP_PROFILE, grammar=False, route_tools=False)
    call, answer = await bodies(
        free, LLMRequest(ASKED, tools=[WEATHER]), LLMRequest(ANSWERED, tools=[WEATHER])
    )
    assert "grammar" not in call and "grammar" not in answer
    assert "lookupWeather" in call["messages"][0]["content"]
    assert "lookupWeather" not in answer["messages"][0]["content"]


@pytest.mark.parametrize("fmt", ["native", "auto", "composed"])
async def test_formats_the_server_parses_or_constrains_send_no_grammar(fmt: str) -> None:
    (body,) = await bodies(GRAMMAR, LLMRequest(ASKED, tools=[WEATHER]), tool_call_format=fmt)
    assert "grammar" not in body


async def test_a_request_without_tools_gets_no_grammar() -> None:
    # An LLM-backed tool's prompt may ask for JSON: prose-only would forbid it.
    (body,) = await bodies(GRAMMAR, LLMRequest(ASKED))
    assert "grammar" not in body


async def test_the_grammar_lets_the_model_call_a_routable_hidden_tool() -> None:
    # Review finding: a discovery catalog's hidden tools are calls the parser accepts; a
    # grammar naming only the offered tools made them impossible to write.
    request = LLMRequest(ASKED, tools=[WEATHER], routable_names=["crm.lookup"])
    (body,) = await bodies(GRAMMAR, request)
    assert body["grammar"] == tool_call_grammar(["lookupWeather", "crm__lookup"])


async def test_a_request_with_a_response_format_gets_no_grammar_beside_it() -> None:
    # Review finding: llama.cpp takes one constraint per request; the schema wins.
    schema = {"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object"}}}
    (body,) = await bodies(GRAMMAR, LLMRequest(ASKED, tools=[WEATHER], response_format=schema))
    assert "grammar" not in body and body["response_format"] == schema
