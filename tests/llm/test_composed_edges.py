"""Composed format edge cases (review R12): a server that ignores the schema (a code fence or a
preamble around the composed object), an object cut short, an empty object, a request's own
`response_format`, and a server without `response_format`. Real `openai` client against
`ScriptedOpenAIServer`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmrtc.agent import TurnRunner
from llmrtc.execution import ToolExecutor
from llmrtc.llm import LLMRequest, SystemMessage, UserMessage
from llmrtc.llm.compat import CompatProfile
from llmrtc.llm.formats.composed import composed_response_format
from llmrtc.llm.openai_provider import OpenAIProvider
from llmrtc.llm.types import LLMDone, LLMTextDelta, LLMToolCall
from llmrtc.testing.openai_server import ScriptedOpenAIServer, text_reply
from llmrtc.tools import ToolRegistry, tool

pytestmark = pytest.mark.anyio


@tool
async def lookupWeather(city: str) -> dict[str, Any]:
    """Current weather for a city."""
    return {"city": city, "conditions": "sunny"}


TOOLS = [lookupWeather.definition]
CALL = {"calls": [{"name": "lookupWeather", "arguments": {"city": "Rome"}}], "output": None}


def provider(server: ScriptedOpenAIServer, **options: Any) -> OpenAIProvider:
    return OpenAIProvider(
        "scripted", base_url=server.base_url, api_key="t", tool_call_format="composed", **options
    )


def request(text: str, **options: Any) -> LLMRequest:
    return LLMRequest([SystemMessage("Be brief."), UserMessage(text)], tools=TOOLS, **options)


async def answer_to(written: str, *, pieces: int = 3) -> tuple[str, list[Any], LLMDone]:
    """What the provider makes of `written`: the text said, the calls, and the end."""
    async with ScriptedOpenAIServer([text_reply(written, pieces=pieces)]) as server:
        events = [event async for event in provider(server).stream(request("Rome?"))]
    said = "".join(e.text for e in events if isinstance(e, LLMTextDelta))
    calls = [
        (e.call.name, json.loads(e.call.arguments)) for e in events if isinstance(e, LLMToolCall)
    ]
    done = events[-1]
    assert isinstance(done, LLMDone)
    return said, calls, done


@pytest.mark.parametrize("pieces", [1, 3, 200])  # 200: one character a delta
async def test_a_fenced_composed_object_is_parsed_and_never_spoken(pieces: int) -> None:
    said, calls, done = await answer_to(f"```json\n{json.dumps(CALL)}\n```", pieces=pieces)
    assert said == ""
    assert calls == [("lookupWeather", {"city": "Rome"})]
    assert done.stop_reason == "tool_calls"


@pytest.mark.parametrize("pieces", [1, 5, 200])
async def test_a_preamble_before_a_composed_object_is_said_but_not_the_json(pieces: int) -> None:
    written = "Here you go: " + json.dumps({"calls": [], "output": "It is sunny."}) + " {x}"
    said, calls, done = await answer_to(written, pieces=pieces)
    assert said == "Here you go: It is sunny."  # the text after the object is not its answer
    assert calls == [] and done.stop_reason == "stop"


async def test_a_preamble_then_a_fenced_call() -> None:
    said, calls, _ = await answer_to(f"Let me check.\n```\n{json.dumps(CALL)}\n```", pieces=40)
    assert said.strip() == "Let me check."
    assert calls == [("lookupWeather", {"city": "Rome"})]


@pytest.mark.parametrize("pieces", [1, 200])
async def test_plain_text_with_braces_and_code_is_still_said(pieces: int) -> None:
    written = 'Use {name} or ```py\nx = {"a": 1}\n``` and "{"'
    said, calls, done = await answer_to(written, pieces=pieces)
    assert said == written and calls == [] and done.stop_reason == "stop"


async def test_trailing_text_after_the_object_is_not_spoken() -> None:
    said, _, done = await answer_to('{"calls": [], "output": "Hi"} {"output": "again"}', pieces=60)
    assert said == "Hi" and done.stop_reason == "stop"


async def test_an_object_cut_short_ends_with_length() -> None:
    said, calls, done = await answer_to('{"calls": [{"name": "lookupWeather", "arguments": {"ci')
    assert (said, calls, done.stop_reason) == ("", [], "length")
    said, _, done = await answer_to('{"calls": [], "output": "It is sun', pieces=30)
    assert (said, done.stop_reason) == ("It is sun", "length")


async def turn(replies: list[str]) -> tuple[TurnRunner, list[dict[str, Any]]]:
    """A TurnRunner turn against `replies`: the runner and the request bodies."""
    async with ScriptedOpenAIServer([text_reply(r) for r in replies]) as server:
        executor = ToolExecutor(ToolRegistry([lookupWeather]))
        runner = TurnRunner(provider(server), executor, system_prompt="Hi.")
        async for _ in runner.run_turn("Weather in Rome?"):
            pass
    return runner, [r.body for r in server.requests]


@pytest.mark.parametrize(
    "first",
    [
        '{"calls": [{"name": "lookupWeather", "arguments": {"ci',  # cut by max_tokens
        '{"calls": [], "output": null}',  # empty
        "",  # an empty text answer: the same handling
    ],
)
async def test_a_cut_or_empty_answer_gets_the_user_an_answer(first: str) -> None:
    runner, bodies = await turn([first, "It is sunny in Rome."])
    assert len(bodies) == 2
    assert "response_format" in bodies[0] and "response_format" not in bodies[1]  # no tools
    assert runner.history.messages[-1].content == "It is sunny in Rome."


async def test_a_requests_own_response_format_is_the_output_schema() -> None:
    schema = {"type": "object", "properties": {"mood": {"type": "string"}}, "required": ["mood"]}
    own = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}
    answers = [json.dumps({"calls": [], "output": {"mood": "calm"}})] * 2
    async with ScriptedOpenAIServer([text_reply(a) for a in answers]) as server:
        llm = provider(server, composed_output_schema={"type": "string"})
        events = [e async for e in llm.stream(request("?", response_format=own))]
        [e async for e in llm.stream(request("?", response_format={"type": "json_object"}))]
    sent = server.requests[0].body["response_format"]["json_schema"]["schema"]
    assert sent["anyOf"][1]["properties"]["output"] == schema
    sent = server.requests[1].body["response_format"]["json_schema"]["schema"]
    assert sent["anyOf"][1]["properties"]["output"] == {"type": "object"}
    said = "".join(e.text for e in events if isinstance(e, LLMTextDelta))
    assert json.loads(said) == {"mood": "calm"}


async def test_an_unusable_response_format_is_refused() -> None:
    async with ScriptedOpenAIServer([]) as server:
        llm = provider(server)
        with pytest.raises(ValueError, match="response_format must be"):
            [e async for e in llm.stream(request("?", response_format={"type": "xml"}))]
    assert server.requests == []


def test_composed_needs_a_server_that_honours_response_format() -> None:
    with pytest.raises(ValueError, match=r"compat\.response_format is False.*'text'"):
        OpenAIProvider(
            "m",
            base_url="http://127.0.0.1:9/v1",
            api_key="t",
            tool_call_format="composed",
            compat=CompatProfile(response_format=False),
        )
    OpenAIProvider(  # the other formats are fine with such a server
        "m",
        base_url="http://127.0.0.1:9/v1",
        api_key="t",
        tool_call_format="text",
        compat=CompatProfile(response_format=False),
    )


def test_forcing_a_tool_not_offered_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'other', which is not among the tools: lookupWeather"):
        composed_response_format(TOOLS, {"name": "other"}, None)
