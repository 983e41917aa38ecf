"""Full JSON Schema validation with errors that name the JSON path."""

from __future__ import annotations

from typing import Any

import pytest

from llmrtc import ToolDefinition, validate_tool_arguments

ORDER = ToolDefinition(
    "place_order",
    "Place an order.",
    {
        "type": "object",
        "properties": {
            "customer": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 2, "maxLength": 20},
                    "email": {"type": "string", "pattern": "^[^@]+@[^@]+$"},
                    "tier": {"type": "string", "default": "basic"},
                },
                "required": ["name"],
                "additionalProperties": False,
            },
            "items": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "sku": {"type": "string"},
                        "qty": {"type": "integer", "minimum": 1, "maximum": 10},
                        "gift": {"type": "boolean", "default": False},
                    },
                    "required": ["sku", "qty"],
                },
            },
            "units": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "express": {"type": "boolean", "default": False},
        },
        "required": ["customer", "items"],
    },
)


def valid_order() -> dict[str, Any]:
    return {"customer": {"name": "Ada"}, "items": [{"sku": "A1", "qty": 2}]}


def test_valid_arguments_pass_and_defaults_are_filled_at_every_depth() -> None:
    result = validate_tool_arguments(ORDER, valid_order())
    assert result.valid and result.errors == []
    assert result.arguments == {
        "customer": {"name": "Ada", "tier": "basic"},
        "items": [{"sku": "A1", "qty": 2, "gift": False}],
        "express": False,
    }


def test_input_is_not_mutated() -> None:
    args = valid_order()
    validate_tool_arguments(ORDER, args)
    assert args == valid_order()


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"units": "kelvin"}, "units: 'kelvin' is not one of ['celsius', 'fahrenheit']"),
        ({"items": []}, "items: [] should be non-empty"),
        (
            {"items": [{"sku": "A1", "qty": 11}]},
            "items[0].qty: 11 is greater than the maximum of 10",
        ),
        ({"items": [{"sku": "A1"}]}, "items[0]: 'qty' is a required property"),
        ({"customer": {"name": "A"}}, "customer.name: 'A' is too short"),
        ({"customer": {"name": "Ada", "email": "nope"}}, "customer.email: 'nope' does not match"),
        ({"customer": {"name": "Ada", "x": 1}}, "customer: Additional properties are not allowed"),
        ({"express": "yes"}, "express: 'yes' is not of type 'boolean'"),
    ],
)
def test_each_violation_names_its_json_path(change: dict[str, Any], expected: str) -> None:
    result = validate_tool_arguments(ORDER, {**valid_order(), **change})
    assert not result.valid
    assert any(e.startswith(expected) for e in result.errors), result.errors


def test_all_errors_are_reported_at_once() -> None:
    result = validate_tool_arguments(ORDER, {"units": "kelvin"})
    assert result.errors == [
        "'customer' is a required property",
        "'items' is a required property",
        "units: 'kelvin' is not one of ['celsius', 'fahrenheit']",
    ]


def test_json_strings_are_parsed_and_malformed_json_is_reported() -> None:
    assert validate_tool_arguments(
        ORDER, '{"customer": {"name": "Ada"}, "items": [{"sku": "A", "qty": 1}]}'
    ).valid
    broken = validate_tool_arguments(ORDER, '{"customer": {"name": "Ada"')
    assert not broken.valid and broken.arguments is None
    assert broken.errors[0].startswith("arguments are not valid JSON: ")
    not_object = validate_tool_arguments(ORDER, "[1, 2]")
    assert not_object.errors == ["arguments must be a JSON object, got an array"]


def test_empty_string_means_no_arguments() -> None:
    assert validate_tool_arguments(ToolDefinition("ping"), "").valid
    assert validate_tool_arguments(ToolDefinition("ping"), "  ").arguments == {}


def test_optional_nested_model_reports_the_missing_inner_property() -> None:
    from pydantic import BaseModel

    class Address(BaseModel):
        street: str

    class Args(BaseModel):
        address: Address | None = None

    result = validate_tool_arguments(ToolDefinition("ship", parameters=Args), {"address": {}})
    assert result.errors == ["address: 'street' is a required property"]
