"""Full JSON Schema validation with errors that name the JSON path."""

from __future__ import annotations

from typing import Any

import pytest

from llmrtc import ToolDefinition, validate_tool_arguments
from llmrtc.tools.arguments import ArgumentsError
from llmrtc.tools.validation import prepare_arguments

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


CITY = ToolDefinition(
    "city_info",
    "Facts about a city.",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "pattern": r"^\p{Letter}+$"},
            "day": {"type": "string", "format": "date"},
            "units": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        },
        "required": ["city"],
    },
)


def test_patterns_are_ecma_262_regexes() -> None:
    assert validate_tool_arguments(CITY, {"city": "Øslo"}).valid
    result = validate_tool_arguments(CITY, {"city": "Oslo1"})
    assert not result.valid
    # Python's `re` cannot read \p{Letter}: the text is jsonschema-rs's own, still path first.
    assert result.errors == ['city: "Oslo1" does not match "^\\p{Letter}+$"']


def test_formats_are_assertions_by_default_and_can_be_turned_off() -> None:
    assert validate_tool_arguments(CITY, {"city": "Oslo", "day": "2020-02-29"}).valid
    result = validate_tool_arguments(CITY, {"city": "Oslo", "day": "2020-13-45"})
    assert result.errors == ["day: '2020-13-45' is not a 'date'"]
    loose = validate_tool_arguments(
        CITY, {"city": "Oslo", "day": "2020-13-45"}, validate_formats=False
    )
    assert loose.valid and loose.arguments == {
        "city": "Oslo",
        "day": "2020-13-45",
        "units": "celsius",
    }
    assert prepare_arguments(CITY, '{"city": "Oslo", "day": "x"}', formats=False)["day"] == "x"
    with pytest.raises(ArgumentsError, match="is not a 'date'"):
        prepare_arguments(CITY, '{"city": "Oslo", "day": "x"}')


def test_the_formatless_validator_is_compiled_only_when_asked_for() -> None:
    definition = ToolDefinition("lazy", parameters={"type": "object", "properties": {}})
    compiled = definition._validator  # type: ignore[attr-defined]
    validate_tool_arguments(definition, {})
    assert compiled._unformatted is None
    validate_tool_arguments(definition, {}, validate_formats=False)
    assert compiled._unformatted is not None


def test_what_the_model_sent_is_validated_before_defaults_are_filled() -> None:
    # A default must not create obligations the model never had: with the default filled
    # first, `dependentRequired` would demand `unit` for a `scale` the model did not send.
    definition = ToolDefinition(
        "measure",
        parameters={
            "type": "object",
            "properties": {"scale": {"type": "integer", "default": 1}, "unit": {"type": "string"}},
            "dependentRequired": {"scale": ["unit"]},
        },
    )
    result = validate_tool_arguments(definition, {})
    assert result.valid, result.errors
    assert result.arguments == {"scale": 1}
    assert not validate_tool_arguments(definition, {"scale": 2}).valid


def test_mutable_defaults_are_fresh_copies_for_every_call() -> None:
    definition = ToolDefinition(
        "tags",
        parameters={"type": "object", "properties": {"tags": {"type": "array", "default": []}}},
    )
    first = prepare_arguments(definition, "{}")
    first["tags"].append("changed")
    assert prepare_arguments(definition, "{}") == {"tags": []}


def test_long_values_are_cut_in_jsonschema_rs_texts_too() -> None:
    result = validate_tool_arguments(CITY, {"city": "1" * 100_000})
    assert len(result.errors) == 1 and len(result.errors[0]) < 200
    assert result.errors[0].startswith('city: "1111')
    assert result.errors[0].endswith('does not match "^\\p{Letter}+$"')


def test_a_branch_failing_only_on_format_is_reported_inside_the_any_of() -> None:
    definition = ToolDefinition(
        "when",
        parameters={
            "type": "object",
            "properties": {
                "at": {
                    "anyOf": [
                        {"type": "null"},
                        {"type": "string", "format": "date-time", "pattern": r"^\p{N}"},
                    ]
                }
            },
        },
    )
    assert validate_tool_arguments(definition, {"at": None}).valid
    assert validate_tool_arguments(definition, {"at": "2020-01-01T10:00:00Z"}).valid
    result = validate_tool_arguments(definition, {"at": "noon"})
    assert result.errors == [
        'at: "noon" does not match "^\\p{N}"',
        'at: "noon" is not a "date-time"',
    ]


def test_values_json_cannot_hold_are_reported_not_raised() -> None:
    result = validate_tool_arguments(CITY, {"city": "Oslo", "day": {1, 2}})
    assert result.errors == ["arguments must hold only JSON values: Unsupported type: 'set'"]


def test_a_validator_that_crashes_tells_the_model_nothing_internal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from pydantic import BaseModel, field_validator

    from llmrtc import ToolError

    class Order(BaseModel):
        order_id: str

        @field_validator("order_id")
        @classmethod
        def exists(cls, value: str) -> str:
            if value == "bad":
                raise ToolError("There is no order bad; ask the caller to read the number again.")
            raise ConnectionError("could not connect to postgres://admin:hunter2@db:5432/orders")

    definition = ToolDefinition(name="lookup_order", description="Find an order.", parameters=Order)
    with caplog.at_level("WARNING", logger="llmrtc.tools.arguments"):
        crashed = validate_tool_arguments(definition, '{"order_id": "A-1"}')
    assert not crashed.valid
    assert crashed.errors == ["the arguments could not be checked because of an internal error"]
    assert "hunter2" not in " ".join(crashed.errors)
    assert "ConnectionError" in caplog.text  # the detail goes to the log
    refused = validate_tool_arguments(definition, '{"order_id": "bad"}')
    assert refused.errors == ["There is no order bad; ask the caller to read the number again."]


LITERALS = ToolDefinition(
    "literals",
    parameters={
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "name": {"type": "string"},
            "mode": {"enum": ["fast", None, True]},
            "strict": {"const": False},
            "tags": {"type": "array"},
        },
    },
)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"count": None}, "count: null is not of type 'integer'"),
        ({"name": True}, "name: true is not of type 'string'"),
        ({"mode": False}, "mode: false is not one of ['fast', null, true]"),
        ({"strict": True}, "strict: false was expected"),
        (
            {"tags": {"a": None, "b": [True]}},
            "tags: {'a': null, 'b': [true]} is not of type 'array'",
        ),
        ({"tags": {f"k{i}": None for i in range(30)}}, "tags: {'k0': null, 'k1': null, 'k10'"),
    ],
)
def test_messages_write_json_literals_not_python_values(
    arguments: dict[str, Any], expected: str
) -> None:
    # A JSON client sent null/true/false: the message must not show it None/True/False.
    errors = validate_tool_arguments(LITERALS, arguments).errors
    assert len(errors) == 1 and errors[0].startswith(expected), errors
    assert not any(word in errors[0] for word in ("None", "True", "False"))


WORDY = ToolDefinition(
    "set_priority",
    parameters={
        "type": "object",
        "properties": {
            "priority": {"enum": ["None", "Low", "High"]},
            "answer": {"enum": ["True", None]},
            "label": {"const": "None"},
            "flag": {"type": "boolean"},
        },
    },
)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # The schema's strings "None"/"true" are strings: a model told 'null' would send "null".
        ({"priority": None}, "priority: null is not one of ['None', 'Low', 'High']"),
        ({"answer": True}, "answer: true is not one of ['True', null]"),
        ({"label": None}, "label: 'None' was expected"),
        ({"flag": "None"}, "flag: 'None' is not of type 'boolean'"),
    ],
)
def test_schema_strings_that_read_like_literals_stay_strings(
    arguments: dict[str, Any], expected: str
) -> None:
    assert validate_tool_arguments(WORDY, arguments).errors == [expected]
