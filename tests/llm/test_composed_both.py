"""The composed format in seed 002's own shape (`allow_both`, issue 17): calls
`{"_tool": <name>, <parameters>...}` beside an `output` that may be null, built by
`composed_response_format(..., allow_both=True)` and read by the composed parser. Answers go
through the real `openai` client against `ScriptedOpenAIServer`."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from llmrtc.agent import TurnRunner
from llmrtc.execution import ToolExecutor
from llmrtc.llm import LLMRequest, SystemMessage, ToolMessage, UserMessage
from llmrtc.llm.formats.composed import composed_prompt, composed_response_format
from llmrtc.llm.openai_provider import OpenAIProvider
from llmrtc.llm.types import LLMDone, LLMTextDelta, LLMToolCall
from llmrtc.testing.openai_server import ScriptedOpenAIServer, text_reply
from llmrtc.tools import ToolDefinition, ToolRegistry, define_tool, tool

pytestmark = pytest.mark.anyio

greeted: list[str] = []


@tool
async def greetUser(userName: str) -> str:
    """Greet a user by name."""
    greeted.append(userName)
    return f"greeted {userName}"


@tool(namespace="shop")
async def lookupOrder(order_id: str) -> str:
    """Status of an order."""
    return "shipped"


TOOLS = [greetUser.definition, lookupOrder.definition]
SUMMARY = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}


def provider(server: ScriptedOpenAIServer, **options: Any) -> OpenAIProvider:
    return OpenAIProvider(
        "scripted", base_url=server.base_url, api_key="t", tool_call_format="composed", **options
    )


def request(text: str) -> LLMRequest:
    return LLMRequest([SystemMessage("Be brief."), UserMessage(text)], tools=TOOLS)


async def events_of(llm: OpenAIProvider, req: LLMRequest) -> list[Any]:
    return [event async for event in llm.stream(req)]


def calls_in(events: list[Any]) -> list[tuple[str, Any]]:
    return [
        (e.call.name, json.loads(e.call.arguments)) for e in events if isinstance(e, LLMToolCall)
    ]


def test_the_response_format_is_seed_002s_shape() -> None:
    sent = composed_response_format(TOOLS, "auto", SUMMARY, allow_both=True)
    schema = sent["json_schema"]["schema"]
    assert schema["type"] == "object" and list(schema["properties"]) == ["calls", "output"]
    assert schema["properties"]["output"]["type"] == ["object", "null"]
    greet, order = schema["properties"]["calls"]["items"]["oneOf"]
    assert greet["properties"]["_tool"] == {"const": "greetUser"}
    assert greet["required"] == ["_tool", "userName"]
    assert order["properties"]["_tool"] == {"const": "shop__lookupOrder"}
    check = jsonschema.Draft202012Validator(schema)
    both = {"output": {"summary": "hi"}, "calls": [{"_tool": "greetUser", "userName": "Ada"}]}
    assert check.is_valid(both)
    assert check.is_valid({"output": None, "calls": both["calls"]})
    assert not check.is_valid({"output": None, "calls": [{"name": "greetUser"}]})
    # The prompt describes the same shape.
    prompt = composed_prompt(TOOLS, allow_both=True)
    assert '{"_tool": <tool name>, <its parameters>...}' in prompt and "or null" in prompt
    assert '"arguments"' not in prompt.split("\n\n")[-1]


def test_forcing_choices_keep_the_object_root_and_need_a_call() -> None:
    required = composed_response_format(TOOLS, "required", None, allow_both=True)
    schema = required["json_schema"]["schema"]
    assert schema["type"] == "object" and schema["properties"]["calls"]["minItems"] == 1
    assert not jsonschema.Draft202012Validator(schema).is_valid({"output": "x", "calls": []})
    named = composed_response_format(TOOLS, {"name": "shop.lookupOrder"}, None, allow_both=True)
    items = named["json_schema"]["schema"]["properties"]["calls"]["items"]
    assert items["properties"]["_tool"] == {"const": "shop__lookupOrder"}


def test_a_parameter_named_tool_is_refused_when_the_request_is_built() -> None:
    clash = ToolDefinition(
        name="route", parameters={"type": "object", "properties": {"_tool": {"type": "string"}}}
    )
    with pytest.raises(ValueError, match="parameter named '_tool'"):
        composed_response_format([clash], "auto", None, allow_both=True)
    composed_response_format([clash], "auto", None)  # the default nests arguments: fine


async def test_calls_beside_a_streamed_answer_are_read() -> None:
    answer = json.dumps(
        {
            "output": "Greeting Ada, and checking your order.",
            "calls": [
                {"_tool": "greetUser", "userName": "Ada"},
                {"_tool": "shop__lookupOrder", "order_id": "A1"},
            ],
        }
    )
    async with ScriptedOpenAIServer([text_reply(answer, pieces=len(answer) // 3)]) as server:
        events = await events_of(provider(server), request("Greet Ada; my order A1?"))
    deltas = [e.text for e in events if isinstance(e, LLMTextDelta)]
    assert "".join(deltas) == "Greeting Ada, and checking your order."
    assert len(deltas) > 3  # streamed while written, not at the end
    assert calls_in(events) == [
        ("greetUser", {"userName": "Ada"}),
        ("shop.lookupOrder", {"order_id": "A1"}),
    ]
    assert events[-1] == LLMDone("tool_calls", events[-1].usage, events[-1].model)


async def test_null_and_object_outputs_and_the_default_shape_still_read() -> None:
    replies = [
        text_reply(
            json.dumps({"output": None, "calls": [{"_tool": "greetUser", "userName": "B"}]})
        ),
        text_reply(json.dumps({"output": {"summary": "done"}, "calls": []})),
        text_reply(json.dumps({"calls": [{"name": "greetUser", "arguments": {"userName": "C"}}]})),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        llm = provider(server, composed_output_schema=SUMMARY)
        only_calls, only_answer, default = [await events_of(llm, request("?")) for _ in range(3)]
    assert calls_in(only_calls) == [("greetUser", {"userName": "B"})]
    assert not [e for e in only_calls if isinstance(e, LLMTextDelta)]
    assert [e.text for e in only_answer if isinstance(e, LLMTextDelta)] == ['{"summary": "done"}']
    assert not calls_in(only_answer)
    assert calls_in(default) == [("greetUser", {"userName": "C"})]


async def test_a_turn_runs_flattened_calls_and_a_latent_tools_output() -> None:
    capital = define_tool(
        ToolDefinition(
            name="capital",
            description="The capital city of a country.",
            parameters={"type": "object", "properties": {"country": {"type": "string"}}},
            output_schema={"type": "string"},
        )
    )
    first = {
        "output": None,
        "calls": [
            {"_tool": "greetUser", "userName": "Zoe"},
            {"_tool": "capital", "country": "France", "_output": "Paris"},
        ],
    }
    replies = [text_reply(json.dumps(first)), text_reply(json.dumps({"output": "Hi Zoe: Paris."}))]
    greeted.clear()
    async with ScriptedOpenAIServer(replies) as server:
        registry = ToolRegistry([greetUser, capital])
        runner = TurnRunner(provider(server), ToolExecutor(registry), system_prompt="Hi.")
        [event async for event in runner.run_turn("Greet Zoe; capital of France?")]
    assert greeted == ["Zoe"]
    results = [m.content for m in runner.history.messages if isinstance(m, ToolMessage)]
    assert [json.loads(r) for r in results] == ["greeted Zoe", "Paris"]
    assert runner.history.messages[-1].content == "Hi Zoe: Paris."


async def test_the_provider_sends_seed_002s_shape_when_asked() -> None:
    answer = {"output": "Hello Ada.", "calls": [{"_tool": "greetUser", "userName": "Ada"}]}
    async with ScriptedOpenAIServer(
        [text_reply(json.dumps(answer)), text_reply(json.dumps(answer))]
    ) as server:
        both = provider(server, composed_allow_both=True)
        events = await events_of(both, request("Greet Ada"))
        await events_of(provider(server), request("Greet Ada"))
    seed, default = (r.body for r in server.requests)
    schema = seed["response_format"]["json_schema"]["schema"]
    assert schema["type"] == "object" and list(schema["properties"]) == ["calls", "output"]
    assert "anyOf" in default["response_format"]["json_schema"]["schema"]  # calls XOR answer
    assert '{"_tool": <tool name>, <its parameters>...}' in seed["messages"][0]["content"]
    assert calls_in(events) == [("greetUser", {"userName": "Ada"})]
    assert "".join(e.text for e in events if isinstance(e, LLMTextDelta)) == "Hello Ada."


def test_a_forced_call_leaves_no_answer_beside_it() -> None:
    """With a forced tool_choice the answer is null: an answer written (and spoken) beside
    the forced call would come before its result."""
    for choice in ("required", {"name": "greetUser"}):
        sent = composed_response_format(TOOLS, choice, SUMMARY, allow_both=True)  # type: ignore[arg-type]
        schema = sent["json_schema"]["schema"]
        call = {"_tool": "greetUser", "userName": "Ada"}
        assert jsonschema.Draft202012Validator(schema).is_valid({"calls": [call], "output": None})
        answer = {"calls": [call], "output": {"summary": "Greeted Ada."}}
        assert not jsonschema.Draft202012Validator(schema).is_valid(answer)


@pytest.mark.parametrize(
    "reply",
    [
        '{"_tool": "greetUser", "userName": "Ada"}',
        '{"name": "greetUser", "arguments": {"userName": "Ada"}}',
        'Sure. {"_tool": "greetUser", "userName": "Ada"}',
        '[{"_tool": "greetUser", "userName": "Ada"}]',
    ],
)
@pytest.mark.parametrize("allow_both", [True, False])
async def test_a_bare_call_from_a_server_that_ignored_the_schema_is_a_call(
    reply: str, allow_both: bool
) -> None:
    async with ScriptedOpenAIServer([text_reply(reply, pieces=5)]) as server:
        events = await events_of(provider(server, composed_allow_both=allow_both), request("?"))
    found = [(e.call.name, e.call.arguments) for e in events if isinstance(e, LLMToolCall)]
    assert [(n, a if isinstance(a, dict) else json.loads(a)) for n, a in found] == [
        ("greetUser", {"userName": "Ada"})
    ]
    spoken = "".join(e.text for e in events if isinstance(e, LLMTextDelta))
    assert "{" not in spoken and "_tool" not in spoken


async def test_a_bare_object_that_is_no_call_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    replies = [
        text_reply('{"_tool": "launchMissiles", "target": "x"}'),
        text_reply('{"answer": "hello"}'),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        llm = provider(server, composed_allow_both=True)
        with caplog.at_level("WARNING", logger="llmrtc.llm"):
            for _ in replies:
                events = await events_of(llm, request("?"))
                assert not calls_in(events)
                assert not [e for e in events if isinstance(e, LLMTextDelta)]
    assert sum("neither 'calls' nor 'output'" in r.getMessage() for r in caplog.records) == 2


async def test_a_tool_with_a_tool_parameter_gets_the_nested_shape_in_a_live_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Under composed_allow_both a parameter named `_tool` cannot be flattened: requests
    offering that tool use the nested calls-or-answer shape (warned once per tool), so the
    turn neither fails mid-session nor loses the tool; both its calls and others' run."""
    routed: list[str] = []
    route = define_tool(
        ToolDefinition(
            name="route",
            description="Route a call.",
            parameters={"type": "object", "properties": {"_tool": {"type": "string"}}},
        ),
        lambda args, ctx: routed.append(args["_tool"]) or "routed",
    )
    nested = {
        "calls": [
            {"name": "greetUser", "arguments": {"userName": "Max"}},
            {"name": "route", "arguments": {"_tool": "sales"}},
        ],
        "output": None,
    }
    replies = [
        text_reply(json.dumps(nested)),
        text_reply(json.dumps({"calls": [], "output": "Hi Max."})),
        text_reply(json.dumps({"calls": [], "output": "Bye."})),
    ]
    greeted.clear()
    async with ScriptedOpenAIServer(replies) as server:
        registry = ToolRegistry([route, greetUser])
        llm = provider(server, composed_allow_both=True)
        runner = TurnRunner(llm, ToolExecutor(registry), system_prompt="Hi.")
        with caplog.at_level("WARNING", logger="llmrtc.llm"):
            [event async for event in runner.run_turn("Greet Max, route me to sales")]
            [event async for event in runner.run_turn("Bye")]
    assert greeted == ["Max"] and routed == ["sales"]
    assert runner.history.messages[-1].content == "Bye."
    assert len(server.requests) == 3
    for sent in server.requests:
        schema = sent.body["response_format"]["json_schema"]["schema"]
        assert "anyOf" in schema  # the nested calls-or-answer shape
        assert '"name": "route"' in sent.body["messages"][0]["content"]
    warnings = [r.getMessage() for r in caplog.records if "'route'" in r.getMessage()]
    assert len(warnings) == 1 and "_tool" in warnings[0]


def test_allow_both_needs_the_composed_format_and_a_bool() -> None:
    with pytest.raises(ValueError, match="tool_call_format='composed'"):
        OpenAIProvider("m", base_url="http://127.0.0.1:9", composed_allow_both=True)
    with pytest.raises(ValueError, match="True or False"):
        OpenAIProvider(
            "m",
            base_url="http://127.0.0.1:9",
            tool_call_format="composed",
            composed_allow_both="yes",  # type: ignore[arg-type]
        )
