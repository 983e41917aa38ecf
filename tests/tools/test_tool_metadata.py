"""Catalog metadata and the interrupt policy on `ToolDefinition` / `@tool`."""

from __future__ import annotations

import pytest

from llmrtc.tools import ToolDefinition, tool
from llmrtc.tools.ids import format_tool_id, from_wire_name, parse_tool_id, to_wire_name


def test_a_namespaced_tool_is_dotted_for_people_and_double_underscored_on_the_wire() -> None:
    definition = ToolDefinition(name="lookup", namespace="crm", version="1.2.0")
    assert definition.name == "crm.lookup"
    assert definition.local_name == "lookup"
    assert definition.wire_name == "crm__lookup"
    assert definition.tool_id == "crm:lookup@1.2.0"
    assert definition.to_openai()["function"]["name"] == "crm__lookup"
    assert ToolDefinition(name="crm.lookup").namespace == "crm"
    assert ToolDefinition(name="crm.lookup", namespace="crm").name == "crm.lookup"


def test_a_tool_without_namespace_keeps_its_name_and_gets_version_one() -> None:
    definition = ToolDefinition(name="lookupWeather")
    assert definition.wire_name == "lookupWeather"
    assert definition.tool_id == "lookupWeather@1.0.0"
    assert definition.on_interrupt == "cancel"


def test_decorator_passes_every_metadata_field() -> None:
    @tool(
        on_interrupt="finish",
        namespace="billing",
        version="2.0.1",
        tags=["payments"],
        aliases=["rembourser"],
        side_effects=["moves money"],
        examples=[{"amount": 5}],
    )
    def refund(amount: int) -> str:
        """Refund an amount."""
        return "ok"

    definition = refund.definition
    assert (definition.name, definition.on_interrupt, definition.version) == (
        "billing.refund",
        "finish",
        "2.0.1",
    )
    assert definition.tags == ("payments",)
    assert definition.aliases == ("rembourser",)
    assert definition.side_effects == ("moves money",)
    assert definition.examples == ({"amount": 5},)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"on_interrupt": "stop"}, "on_interrupt must be 'cancel' or 'finish'"),
        ({"version": "1.0"}, "version must be semver"),
        ({"tags": "billing"}, "tags must be a list"),
        ({"examples": [{"amount": "x"}]}, r"examples\[0\] does not match"),
        ({"namespace": "bad space"}, "namespace"),
        ({"namespace": "n" * 60}, "longer than the 64"),
    ],
)
def test_bad_metadata_is_refused_when_defined(options: dict[str, object], message: str) -> None:
    schema = {"type": "object", "properties": {"amount": {"type": "integer"}}}
    with pytest.raises(ValueError, match=message):
        ToolDefinition(name="refund", parameters=schema, **options)  # type: ignore[arg-type]


def test_tool_ids_parse_and_name_the_bad_part() -> None:
    parsed = parse_tool_id("crm:lookup_customer@1.2.0")
    assert (parsed.namespace, parsed.name, parsed.version) == ("crm", "lookup_customer", "1.2.0")
    assert parse_tool_id("crm:lookup").version is None
    assert parse_tool_id("crm.lookup").namespace == "crm"
    assert str(parsed) == format_tool_id("crm", "lookup_customer", "1.2.0")
    for text, part in [("crm:look up@1.0.0", "name"), ("c rm:x@1.0.0", "namespace")]:
        with pytest.raises(ValueError, match=part):
            parse_tool_id(text)
    with pytest.raises(ValueError, match=r"version '1\.2' is not semver"):
        parse_tool_id("crm:x@1.2")
    assert from_wire_name(to_wire_name("crm.lookup")) == "crm.lookup"
