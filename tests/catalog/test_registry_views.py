"""A router view of a discovery registry shares its hidden tools (a view is cut every turn and
must not copy thousands), yet stays a snapshot of them."""

from __future__ import annotations

import time

import pytest

from llmrtc.catalog import LocalBackend, ToolCatalog, ToolInjection
from llmrtc.tools import Tool, ToolDefinition, ToolRegistry, define_tool

pytestmark = pytest.mark.anyio


def _tool(name: str) -> Tool:
    return define_tool(ToolDefinition(name=name, description=name), lambda args, ctx: name)


async def _discovery(count: int) -> ToolRegistry:
    tools = [_tool(f"ns{i % 40}.t{i}") for i in range(count)]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    injection = await ToolInjection.build(catalog, context_window=4096, mode="discovery")
    return injection.registry


def _view_cost(registry: ToolRegistry) -> float:
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        registry.scoped(registry.names(), scope="stage 'x'")
        best = min(best, time.perf_counter() - started)
    return best


async def test_cutting_a_router_view_costs_the_same_with_5_or_5000_hidden_tools() -> None:
    few, many = await _discovery(5), await _discovery(5000)
    assert len(many.scoped(many.names()).hidden_names()) == 5000
    assert _view_cost(many) < 5 * _view_cost(few) + 0.0005


async def test_a_view_still_runs_every_hidden_tool_and_keeps_its_snapshot() -> None:
    registry = await _discovery(50)
    view = registry.scoped(registry.names())
    assert view.get("ns3__t3") is registry.get("ns3.t3") is not None
    assert "ns3.t3" in view and view.has("ns3:t3@1.0.0")
    assert view.definitions(["ns3.t3"])[0].name == "ns3.t3"
    registry.register(_tool("late.one"), hidden=True)
    registry.unregister("ns3.t3")
    assert view.get("late.one") is None  # registered after the view was cut
    assert view.get("ns3.t3") is not None  # unregistered after: the view keeps it
    assert registry.get("late.one") is not None and registry.get("ns3.t3") is None
    nested = view.scoped(view.names())
    assert nested.get("ns4.t4") is not None and len(nested.hidden_names()) == 50


@pytest.mark.parametrize("spelling", ["ns2.t2", "ns2__t2", "ns2:t2@1.0.0"])
async def test_a_stage_names_a_tool_it_does_not_offer_by_its_dotted_name(spelling: str) -> None:
    registry = await _discovery(5)
    view = registry.scoped(["ns1.t1", "search_tools"], scope="stage 'billing'")
    message = view.missing_tool_message(spelling)
    assert message.startswith("tool 'ns2.t2' is not available in stage 'billing'")


async def test_a_real_tool_in_the_batch_ends_the_discovery_chain() -> None:
    """Only results that all come from chain steps (search_tools) keep the tools offered
    where a profile omits them after results: a real tool's result is to be answered."""
    from llmrtc.agent._round import model_request
    from llmrtc.agent.history import ConversationHistory
    from llmrtc.agent.settings import TurnSettings
    from llmrtc.llm.messages import AssistantMessage, ToolMessage, UserMessage
    from llmrtc.tools import ToolCall

    registry = await _discovery(3)
    search = ToolCall("b", "search_tools", {"query": "x"})
    batches = [
        ((search,), True),
        ((ToolCall("a", "ns1.t1", {}), search), False),
        ((ToolCall("a", "execute_tool", {"name": "ns1.t1", "params": {}}),), False),
    ]
    for calls, expected in batches:
        messages = [UserMessage("hi"), AssistantMessage("", calls, False)]
        history = ConversationHistory(
            messages=[*messages, *(ToolMessage(c.call_id, "1") for c in calls)]
        )
        request = model_request(history, TurnSettings(system_prompt="s"), registry, 1)
        assert request.continues_chain is expected, [c.name for c in calls]
