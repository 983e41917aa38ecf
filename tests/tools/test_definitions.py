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


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "a.b.c", ".name", "ümlaut", None])
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


@pytest.mark.parametrize(
    ("parameters", "where", "why"),
    [
        (
            {
                "type": "object",
                "properties": {"alpha": {"type": "number", "maximum": 3, "default": 5}},
            },
            "properties.alpha.default",
            "5 is greater than the maximum of 3",
        ),
        (
            {
                "type": "object",
                "properties": {"day": {"$ref": "#/$defs/Day", "default": "someday"}},
                "$defs": {"Day": {"type": "string", "format": "date"}},
            },
            "properties.day.default",
            '"someday" is not a "date"',
        ),
        (
            {
                "type": "object",
                "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
                "$defs": {
                    "Item": {
                        "type": "object",
                        "properties": {"qty": {"type": "integer", "minimum": 1, "default": 0}},
                    }
                },
            },
            "$defs.Item.properties.qty.default",
            "0 is less than the minimum of 1",
        ),
    ],
)
def test_a_default_that_breaks_its_own_schema_fails_when_defined(
    parameters: dict[str, object], where: str, why: str
) -> None:
    with pytest.raises(ValueError) as caught:
        ToolDefinition("t", "d", parameters)
    message = str(caught.value)
    assert message.startswith(f"tool 't': the default at {where} breaks its own schema: ")
    assert why in message


def test_a_pydantic_default_that_breaks_its_type_fails_when_defined() -> None:
    class Args(BaseModel):
        note: str = None  # type: ignore[assignment]

    with pytest.raises(ValueError, match=r"properties\.note\.default breaks its own schema"):
        ToolDefinition("t", "d", Args)


def test_defaults_that_fit_and_data_named_default_are_accepted() -> None:
    ToolDefinition(
        "t",
        parameters={
            "type": "object",
            "properties": {
                "default": {"type": "string"},  # a property *named* default is not a default
                "mode": {"enum": [{"default": 1}], "default": {"default": 1}},
                "tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]},
            },
        },
    )


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"type": "object", "properties": {"x": {"type": "string", "pattern": "(("}}},
            "not a valid JSON Schema at properties.x.pattern",
        ),
        (
            {"type": "object", "properties": {"x": {"$ref": "http://example.com/x.json"}}},
            "http://example.com/x.json",
        ),
        (
            {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
            "/$defs/missing",
        ),
    ],
)
def test_bad_regexes_and_refs_fail_when_defined_and_nothing_is_fetched(
    parameters: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("$", r"\$")):
        ToolDefinition("t", "d", parameters)


def test_ecma_262_patterns_are_accepted_in_definitions() -> None:
    ToolDefinition(
        "t",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string", "pattern": r"^\p{Letter}+$"}},
            "patternProperties": {r"^\p{Lu}": {"type": "integer"}},
        },
    )


def test_a_schema_holding_non_json_values_fails_when_defined() -> None:
    with pytest.raises(ValueError, match="parameters must hold only JSON values"):
        ToolDefinition("t", parameters={"type": "object", "properties": {"x": {"default": {1}}}})
