"""`OpenAIProvider(tool_call_format="composed")`: the tools go as a composed `{calls, output}`
`response_format` (no native tool fields); the model's one JSON object becomes tool calls and
answer text, `output` streamed as it is written. Driven by the real `openai` client against
`ScriptedOpenAIServer`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmrtc.agent import TurnRunner
from llmrtc.execution import ToolExecutor
from llmrtc.llm import LLMRequest, SystemMessage, ToolMessage, UserMessage
from llmrtc.llm.openai_provider import OpenAIProvider
from llmrtc.llm.types import LLMDone, LLMTextDelta, LLMToolCall
from llmrtc.testing.openai_server import ScriptedOpenAIServer, text_reply
from llmrtc.tools import ToolDefinition, ToolRegistry, define_tool, tool

pytestmark = pytest.mark.anyio


@tool
async def lookupWeather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "conditions": "sunny"}


@tool(namespace="shop")
async def lookupOrder(order_id: str) -> str:
    """Status of an order."""
    return "shipped"


TOOLS = [lookupWeather.definition, lookupOrder.definition]


def provider(server: ScriptedOpenAIServer, **options: Any) -> OpenAIProvider:
    return OpenAIProvider(
        "scripted", base_url=server.base_url, api_key="t", tool_call_format="composed", **options
    )


def request(text: str, **options: Any) -> LLMRequest:
    return LLMRequest([SystemMessage("Be brief."), UserMessage(text)], tools=TOOLS, **options)


async def events_of(llm: OpenAIProvider, req: LLMRequest) -> list[Any]:
    return [event async for event in llm.stream(req)]


async def test_calls_come_back_as_tool_calls_and_no_native_fields_are_sent() -> None:
    answer = {
        "calls": [
            {"name": "lookupWeather", "arguments": {"city": "Oslo"}},
            {"name": "shop__lookupOrder", "arguments": {"order_id": "A1"}},
        ],
        "output": None,
    }
    async with ScriptedOpenAIServer([text_reply(json.dumps(answer), pieces=7)]) as server:
        events = await events_of(provider(server), request("Weather in Oslo, and my order?"))
    body = server.requests[0].body
    assert "tools" not in body and "tool_choice" not in body
    schema = body["response_format"]["json_schema"]["schema"]
    assert body["response_format"]["type"] == "json_schema"
    assert schema["anyOf"][0]["properties"]["output"] == {"type": "null"}
    assert '"name": "lookupWeather"' in body["messages"][0]["content"]  # the tools, in the prompt
    calls = [e.call for e in events if isinstance(e, LLMToolCall)]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [  # type: ignore[arg-type]
        ("lookupWeather", {"city": "Oslo"}),
        ("shop.lookupOrder", {"order_id": "A1"}),
    ]
    assert len({c.call_id for c in calls}) == 2
    assert not [e for e in events if isinstance(e, LLMTextDelta)]
    assert events[-1] == LLMDone("tool_calls", events[-1].usage, events[-1].model)


async def test_the_output_string_streams_as_text_while_it_is_written() -> None:
    said = 'It is "sunny" \u2014 enjoy \U0001f600!\nBye.'
    answer = json.dumps({"calls": [], "output": said})  # ASCII escapes: \u2014, surrogates
    async with ScriptedOpenAIServer([text_reply(answer, pieces=len(answer))]) as server:
        events = await events_of(provider(server), request("How is it?"))
    deltas = [e.text for e in events if isinstance(e, LLMTextDelta)]
    assert "".join(deltas) == said
    assert len(deltas) > 10  # streamed piece by piece, not at the end
    assert isinstance(events[-1], LLMDone) and events[-1].stop_reason == "stop"


async def test_an_object_output_is_given_as_json_text_at_the_end() -> None:
    schema = {"type": "object", "properties": {"summary": {"type": "string"}}}
    answer = json.dumps({"calls": [], "output": {"summary": "done"}})
    async with ScriptedOpenAIServer([text_reply(answer)]) as server:
        events = await events_of(provider(server, composed_output_schema=schema), request("?"))
    sent = server.requests[0].body["response_format"]["json_schema"]["schema"]
    assert sent["anyOf"][1]["properties"]["output"] == schema
    assert [e.text for e in events if isinstance(e, LLMTextDelta)] == ['{"summary": "done"}']


async def test_forcing_choices_leave_only_the_calls_branch() -> None:
    async with ScriptedOpenAIServer([text_reply("{}"), text_reply("{}")]) as server:
        llm = provider(server)
        await events_of(llm, request("x", tool_choice="required"))
        await events_of(llm, request("x", tool_choice={"name": "shop.lookupOrder"}))
    required = server.requests[0].body["response_format"]["json_schema"]["schema"]
    assert required["properties"]["calls"]["minItems"] == 1
    named = server.requests[1].body["response_format"]["json_schema"]["schema"]
    [only] = named["properties"]["calls"]["items"]["oneOf"]
    assert only["properties"]["name"] == {"const": "shop__lookupOrder"}


async def test_a_server_that_ignores_the_schema_is_read_as_text_calls() -> None:
    written = 'Sure. {"name": "lookupWeather", "arguments": {"city": "Rome"}}'
    async with ScriptedOpenAIServer([text_reply(written)]) as server:
        events = await events_of(provider(server), request("Rome?"))
    calls = [e.call for e in events if isinstance(e, LLMToolCall)]
    assert [c.name for c in calls] == ["lookupWeather"]
    assert "".join(e.text for e in events if isinstance(e, LLMTextDelta)).strip() == "Sure."


async def test_an_invented_tool_is_passed_on_for_the_executor_to_refuse() -> None:
    # A server that does not constrain decoding let a call to an undeclared tool through: it
    # reaches the executor (status not_found, the model can correct itself), as native calls do.
    answer = json.dumps({"calls": [{"name": "rm_rf", "arguments": {}}], "output": None})
    done = json.dumps({"calls": [], "output": "Done."})
    replies = [text_reply(answer), text_reply(answer), text_reply(done)]
    async with ScriptedOpenAIServer(replies) as server:
        llm = provider(server)
        events = await events_of(llm, request("?"))
        assert [(e.call.name, e.call.arguments) for e in events if isinstance(e, LLMToolCall)] == [
            ("rm_rf", "{}")
        ]
        assert events[-1].stop_reason == "tool_calls"
        runner = TurnRunner(llm, ToolExecutor(ToolRegistry([lookupWeather])), system_prompt="Hi.")
        async for _ in runner.run_turn("?"):
            pass
    results = [m for m in runner.history.messages if isinstance(m, ToolMessage)]
    assert len(results) == 1 and "not_found" in results[0].content
    assert runner.history.messages[-1].content == "Done."


async def test_a_turn_with_a_latent_tool_in_the_composed_format() -> None:
    capital = define_tool(
        ToolDefinition(
            name="capital",
            description="The capital city of a country.",
            parameters={"type": "object", "properties": {"country": {"type": "string"}}},
            output_schema={"type": "string"},
        )
    )
    first = {"calls": [{"name": "capital", "arguments": {"country": "France", "_output": "Paris"}}]}
    replies = [
        text_reply(json.dumps({**first, "output": None})),
        text_reply("The capital of France is Paris."),  # no JSON object: read as text
    ]
    async with ScriptedOpenAIServer(replies) as server:
        llm = provider(server)
        runner = TurnRunner(llm, ToolExecutor(ToolRegistry([capital])), system_prompt="Hi.")
        events = [e async for e in runner.run_turn("Capital of France?")]
    assert events
    results = [m for m in runner.history.messages if isinstance(m, ToolMessage)]
    assert json.loads(results[0].content) == "Paris"
    schema = server.requests[0].body["response_format"]["json_schema"]["schema"]
    arguments = schema["anyOf"][0]["properties"]["calls"]["items"]["oneOf"][0]
    assert "_output" in arguments["properties"]["arguments"]["required"]
    # The result went back in the composed format's text form (a user turn, no tool role).
    assert all(m["role"] != "tool" for m in server.requests[1].body["messages"])
