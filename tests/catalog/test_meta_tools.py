"""Discovery's meta-tools: result shapes, pagination, get_tool details, and execute_tool running
the real tool through the executor (validation against the target's schema, hooks, spans)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from llmrtc.catalog.injection import ToolInjection
from llmrtc.catalog.meta_tools import META_TOOL_NAMES
from llmrtc.execution import ToolExecutor
from llmrtc.telemetry.events import ToolEndEvent, ToolStartEvent
from llmrtc.testing import InMemoryTelemetry, RecordingHooks
from llmrtc.tools import ToolCall, ToolCallResult

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the shared helpers beside us
from _routing import business_tools, catalog_of, many_tools

pytestmark = pytest.mark.anyio


async def _discovery(tools: Any = None, **options: Any) -> ToolInjection:
    catalog = catalog_of(tools if tools is not None else business_tools())
    return await ToolInjection.build(catalog, mode="discovery", **options)


async def _call(injection: ToolInjection, tool: str, /, **arguments: Any) -> ToolCallResult:
    executor = ToolExecutor(injection.registry)
    return await executor.execute_single(ToolCall("c1", tool, json.dumps(arguments)))


async def test_discovery_offers_exactly_the_five_meta_tools() -> None:
    injection = await _discovery()
    assert [d.name for d in injection.definitions()] == list(META_TOOL_NAMES)
    assert injection.registry.hidden_names() == [
        "crm.lookup_customer",
        "billing.refund",
        "files.read",
        "shell.run",
    ]


async def test_search_lists_tools_as_name_id_description() -> None:
    result = await _call(await _discovery(), "search_tools", query="refund", max_results=3)
    assert result.status == "ok"
    assert result.result["tools"][0] == {
        "name": "billing.refund",
        "id": "billing:refund@1.0.0",
        "description": "Refund a card payment.",
    }


async def test_search_max_results_is_bounded_by_the_schema() -> None:
    result = await _call(await _discovery(), "search_tools", query="x", max_results=50)
    assert result.status == "invalid_arguments"
    assert "max_results" in (result.error or "")


async def test_categories_are_namespaces_with_counts() -> None:
    result = await _call(await _discovery(), "list_categories")
    assert result.result == {
        "categories": [
            {"name": "billing", "tools": 1},
            {"name": "crm", "tools": 1},
            {"name": "files", "tools": 1},
            {"name": "shell", "tools": 1},
        ]
    }


async def test_browse_category_pages_through_a_namespace() -> None:
    injection = await _discovery(many_tools(25, namespaces=1))
    first = await _call(injection, "browse_category", category="ns0", page_size=10)
    assert first.result["total"] == 25 and first.result["pages"] == 3
    assert first.result["next_page"] == 2
    assert [t["name"] for t in first.result["tools"]][:2] == ["ns0.action_0", "ns0.action_1"]
    last = await _call(injection, "browse_category", category="ns0", page=3, page_size=10)
    assert len(last.result["tools"]) == 5 and last.result["next_page"] is None
    beyond = await _call(injection, "browse_category", category="ns0", page=4, page_size=10)
    assert beyond.status == "error" and "has 3 page(s)" in (beyond.error or "")
    unknown = await _call(injection, "browse_category", category="nope")
    assert unknown.status == "error" and "categories: ns0" in (unknown.error or "")


async def test_get_tool_gives_schema_examples_and_side_effects_by_any_name() -> None:
    injection = await _discovery()
    for name in ("billing.refund", "billing__refund", "billing:refund@1.0.0"):
        details = (await _call(injection, "get_tool", name=name)).result
        assert details["name"] == "billing.refund"
        assert details["parameters"]["required"] == ["payment_id", "amount"]
        assert details["side_effects"] == ["moves money back to the card"]
        assert details["examples"] == [{"payment_id": "pay_1", "amount": {"value": 5}}]
    missing = await _call(injection, "get_tool", name="billing.refnd")
    assert missing.status == "error"
    assert "did you mean 'billing.refund'" in (missing.error or "")


async def test_execute_tool_runs_the_real_tool_under_the_same_call_id() -> None:
    injection = await _discovery()
    result = await _call(
        injection, "execute_tool", name="crm__lookup_customer", params={"customer_id": "C1"}
    )
    assert result.call_id == "c1" and result.status == "ok"
    assert result.tool_name == "crm.lookup_customer"
    assert result.result == {"tool": "crm.lookup_customer", "args": {"customer_id": "C1"}}


async def test_execute_tool_accepts_params_sent_as_a_json_string() -> None:
    injection = await _discovery()
    result = await _call(
        injection, "execute_tool", name="files.read", params=json.dumps({"path": "/tmp/x"})
    )
    assert result.result == {"tool": "files.read", "args": {"path": "/tmp/x"}}


async def test_execute_tool_validates_params_against_the_target_schema() -> None:
    injection = await _discovery()
    result = await _call(
        injection,
        "execute_tool",
        name="billing.refund",
        params={"payment_id": "p1", "amount": {"value": -3}},
    )
    assert result.status == "invalid_arguments"
    assert "tool 'billing.refund'" in (result.error or "")
    assert "amount.value" in (result.error or "")  # the JSON path inside params
    bad_id = await _call(
        injection, "execute_tool", name="crm.lookup_customer", params={"customer_id": "x"}
    )
    assert bad_id.status == "invalid_arguments" and "customer_id" in (bad_id.error or "")


async def test_execute_tool_own_arguments_are_checked_too() -> None:
    injection = await _discovery()
    result = await _call(injection, "execute_tool", params={})
    assert result.status == "invalid_arguments" and "name" in (result.error or "")
    unknown = await _call(injection, "execute_tool", name="crm.lookup_custmer", params={})
    assert unknown.status == "not_found"
    assert "did you mean 'crm.lookup_customer'" in (unknown.error or "")
    meta = await _call(injection, "execute_tool", name="execute_tool", params={})
    assert meta.status == "not_found"


async def test_hooks_and_spans_name_the_real_tool() -> None:
    injection = await _discovery()
    hooks = RecordingHooks()
    telemetry = InMemoryTelemetry()
    executor = ToolExecutor(injection.registry, hooks=hooks)
    call = ToolCall(
        "c9", "execute_tool", {"name": "crm.lookup_customer", "params": {"customer_id": "C2"}}
    )
    await executor.execute([call], hooks=telemetry.new_hooks())
    (start,) = hooks.of(ToolStartEvent)
    (end,) = hooks.of(ToolEndEvent)
    assert start.tool_name == end.tool_name == "crm.lookup_customer"
    assert start.arguments == {"customer_id": "C2"} and end.call_id == "c9"
    (span,) = [s for s in telemetry.spans() if s.name.startswith("execute_tool ")]
    assert span.name == "execute_tool crm.lookup_customer"


async def test_the_real_tools_timeout_applies_through_execute_tool() -> None:
    import anyio

    from llmrtc.tools import ToolDefinition, define_tool

    async def slow(args: Any, ctx: Any) -> str:
        await anyio.sleep(30)
        return "late"

    definition = ToolDefinition(name="ops.slow", description="Slow.", timeout=0.05)
    injection = await _discovery([define_tool(definition, slow)])
    result = await _call(injection, "execute_tool", name="ops.slow", params={})
    assert (result.tool_name, result.status) == ("ops.slow", "timeout")


async def test_one_concurrency_slot_is_enough_for_execute_tool() -> None:
    injection = await _discovery()
    executor = ToolExecutor(injection.registry, max_concurrency=1)
    calls = [
        ToolCall(f"c{i}", "execute_tool", {"name": "files.read", "params": {"path": str(i)}})
        for i in range(3)
    ]
    results = await executor.execute(calls)
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert [r.call_id for r in results] == ["c0", "c1", "c2"]


def test_cli_search_prints_ranked_results() -> None:
    from llmrtc.cli.catalog_search import print_search
    from llmrtc.tools import ToolRegistry

    lines: list[str] = []
    registry = ToolRegistry(business_tools())
    assert print_search(registry, "refund", limit=2, semantic=False, out=lines.append) == 0
    assert lines[0].startswith("1. billing.refund  (billing:refund@1.0.0)  score ")
    assert lines[1] == "    Refund a card payment."
    assert lines[2].startswith("    matched: ")
    lines.clear()
    print_search(registry, "zzzz", semantic=False, out=lines.append)
    assert lines == ["no tool matches 'zzzz'"]


@pytest.mark.parametrize(("policy", "status"), [("finish", "ok"), ("cancel", "aborted")])
async def test_the_real_tools_interrupt_policy_applies_through_execute_tool(
    policy: str, status: str
) -> None:
    import anyio

    from llmrtc.abort import AbortController
    from llmrtc.tools import ToolDefinition, define_tool

    started, release = anyio.Event(), anyio.Event()

    async def pay(args: Any, ctx: Any) -> str:
        started.set()
        await release.wait()
        return "paid"

    definition = ToolDefinition(name="billing.pay", on_interrupt=policy)  # type: ignore[arg-type]
    injection = await _discovery([define_tool(definition, pay)])
    executor = ToolExecutor(injection.registry)
    controller = AbortController()
    results: list[ToolCallResult] = []

    async def run() -> None:
        call = ToolCall("c1", "execute_tool", {"name": "billing.pay", "params": {}})
        results.append(await executor.execute_single(call, abort_signal=controller.signal))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await started.wait()
        controller.abort("barge-in")  # the turn is interrupted while the payment runs
        await anyio.sleep(0.01)
        release.set()
    assert (results[0].tool_name, results[0].status) == ("billing.pay", status)


async def test_execute_tool_naming_a_meta_router_gives_a_specific_reason() -> None:
    call = {"name": "files.read", "params": {"path": "x"}}
    result = await _call(await _discovery(), "execute_tool", name="execute_tool", params=call)
    assert result.status == "not_found"
    assert "did you mean" not in result.error
    assert "'execute_tool' runs other tools and cannot be run through one" in result.error


@pytest.mark.parametrize("tool", ["shell__run", "shell:run@1.0.0"])
@pytest.mark.parametrize("routed", [False, True])
async def test_refused_calls_are_named_by_the_dotted_name_in_hooks(tool: str, routed: bool) -> None:
    from llmrtc.catalog import ToolsConfig

    injection = await _discovery(config=ToolsConfig({"shell.run": False}))
    hooks = RecordingHooks()
    executor = ToolExecutor(injection.registry, hooks=hooks)
    args = {"cmd": "ls"}
    call = ToolCall("c1", "execute_tool", {"name": tool, "params": args}) if routed else None
    result = await executor.execute_single(call or ToolCall("c1", tool, args))
    assert "not permitted" in result.error
    assert [e.tool_name for e in hooks.of(ToolEndEvent)] == ["shell.run"]


async def test_get_tool_of_a_tool_not_permitted_answers_as_for_an_unknown_one() -> None:
    """A tool that is not permitted is invisible to the model: get_tool must not confirm that
    it exists (only execution, where the model already names it, refuses it clearly)."""
    from llmrtc.catalog import ToolsConfig

    injection = await _discovery(config=ToolsConfig({"shell.run": False}))
    refused = await _call(injection, "get_tool", name="shell__run")
    unknown = await _call(injection, "get_tool", name="shell__runs")
    assert refused.status == unknown.status == "error"
    assert "not permitted" not in refused.error
    assert refused.error == unknown.error.replace("shell__runs", "shell__run")


async def test_search_tools_filters_to_its_tools_before_cutting_to_the_limit() -> None:
    """The catalog may rank tools the injection was not built with (a backend added, or back
    after a failure): they must not take the `limit` places and leave no answer."""
    from llmrtc.catalog import LocalBackend, ToolCatalog
    from llmrtc.tools import ToolDefinition, define_tool

    def tool(name: str, description: str) -> Any:
        return define_tool(ToolDefinition(name=name, description=description), lambda a, c: 1)

    local = [tool("billing.refund_payment", "Refund a card payment")]
    local += [tool(f"misc.t{i}", f"unrelated {i}") for i in range(40)]
    catalog = ToolCatalog([LocalBackend(local, name="local")], embedder=None)
    injection = await ToolInjection.build(catalog, mode="discovery")
    later = [tool(f"r{i}.refund", "refund") for i in range(5)]  # better matches, not offered
    catalog.add_backend(LocalBackend(later, name="later"))
    result = await _call(injection, "search_tools", query="refund", max_results=5)
    names = [t["name"] for t in json.loads(result.to_content())["tools"]]
    assert names == ["billing.refund_payment"]
