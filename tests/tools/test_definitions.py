"""ToolDefinition, define_tool and the registry: bad definitions fail when defined."""

from __future__ import annotations

import math

import pytest
from pydantic import BaseModel, Field

from llmrtc import ToolDefinition, ToolRegistry, define_tool

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "units": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
    },
    "required": ["city"],
}


def weather_handler(args: dict[str, str], ctx: object) -> dict[str, str]:
    return {"city": args["city"], "units": args["units"]}


def test_to_openai_shape() -> None:
    definition = ToolDefinition("lookupWeather", "Current weather.", WEATHER_SCHEMA, timeout=2.5)
    assert definition.to_openai() == {
        "type": "function",
        "function": {
            "name": "lookupWeather",
            "description": "Current weather.",
            "parameters": WEATHER_SCHEMA,
        },
    }
    assert definition.timeout == 2.5
    assert definition.execution_policy is None


def test_parameters_default_to_an_empty_object_schema() -> None:
    assert ToolDefinition("ping").parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dot.name", "ümlaut", None])
def test_bad_names_are_rejected_at_definition(name: object) -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        ToolDefinition(name, "d")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["a", "lookup_weather", "get-time", "X9", "x" * 64])
def test_good_names_are_accepted(name: str) -> None:
    assert ToolDefinition(name).name == name


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"type": "string"}, "of type 'object'"),
        ({"properties": {}}, "of type 'object'"),
        ("not a schema", "JSON Schema dict or a pydantic model"),
        ({"type": "object", "properties": {"x": {"type": "strnig"}}}, "not a valid JSON Schema"),
    ],
)
def test_non_object_or_invalid_schemas_are_rejected(parameters: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ToolDefinition("t", "d", parameters)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), "5", True])
def test_bad_timeouts_are_rejected(timeout: object) -> None:
    with pytest.raises(ValueError, match="timeout"):
        ToolDefinition("t", timeout=timeout)  # type: ignore[arg-type]


def test_infinite_timeout_means_no_limit() -> None:
    assert ToolDefinition("t", timeout=math.inf).timeout == math.inf


def test_bad_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="execution_policy"):
        ToolDefinition("t", execution_policy="eventually")  # type: ignore[arg-type]


def test_pydantic_model_parameters_become_a_schema_and_keep_the_model() -> None:
    class Booking(BaseModel):
        restaurant: str = Field(description="Where.")
        guests: int = Field(ge=1, le=12)

    definition = ToolDefinition("book", "Book a table.", Booking)
    assert definition.parameters_model is Booking
    schema = definition.parameters
    assert isinstance(schema, dict)
    assert schema["type"] == "object"
    assert schema["required"] == ["restaurant", "guests"]
    assert schema["properties"]["guests"] == {"type": "integer", "minimum": 1, "maximum": 12}
    assert schema["properties"]["restaurant"]["description"] == "Where."
    assert "title" not in schema


def test_define_tool_checks_the_handler() -> None:
    definition = ToolDefinition("t")
    with pytest.raises(ValueError, match="callable"):
        define_tool(definition, "nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(args, ctx\)"):
        define_tool(definition, lambda: None)  # type: ignore[arg-type, return-value]
    tool = define_tool(definition, weather_handler)
    assert tool.definition is definition and tool.handler is weather_handler
    assert tool.is_async is False


def test_registry_operations() -> None:
    weather = define_tool(ToolDefinition("lookupWeather", "w", WEATHER_SCHEMA), weather_handler)
    clock = define_tool(ToolDefinition("clock"), lambda args, ctx: "12:00")
    registry = ToolRegistry()
    assert registry.register(weather) is registry  # chainable
    registry.register_all([clock])
    assert len(registry) == 2
    assert "clock" in registry and registry.has("clock") and "nope" not in registry
    assert registry.names() == ["lookupWeather", "clock"]
    assert registry.get("clock") is clock and registry.get("nope") is None
    assert [d.name for d in registry.definitions()] == ["lookupWeather", "clock"]
    assert [d.name for d in registry.definitions(["clock"])] == ["clock"]
    with pytest.raises(KeyError, match="nope"):
        registry.definitions(["clock", "nope"])
    with pytest.raises(ValueError, match="already registered"):
        registry.register(define_tool(ToolDefinition("clock"), weather_handler))
    with pytest.raises(TypeError, match="define_tool or @tool"):
        registry.register(weather_handler)  # type: ignore[arg-type]
    assert registry.unregister("clock") is True
    assert registry.unregister("clock") is False
    assert registry.names() == ["lookupWeather"]
