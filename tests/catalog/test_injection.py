"""`ToolInjection`: direct vs discovery by measured schema tokens, permissions (invisible and
refused at execution), auto-routing, the prompt section, and a discovery conversation."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from llmrtc.agent import TurnRunner
from llmrtc.agent.events import ToolCallFinished, TurnCompleted
from llmrtc.catalog.injection import ToolInjection, estimate_tokens, schema_tokens
from llmrtc.catalog.toolkits import Toolkit, ToolsConfig
from llmrtc.execution import ToolExecutor
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import RecordingHooks, ScriptedLLM
from llmrtc.tools import ToolCall, ToolDefinition, define_tool

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the shared helpers beside us
from _routing import business_tools, catalog_of, many_tools

pytestmark = pytest.mark.anyio

BILLING = Toolkit(
    "billing",
    tools=["billing.refund"],
    policy="Read the amount back to the caller before any refund.",
    title="Billing",
)


def _wordy_tools(count: int) -> list[Any]:
    """`count` tools whose schemas are large (long descriptions, many properties)."""
    tools = []
    for index in range(count):
        properties = {
            f"field_{n}": {"type": "string", "description": "A long explanation " * 6}
            for n in range(8)
        }
        definition = ToolDefinition(
            name=f"big.tool_{index}",
            description="Does something elaborate. " * 10,
            parameters={"type": "object", "properties": properties},
        )
        tools.append(define_tool(definition, lambda args, ctx: "ok"))
    return tools


async def test_the_mode_follows_measured_schema_tokens_not_the_tool_count() -> None:
    small = await ToolInjection.build(catalog_of(many_tools(6)), context_window=4096)
    big = await ToolInjection.build(catalog_of(_wordy_tools(6)), context_window=4096)
    # same number of tools; only the measured size of their schemas differs
    assert small.mode == "direct" and big.mode == "discovery"
    assert small.direct_tokens <= small.budget_tokens == int(0.2 * 4096) < big.direct_tokens
    assert small.offered_tokens == small.direct_tokens
    assert big.offered_tokens < big.direct_tokens
    expected = sum(
        estimate_tokens(json.dumps(t.definition.to_openai(), ensure_ascii=False)) + 1
        for t in small.tools
    )
    assert small.direct_tokens == expected
    assert [d.name for d in small.definitions()] == [t.definition.name for t in small.tools]


async def test_a_larger_window_or_budget_keeps_direct_mode() -> None:
    catalog = catalog_of(_wordy_tools(6))
    assert (await ToolInjection.build(catalog, context_window=4096)).mode == "discovery"
    assert (await ToolInjection.build(catalog, context_window=65536)).mode == "direct"
    assert (await ToolInjection.build(catalog, context_window=4096, budget=0.9)).mode == "direct"


async def test_a_real_token_counter_can_be_passed() -> None:
    catalog = catalog_of(many_tools(6))  # more schemas than the five meta-tools
    counted = await ToolInjection.build(catalog, count_tokens=lambda text: 10_000)
    assert counted.mode == "discovery" and counted.direct_tokens == 6 * 10_001


async def test_mode_can_be_forced_and_options_are_checked() -> None:
    catalog = catalog_of(many_tools(3))
    assert (await ToolInjection.build(catalog, mode="discovery")).mode == "discovery"
    assert (await ToolInjection.build(catalog_of(_wordy_tools(9)), mode="direct")).mode == "direct"
    for bad, match in [
        ({"context_window": 0}, "context_window"),
        ({"budget": 0}, "budget"),
        ({"mode": "fast"}, "mode"),
    ]:
        with pytest.raises(ValueError, match=match):
            await ToolInjection.build(catalog, **bad)


async def test_only_the_highest_version_of_a_tool_is_offered() -> None:
    def versioned(version: str) -> Any:
        definition = ToolDefinition(name="crm.lookup", version=version)
        return define_tool(definition, lambda args, ctx: version)

    injection = await ToolInjection.build(catalog_of([versioned("1.0.0"), versioned("1.10.0")]))
    executor = ToolExecutor(injection.registry)
    result = await executor.execute_single(ToolCall("c1", "crm__lookup", {}))
    assert result.result == "1.10.0"


CONFIG = ToolsConfig(
    {"billing": True, "shell.run": False},
    toolkits=[BILLING],
    allowed_actions={"files": ["list"]},  # files.read is not an allowed action
)


@pytest.mark.parametrize("mode", ["direct", "discovery"])
async def test_a_refused_tool_is_invisible(mode: str) -> None:
    injection = await ToolInjection.build(
        catalog_of(business_tools()),
        config=CONFIG,
        mode=mode,  # type: ignore[arg-type]
    )
    assert [t.definition.name for t in injection.tools] == ["crm.lookup_customer", "billing.refund"]
    assert await injection.catalog.search("shell command") == []
    listed = [d.name for d in injection.definitions()]
    assert "shell.run" not in listed and "files.read" not in listed
    if mode == "discovery":
        executor = ToolExecutor(injection.registry)
        found = await executor.execute_single(ToolCall("c1", "search_tools", {"query": "read"}))
        assert found.result["tools"] == []
        browse = await executor.execute_single(
            ToolCall("c2", "browse_category", {"category": "shell"})
        )
        assert browse.status == "error"


@pytest.mark.parametrize("mode", ["direct", "discovery"])
@pytest.mark.parametrize("how", ["direct call", "wire name", "execute_tool"])
async def test_a_refused_tool_is_refused_at_execution_even_when_named(mode: str, how: str) -> None:
    injection = await ToolInjection.build(
        catalog_of(business_tools()),
        config=CONFIG,
        mode=mode,  # type: ignore[arg-type]
    )
    hooks = RecordingHooks()
    executor = ToolExecutor(injection.registry, hooks=hooks)
    call = {
        "direct call": ToolCall("c1", "shell.run", {"cmd": "rm -rf /"}),
        "wire name": ToolCall("c1", "shell__run", {"cmd": "rm -rf /"}),
        "execute_tool": ToolCall(
            "c1", "execute_tool", {"name": "shell.run", "params": {"cmd": "rm -rf /"}}
        ),
    }[how]
    if how == "execute_tool" and mode == "direct":
        call = ToolCall("c1", "execute_tool", {"name": "shell.run", "params": {}})
    result = await executor.execute_single(call)
    assert result.status == "not_found"
    if how != "execute_tool" or mode == "discovery":
        assert "is not permitted by this agent's tools configuration" in (result.error or "")
    assert not [e for e in hooks.of(ToolEndEvent) if e.status == "ok"]


async def test_refusals_hold_in_a_runner_view_too() -> None:
    injection = await ToolInjection.build(catalog_of(business_tools()), config=CONFIG)
    view = injection.registry.scoped(injection.registry.names(), scope="stage 'main'")
    executor = ToolExecutor(injection.registry)
    result = await executor.execute_single(ToolCall("c1", "shell.run", {}), tools=view)
    assert "not permitted" in (result.error or "")


async def test_a_real_tool_called_directly_in_discovery_mode_is_auto_routed() -> None:
    injection = await ToolInjection.build(catalog_of(business_tools()), mode="discovery")
    assert "crm.lookup_customer" not in [d.name for d in injection.definitions()]
    hooks = RecordingHooks()
    executor = ToolExecutor(injection.registry, hooks=hooks)
    # through the runner's view of what is offered (the meta-tools), as a turn runs it
    view = injection.registry.scoped(injection.registry.names())
    result = await executor.execute_single(
        ToolCall("c1", "crm__lookup_customer", {"customer_id": "C3"}), tools=view
    )
    assert (result.status, result.tool_name) == ("ok", "crm.lookup_customer")
    assert [e.tool_name for e in hooks.of(ToolEndEvent)] == ["crm.lookup_customer"]
    # a view that offers no router (no execute_tool) does not reach the hidden tools
    narrow = injection.registry.scoped(["get_tool"])
    refused = await executor.execute_single(ToolCall("c2", "crm.lookup_customer", {}), tools=narrow)
    assert refused.status == "not_found"


async def test_prompt_section_has_policies_and_the_discovery_workflow() -> None:
    catalog = catalog_of(business_tools())
    direct = await ToolInjection.build(catalog, config=CONFIG, mode="direct")
    assert direct.prompt_section() == (
        "Billing: Read the amount back to the caller before any refund."
    )
    discovery = await ToolInjection.build(catalog, config=CONFIG, mode="discovery")
    text = discovery.prompt_section()
    assert text.startswith("Billing: Read the amount back")
    assert "2 tools in 2 categories (billing, crm)" in text
    assert "search_tools, then get_tool, then execute_tool" in text
    # a toolkit with no permitted member says nothing
    off = ToolsConfig({"billing": False}, toolkits=[BILLING])
    assert "Billing" not in (await ToolInjection.build(catalog, config=off)).prompt_section()
    assert (await ToolInjection.build(catalog, mode="direct")).prompt_section() == ""


async def test_a_scripted_discovery_conversation() -> None:
    injection = await ToolInjection.build(catalog_of(business_tools()), mode="discovery")
    llm = ScriptedLLM(
        [
            [ToolCall("s1", "search_tools", {"query": "customer"})],
            [ToolCall("g1", "get_tool", {"name": "crm.lookup_customer"})],
            [
                ToolCall(
                    "x1",
                    "execute_tool",
                    {"name": "crm.lookup_customer", "params": {"customer_id": "C42"}},
                )
            ],
            "Customer C42 is Ada Lovelace.",
        ]
    )
    hooks = RecordingHooks()
    runner = TurnRunner(
        llm,
        ToolExecutor(injection.registry, hooks=hooks),
        system_prompt="You help.\n\n" + injection.prompt_section(),
    )
    events = [e async for e in runner.run_turn("Who is customer C42?")]
    llm.assert_consumed()
    offered = [t.name for t in llm.requests[0].tools]
    assert offered == [
        "search_tools",
        "get_tool",
        "execute_tool",
        "list_categories",
        "browse_category",
    ]
    finished = [e.result for e in events if isinstance(e, ToolCallFinished)]
    search, details, executed = finished
    assert search.result["tools"][0]["name"] == "crm.lookup_customer"
    assert details.result["parameters"]["required"] == ["customer_id"]
    assert (executed.call_id, executed.tool_name, executed.status) == (
        "x1",
        "crm.lookup_customer",
        "ok",
    )
    assert [e.tool_name for e in hooks.of(ToolEndEvent)] == [
        "search_tools",
        "get_tool",
        "crm.lookup_customer",
    ]
    done = events[-1]
    assert isinstance(done, TurnCompleted) and done.text == "Customer C42 is Ada Lovelace."


def test_schema_tokens_counts_each_schema_as_sent() -> None:
    definition = ToolDefinition(name="a.b", description="x")
    text = json.dumps(definition.to_openai())
    assert '"a__b"' in text
    assert schema_tokens([definition], len) == len(text) + 1


async def test_the_discovery_prompt_stays_small_with_many_categories() -> None:
    injection = await ToolInjection.build(
        catalog_of(many_tools(40, namespaces=40)), mode="discovery"
    )
    text = injection.prompt_section()
    assert "40 tools in 40 categories (ns0, ns1, ns10," in text
    assert "and 28 more)" in text


async def test_auto_picks_direct_when_the_meta_tools_would_cost_more() -> None:
    (one,) = many_tools(1)
    injection = await ToolInjection.build(catalog_of([one]), context_window=64)
    assert injection.direct_tokens > injection.budget_tokens  # over budget, yet:
    assert injection.mode == "direct"
    assert [d.name for d in injection.definitions()] == [one.name]
    forced = await ToolInjection.build(catalog_of([one]), context_window=64, mode="discovery")
    assert forced.offered_tokens >= injection.direct_tokens  # what auto avoided


async def test_a_config_key_naming_no_tool_or_toolkit_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kit = Toolkit("billing", tools=["billing.refund"])
    config = ToolsConfig({"billing": True, "shell.rnu": False, "crm.lookup_customer": True}, [kit])
    with caplog.at_level("WARNING", logger="llmrtc.catalog"):
        await ToolInjection.build(catalog_of(business_tools()), config=config)
    assert "tools config keys ['shell.rnu'] name no tool of the catalog" in caplog.text


async def test_reasoning_for_call_in_the_config_reaches_every_offered_schema() -> None:
    from llmrtc.tools import REASONING_FIELD

    config = ToolsConfig(reasoning_for_call=True)
    injection = await ToolInjection.build(
        catalog_of(many_tools(3)), config=config, context_window=8192
    )
    assert injection.mode == "direct"
    for definition in injection.definitions():
        assert REASONING_FIELD in definition.parameters["properties"], definition.name
    plain = await ToolInjection.build(catalog_of(many_tools(3)), context_window=8192)
    assert all(REASONING_FIELD not in d.parameters["properties"] for d in plain.definitions())
