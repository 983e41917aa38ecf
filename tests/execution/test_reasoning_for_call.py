"""`_reasoningForCall` (seed 002): an opt-in optional string on every offered schema; the value
is taken out before validation and the handler, and recorded on hooks and (with content
capture) on the `execute_tool` span."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from llmrtc.catalog import ToolsConfig
from llmrtc.execution import ToolExecutor
from llmrtc.telemetry.events import ToolEndEvent, ToolStartEvent
from llmrtc.testing.recording import RecordingHooks
from llmrtc.tools import ToolCall, ToolContext, ToolDefinition, ToolRegistry, define_tool, tool
from llmrtc.tools.definition import REASONING_FIELD
from llmrtc.tools.offer import with_reasoning_field

pytestmark = pytest.mark.anyio

SEEN: list[Any] = []


@tool
async def lookupWeather(city: str) -> str:
    """Current weather for a city."""
    SEEN.append(city)
    return f"sunny in {city}"


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_id: str


async def lookup_order(args: Order, ctx: ToolContext) -> str:
    SEEN.append(args)
    return args.order_id


ORDER = define_tool(ToolDefinition(name="lookupOrder", parameters=Order), lookup_order)
STRICT = define_tool(
    ToolDefinition(
        name="strict",
        parameters={
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "additionalProperties": False,
        },
    ),
    lambda args, ctx: SEEN.append(args) or args,
)
WHY = "The user asked about the weather in Oslo."


def test_offered_definitions_gain_an_optional_reasoning_string_first() -> None:
    executor = ToolExecutor(ToolRegistry([lookupWeather, ORDER]), reasoning_for_call=True)
    offered = executor.offered_definitions(executor.registry.definitions())
    for definition in offered:
        properties = definition.parameters["properties"]
        assert next(iter(properties)) == REASONING_FIELD
        assert properties[REASONING_FIELD]["type"] == "string"
        assert REASONING_FIELD not in definition.parameters.get("required", [])
        assert definition.reasoning_for_call
    # Built once per definition (a request never recompiles a validator).
    assert executor.offered_definitions(executor.registry.definitions())[0] is offered[0]
    plain = ToolExecutor(ToolRegistry([lookupWeather]))
    assert plain.offered_definitions(plain.registry.definitions())[0] is lookupWeather.definition


async def test_reasoning_is_stripped_before_validation_and_recorded_on_hooks() -> None:
    SEEN.clear()
    hooks = RecordingHooks()
    executor = ToolExecutor(
        ToolRegistry([lookupWeather, ORDER, STRICT]), hooks=hooks, reasoning_for_call=True
    )
    results = await executor.execute(
        [
            ToolCall("c1", "lookupWeather", {"city": "Oslo", REASONING_FIELD: WHY}),
            ToolCall("c2", "lookupOrder", '{"_reasoningForCall": "order", "order_id": "A1"}'),
            ToolCall("c3", "strict", {"x": 1, REASONING_FIELD: "strict"}),
            ToolCall("c4", "strict", {"x": 2}),
        ]
    )
    assert [r.status for r in results] == ["ok"] * 4
    # The handler never sees the field: not the function, not the pydantic model (which
    # forbids extras), not a schema with additionalProperties false.
    assert SEEN[0] == "Oslo" and SEEN[1] == Order(order_id="A1") and SEEN[2] == {"x": 1}
    starts = {e.call_id: e.reasoning for e in hooks.of(ToolStartEvent)}
    ends = {e.call_id: e.reasoning for e in hooks.of(ToolEndEvent)}
    assert starts == ends == {"c1": WHY, "c2": "order", "c3": "strict", "c4": None}


async def test_a_reasoning_that_is_not_a_string_is_invalid_arguments() -> None:
    executor = ToolExecutor(ToolRegistry([lookupWeather]), reasoning_for_call=True)
    result = await executor.execute_single(
        ToolCall("c1", "lookupWeather", {"city": "Oslo", REASONING_FIELD: 3})
    )
    assert result.status == "invalid_arguments"
    assert "_reasoningForCall must be a string" in (result.error or "")


async def test_without_the_option_the_field_is_an_ordinary_unknown_argument() -> None:
    executor = ToolExecutor(ToolRegistry([STRICT]))
    result = await executor.execute_single(ToolCall("c1", "strict", {"x": 1, REASONING_FIELD: "y"}))
    assert result.status == "invalid_arguments"


async def test_tools_config_offers_the_field_and_any_executor_strips_it() -> None:
    SEEN.clear()
    config = ToolsConfig(reasoning_for_call=True)
    offered = config.offer(STRICT)
    assert offered.handler is STRICT.handler and offered.definition.reasoning_for_call
    assert config.offer(offered) is offered
    assert ToolsConfig().offer(STRICT) is STRICT
    hooks = RecordingHooks()
    # The executor has no option set: the definition itself says the field is offered.
    executor = ToolExecutor(ToolRegistry([offered]), hooks=hooks)
    result = await executor.execute_single(ToolCall("c1", "strict", {"x": 5, REASONING_FIELD: WHY}))
    assert result.status == "ok" and SEEN == [{"x": 5}]
    assert hooks.of(ToolEndEvent)[0].reasoning == WHY
    with pytest.raises(ValueError, match="reasoning_for_call"):
        ToolsConfig(reasoning_for_call="yes")  # type: ignore[arg-type]


def test_pydantic_parameters_survive_the_added_field() -> None:
    reasoned = with_reasoning_field(ORDER.definition)
    assert reasoned.parameters_model is Order
    assert REASONING_FIELD not in ORDER.definition.parameters["properties"]


async def test_reasoning_is_a_span_attribute_only_with_content_capture() -> None:
    import opentelemetry.sdk.trace as otel  # a core dependency
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from llmrtc.telemetry.otel import OpenTelemetryHooks

    spans: dict[bool, Any] = {}
    for capture in (False, True):
        exporter = InMemorySpanExporter()
        provider = otel.TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        hooks = OpenTelemetryHooks(tracer_provider=provider, capture_content=capture)
        executor = ToolExecutor(ToolRegistry([lookupWeather]), hooks=hooks, reasoning_for_call=True)
        await executor.execute_single(
            ToolCall("c1", "lookupWeather", {"city": "Oslo", REASONING_FIELD: WHY})
        )
        spans[capture] = exporter.get_finished_spans()[0].attributes
    assert "llmrtc.tool.call.reasoning" not in spans[False]
    assert spans[True]["llmrtc.tool.call.reasoning"] == WHY
