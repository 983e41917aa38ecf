"""`compose_schema`: seed 002's `{calls, output}` schema, either calls or an answer (default)
or seed 002's own shape with flattened `_tool` calls and an answer beside them (`allow_both`)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from llmrtc.catalog.compose import compose_schema
from llmrtc.tools import ToolDefinition, ToolRegistry, define_tool, tool


@tool
def lookupWeather(city: str) -> str:
    """Current weather for a city."""
    return city


class Item(BaseModel):
    sku: str


class Basket(BaseModel):
    items: list[Item]


basket = define_tool(ToolDefinition(name="shop.order", parameters=Basket), lambda a, c: a)
capital = define_tool(
    ToolDefinition(
        name="capital",
        parameters={"type": "object", "properties": {"country": {"type": "string"}}},
        output_schema={"type": "string"},
    )
)
OUTPUT = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}


def valid(schema: dict[str, Any], answer: Any) -> bool:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema).is_valid(answer)


def test_either_calls_or_an_answer() -> None:
    schema = compose_schema(ToolRegistry([lookupWeather, basket, capital]), OUTPUT)
    call = {"name": "lookupWeather", "arguments": {"city": "Oslo"}}
    assert valid(schema, {"calls": [call], "output": None})
    assert valid(schema, {"calls": [], "output": {"summary": "hi"}})
    assert not valid(schema, {"calls": [call], "output": {"summary": "hi"}})  # not both
    assert not valid(schema, {"calls": [], "output": None})
    assert not valid(schema, {"calls": [{"name": "invented", "arguments": {}}], "output": None})
    assert not valid(
        schema, {"calls": [{"name": "lookupWeather", "arguments": {}}], "output": None}
    )
    # A latent tool's call must carry its result.
    latent = {"name": "capital", "arguments": {"country": "France"}}
    assert not valid(schema, {"calls": [latent], "output": None})
    latent["arguments"]["_output"] = "Paris"  # type: ignore[index]
    assert valid(schema, {"calls": [latent], "output": None})


def test_names_are_wire_names_and_refs_are_hoisted_to_the_root() -> None:
    schema = compose_schema([basket.definition])
    item = {"name": "shop__order", "arguments": {"items": [{"sku": "A1"}]}}
    assert valid(schema, {"calls": [item], "output": None})
    assert not valid(schema, {"calls": [{**item, "arguments": {"items": [{}]}}], "output": None})
    assert set(schema["$defs"]) == {"shop__order__Item"}
    assert valid(schema, {"calls": [], "output": "Your order is on its way."})  # default: text


def test_allow_both_is_seed_002s_original_form_with_an_object_root() -> None:
    schema = compose_schema([lookupWeather], OUTPUT, allow_both=True)
    assert schema["type"] == "object"
    # Seed 002's calls: the tool's parameters flattened beside `_tool` (issue 17; this test
    # used to check the nested {name, arguments} calls the default shape still has).
    call = {"_tool": "lookupWeather", "city": "Oslo"}
    assert valid(schema, {"calls": [call], "output": {"summary": "hi"}})
    assert valid(schema, {"calls": [call], "output": None})
    assert valid(schema, {"calls": [], "output": {"summary": "hi"}})
    nested = {"name": "lookupWeather", "arguments": {"city": "Oslo"}}
    assert not valid(schema, {"calls": [nested], "output": None})
    assert not valid(schema, {"calls": [{"_tool": "lookupWeather"}], "output": None})
    assert not valid(schema, {"calls": [{"_tool": "invented", "city": "Oslo"}], "output": None})


# Seed 002's "Composed Schema (for the LLM)", verbatim.
SEED_002_COMPOSED = """{
  "type": "object",
  "properties": {
    "output": {
      "type": ["object", "null"],
      "properties": {
        "summary": { "type": "string" }
      },
      "required": ["summary"],
      "additionalProperties": false
    },
    "calls": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "_tool": { "const": "greetUser" },
          "userName": { "type": "string" }
        },
        "required": ["_tool", "userName"]
      }
    }
  },
  "required": ["calls", "output"]
}"""


def test_allow_both_gives_seed_002s_example_exactly() -> None:
    greet_user = ToolDefinition(
        name="greetUser",
        parameters={
            "type": "object",
            "properties": {"userName": {"type": "string"}},
            "required": ["userName"],
        },
    )
    schema = compose_schema([greet_user], OUTPUT, allow_both=True)
    seed = json.loads(SEED_002_COMPOSED)
    assert schema == seed
    # Key order: `calls` before `output` (review of issue 17: a constrained server writes the
    # keys in this order, so the answer comes once the calls are known), `_tool` first.
    assert list(schema["properties"]) == ["calls", "output"]
    assert next(iter(schema["properties"]["calls"]["items"]["properties"])) == "_tool"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_allow_both_with_several_tools_latent_tools_and_refs() -> None:
    schema = compose_schema([lookupWeather, basket, capital], allow_both=True)
    weather = {"_tool": "lookupWeather", "city": "Oslo"}
    order = {"_tool": "shop__order", "items": [{"sku": "A1"}]}
    latent = {"_tool": "capital", "country": "France", "_output": "Paris"}
    assert valid(schema, {"calls": [weather, order, latent], "output": "On it."})
    assert valid(schema, {"calls": [weather], "output": None})  # a string answer, or null
    assert not valid(schema, {"calls": [{**latent, "_output": None}], "output": None})
    assert not valid(schema, {"calls": [{**order, "items": [{}]}], "output": None})
    assert set(schema["$defs"]) == {"shop__order__Item"}
    assert schema["properties"]["output"] == {"type": ["string", "null"]}


@pytest.mark.parametrize(
    ("output", "nullable"),
    [
        (
            {"type": "string", "enum": ["yes", "no"]},
            {"type": ["string", "null"], "enum": ["yes", "no", None]},
        ),
        ({"type": ["string", "integer"]}, {"type": ["string", "integer", "null"]}),
        ({"type": "object"}, {"type": ["object", "null"]}),  # no properties: any object stays
        ({"const": "ok"}, {"anyOf": [{"const": "ok"}, {"type": "null"}]}),
    ],
)
def test_allow_both_makes_any_output_schema_nullable(
    output: dict[str, Any], nullable: dict[str, Any]
) -> None:
    schema = compose_schema([lookupWeather], output, allow_both=True)
    assert schema["properties"]["output"] == nullable
    assert valid(schema, {"output": None, "calls": []})


def test_allow_both_refuses_a_parameter_named_tool() -> None:
    clash = ToolDefinition(
        name="router.send",
        parameters={"type": "object", "properties": {"_tool": {"type": "string"}}},
    )
    with pytest.raises(ValueError, match=r"'router.send' has a parameter named '_tool'.*rename"):
        compose_schema([clash], allow_both=True)
    # Nested arguments cannot clash: the default shape takes it.
    schema = compose_schema([clash])
    call = {"name": "router__send", "arguments": {"_tool": "x"}}
    assert valid(schema, {"calls": [call], "output": None})


def test_no_tools_leaves_only_the_answer() -> None:
    schema = compose_schema([], OUTPUT)
    assert valid(schema, {"calls": [], "output": {"summary": "x"}})
    assert not valid(schema, {"calls": [{"name": "x", "arguments": {}}], "output": None})


def test_bad_input_is_refused_with_what_is_allowed() -> None:
    with pytest.raises(TypeError, match="Tools or ToolDefinitions"):
        compose_schema([{"name": "x"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="two tools"):
        compose_schema([lookupWeather, lookupWeather.definition])


@pytest.mark.parametrize(
    ("output", "still_rejected"),
    [
        (
            {
                "type": "object",
                "properties": {"a": {}, "b": {}},
                "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
            },
            {},
        ),
        ({"type": "object", "anyOf": [{"required": ["a"]}]}, {}),
        ({"type": "object", "allOf": [{"required": ["a"]}]}, {}),
        ({"type": "string", "not": {"const": "no"}}, "no"),
        ({"type": "integer", "if": {"minimum": 0}, "then": {"maximum": 9}}, 10),
        ({"type": "string", "const": "ok"}, "ko"),
        ({"$ref": "#/$defs/Answer", "$defs": {"Answer": {"type": "string"}}}, 5),
    ],
)
def test_an_output_that_would_still_reject_null_is_made_nullable_with_any_of(
    output: dict[str, Any], still_rejected: Any
) -> None:
    """Adding "null" to `type` keeps `oneOf`/`anyOf`/`allOf`/`not`/`if`/`$ref`/`const`,
    which reject null: such an output becomes `anyOf: [output, null]`, keeping what it
    rejected before."""
    schema = compose_schema([lookupWeather], output, allow_both=True)
    call = {"_tool": "lookupWeather", "city": "Oslo"}
    assert valid(schema, {"calls": [call], "output": None})
    assert not valid(schema, {"calls": [call], "output": still_rejected})
    nullable = schema["properties"]["output"]
    assert nullable["anyOf"][1] == {"type": "null"}
