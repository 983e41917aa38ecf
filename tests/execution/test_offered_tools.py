"""Offered == runnable: a batch runs only the tools of the view it is given (issue 8, defect 1),
and every call is reported with the view's tool, also when it never ran."""

from __future__ import annotations

import time
from typing import Any

import pytest

from llmrtc import (
    AbortController,
    CompositeHooks,
    ToolCall,
    ToolCallResult,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolRegistry,
    define_tool,
)
from llmrtc.telemetry.events import ToolEndEvent, ToolErrorEvent, ToolStartEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import InMemoryTelemetry

pytestmark = pytest.mark.anyio


class Recorder(Hooks):
    def __init__(self) -> None:
        self.log: list[tuple[str, str, str]] = []

    def on_tool_start(self, event: ToolStartEvent) -> None:
        self.log.append(("start", event.call_id, event.tool_name))

    def on_tool_error(self, event: ToolErrorEvent) -> None:
        self.log.append(("error", event.call_id, event.status))

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.log.append(("end", event.call_id, event.status))


def counting_registry(counter: dict[str, int]) -> ToolRegistry:
    def make(name: str, policy: Any = None) -> Any:
        async def handler(args: Any, ctx: ToolContext) -> str:
            counter[name] = counter.get(name, 0) + 1
            return name

        return define_tool(ToolDefinition(name, execution_policy=policy), handler)

    return ToolRegistry([make("safe"), make("dangerous"), make("write", "sequential")])


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_registered_tool_the_batch_did_not_offer_never_runs() -> None:
    counter: dict[str, int] = {}
    hooks = Recorder()
    registry = counting_registry(counter)
    executor = ToolExecutor(registry, hooks=hooks)
    offered = registry.scoped(["safe"])
    calls = [
        ToolCall("1", "safe"),
        ToolCall("2", "dangerous"),
        ToolCall("3", "safe"),
        ToolCall("4", "write"),
    ]
    results = await executor.execute(calls, tools=offered)
    assert [r.call_id for r in results] == ["1", "2", "3", "4"]
    assert [r.status for r in results] == ["ok", "not_found", "ok", "not_found"]
    assert results[1].error == "tool 'dangerous' is not available here; tools available: safe."
    assert counter == {"safe": 2}  # neither "dangerous" nor "write" ever ran
    refused = [entry for entry in hooks.log if entry[1] in ("2", "4")]
    assert refused == [
        ("error", "2", "not_found"),
        ("end", "2", "not_found"),
        ("error", "4", "not_found"),
        ("end", "4", "not_found"),
    ]
    assert not any(kind == "start" and name != "safe" for kind, _, name in hooks.log)


async def test_execute_single_takes_the_view_too_and_names_the_scope() -> None:
    counter: dict[str, int] = {}
    registry = counting_registry(counter)
    executor = ToolExecutor(registry)
    billing = registry.scoped(["safe"], scope="stage 'billing'")
    result = await executor.execute_single(ToolCall("1", "dangerous"), tools=billing)
    assert result.status == "not_found"
    assert result.error == (
        "tool 'dangerous' is not available in stage 'billing'; tools available: safe."
    )
    assert counter == {}
    # Without a view, the executor's own registry is what may run.
    assert (await executor.execute_single(ToolCall("2", "dangerous"))).status == "ok"


async def test_extra_tools_of_a_view_run_and_take_their_policy_from_the_view() -> None:
    order: list[str] = []

    async def step(args: Any, ctx: ToolContext) -> None:
        order.append(ctx.call_id)

    registry = ToolRegistry([define_tool(ToolDefinition("step"), step)])
    extra = define_tool(ToolDefinition("only_here", execution_policy="sequential"), step)
    executor = ToolExecutor(registry, default_policy="parallel")
    ended: list[ToolCallResult] = []
    results = await executor.execute(
        [ToolCall("a", "step"), ToolCall("b", "only_here"), ToolCall("c", "step")],
        tools=registry.scoped(["step"], extra_tools=[extra]),
        on_result=ended.append,
    )
    assert [r.status for r in results] == ["ok", "ok", "ok"]
    assert order == ["a", "b", "c"]  # the extra tool's sequential policy was a barrier
    assert [r.call_id for r in ended] == ["a", "b", "c"]
    assert executor.registry.names() == ["step"]  # the executor's registry is untouched


CARD = "4111111111111111"
PAY_SCHEMA = {"type": "object", "properties": {"card": {"type": "string"}, "amount": {}}}


@pytest.mark.parametrize("how", ["aborted", "past its deadline"])
async def test_calls_of_a_batch_aborted_before_it_starts_are_reported_with_their_tool(
    how: str,
) -> None:
    async def pay(args: Any, ctx: ToolContext) -> str:
        return "paid"

    pay_tool = define_tool(
        ToolDefinition("pay", "Pay a bill", PAY_SCHEMA, sensitive_fields=["card"]), pay
    )
    ends: list[ToolEndEvent] = []

    class Ends(Hooks):
        def on_tool_end(self, event: ToolEndEvent) -> None:
            ends.append(event)

    telemetry = InMemoryTelemetry(capture_content=True)
    executor = ToolExecutor(ToolRegistry(), hooks=CompositeHooks([telemetry.hooks, Ends()]))
    if how == "aborted":
        controller = AbortController()
        controller.abort("barge-in")
    else:
        controller = AbortController(deadline=time.monotonic() - 1)
    arguments = f'{{"card": "{CARD}", "amount": 5}}'
    [result] = await executor.execute(
        [ToolCall("c1", "pay", arguments)],
        abort_signal=controller.signal,
        tools=ToolRegistry().scoped([], extra_tools=[pay_tool]),  # the view's tool, no other
    )
    assert result.status == "aborted"
    [end] = ends
    assert (end.tool_description, tuple(end.sensitive_fields)) == ("Pay a bill", ("card",))
    [span] = telemetry.exporter.get_finished_spans()
    assert span.attributes is not None
    recorded = " ".join(str(value) for value in span.attributes.values())
    assert CARD not in recorded and "***" in recorded
