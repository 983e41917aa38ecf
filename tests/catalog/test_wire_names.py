"""Dotted names ⇄ `__` wire names: registry lookup by every form, collisions refused, and the
round trip through the real openai client and through the offline text-tools parser."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from llmrtc.agent import TurnRunner
from llmrtc.agent.events import TurnCompleted
from llmrtc.catalog.injection import ToolInjection
from llmrtc.execution import ToolExecutor
from llmrtc.llm.messages import AssistantMessage
from llmrtc.llm.openai_provider import OpenAIProvider
from llmrtc.llm.text_tools import TextToolCallParser, render_text_call, render_tool_prompt
from llmrtc.llm.types import LLMToolCall
from llmrtc.llm.wire import ToolCallAssembler, message_to_openai
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import RecordingHooks
from llmrtc.testing.openai_server import ScriptedOpenAIServer, text_reply, tool_call_reply
from llmrtc.tools import ToolCall, ToolDefinition, ToolRegistry, define_tool

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the shared helpers beside us
from _routing import business_tools, catalog_of

pytestmark = pytest.mark.anyio


def _tool(name: str, **extra: object) -> object:
    return define_tool(ToolDefinition(name=name, **extra), lambda args, ctx: name)  # type: ignore[arg-type]


def test_registry_finds_a_tool_by_name_wire_name_and_id() -> None:
    lookup = _tool("crm.lookup", version="1.2.0")
    registry = ToolRegistry([lookup, _tool("lookupWeather")])  # type: ignore[list-item]
    for form in ("crm.lookup", "crm__lookup", "crm:lookup@1.2.0", "crm:lookup"):
        assert registry.get(form) is lookup
        assert registry.has(form) and form in registry
    assert registry.get("crm:lookup@2.0.0") is None
    assert registry.get("lookupWeather@1.0.0") is registry.get("lookupWeather")
    resolved, tool = registry.resolve(ToolCall("c1", "crm__lookup", {}))
    assert tool is lookup and resolved == ToolCall("c1", "crm.lookup", {})
    assert registry.unregister("crm__lookup") and "crm.lookup" not in registry


def test_names_that_collide_on_the_wire_are_refused_at_registration() -> None:
    registry = ToolRegistry([_tool("crm.lookup")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"collides with the registered tool 'crm\.lookup'"):
        registry.register(_tool("crm__lookup"))  # type: ignore[arg-type]


async def test_collisions_are_refused_when_the_injection_is_built() -> None:
    catalog = catalog_of([_tool("crm.lookup"), _tool("crm__lookup")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="cannot offer the catalog's tools: tool 'crm__lookup'"):
        await ToolInjection.build(catalog, mode="direct")
    with pytest.raises(ValueError, match="collides"):
        await ToolInjection.build(catalog, mode="discovery")


def test_history_and_streamed_calls_use_wire_names_both_ways() -> None:
    message = AssistantMessage("", (ToolCall("c1", "crm.lookup", {"a": 1}),))
    sent = message_to_openai(message)
    assert sent["tool_calls"][0]["function"]["name"] == "crm__lookup"
    assembler = ToolCallAssembler(["crm.lookup", "lookupWeather"])
    calls = [
        *assembler.add(0, "c1", "crm__lookup", '{"a": 1}'),
        *assembler.add(1, "c2", "lookupWeather", "{}"),
        *assembler.finish(),
    ]
    assert [c.name for c in calls] == ["crm.lookup", "lookupWeather"]
    # a name the request did not declare is kept as sent (the registry finds wire names)
    other = ToolCallAssembler(["crm.lookup"])
    other.add(0, "c3", "billing__refund", "{}")
    assert other.finish()[0].name == "billing__refund"


def test_text_tools_show_wire_names_and_parse_both_spellings() -> None:
    definition = ToolDefinition(name="crm.lookup", description="Find a customer.")
    assert "- crm__lookup: Find a customer." in render_tool_prompt([definition])
    past = render_text_call(ToolCall("c1", "crm.lookup", {}))
    assert '"name": "crm__lookup"' in past
    for spelling in ("crm__lookup", "crm.lookup"):
        parser = TextToolCallParser(["crm.lookup"])
        body = '{"name": "' + spelling + '", "arguments": {"id": "C1"}}'
        text = "<tool_call>" + body + "</tool_call>"
        events = [*parser.feed(text), *parser.finish()]
        calls = [e.call for e in events if isinstance(e, LLMToolCall)]
        assert [(c.name, c.arguments) for c in calls] == [("crm.lookup", {"id": "C1"})]
    keyed = TextToolCallParser(["crm.lookup"])
    events = [*keyed.feed('{"crm__lookup": {"id": "C2"}}'), *keyed.finish()]
    assert [e.call.name for e in events if isinstance(e, LLMToolCall)] == ["crm.lookup"]


async def test_round_trip_through_the_real_openai_client() -> None:
    injection = await ToolInjection.build(catalog_of(business_tools()), mode="direct")
    hooks = RecordingHooks()
    replies = [
        tool_call_reply([("call_1", "crm__lookup_customer", '{"customer_id": "C7"}')]),
        text_reply("Ada, on the gold plan."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        llm = OpenAIProvider("m", base_url=server.base_url, api_key="test")
        executor = ToolExecutor(injection.registry, hooks=hooks)
        runner = TurnRunner(llm, executor, system_prompt="You help.")
        events = [e async for e in runner.run_turn("Who is C7?")]
    done = events[-1]
    assert isinstance(done, TurnCompleted) and done.text == "Ada, on the gold plan."
    first, second = (r.body for r in server.requests)
    offered = [t["function"]["name"] for t in first["tools"]]
    assert offered == ["crm__lookup_customer", "billing__refund", "files__read", "shell__run"]
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    assert assistant["tool_calls"][0]["function"]["name"] == "crm__lookup_customer"
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert '"customer_id":"C7"' in tool_message["content"]
    # the executor ran the dotted tool, and hooks name it by its dotted name
    (end,) = hooks.of(ToolEndEvent)
    assert (end.tool_name, end.status) == ("crm.lookup_customer", "ok")
