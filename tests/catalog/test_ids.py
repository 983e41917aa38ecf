"""Tool ids as the catalog speaks them: `namespace:name@semver`, errors naming the bad part."""

from __future__ import annotations

import re

import pytest

from llmrtc.catalog.ids import ToolId, format_tool_id, parse_tool_id, semver_key


def test_a_full_id_parses_into_its_parts() -> None:
    assert parse_tool_id("crm:lookup_customer@1.2.0") == ToolId("crm", "lookup_customer", "1.2.0")


def test_the_version_and_namespace_may_be_left_out() -> None:
    assert parse_tool_id("crm:lookup") == ToolId("crm", "lookup", None)
    assert parse_tool_id("crm.lookup") == ToolId("crm", "lookup", None)
    assert parse_tool_id("lookup@2.0.1") == ToolId(None, "lookup", "2.0.1")


@pytest.mark.parametrize(
    ("text", "part"),
    [
        (":lookup@1.0.0", "the namespace is empty"),
        ("c rm:lookup@1.0.0", "the namespace 'c rm'"),
        ("crm:@1.0.0", "the name is empty"),
        ("crm:look/up@1.0.0", "the name 'look/up'"),
        ("crm:lookup@1.2", "the version '1.2'"),
        ("crm:lookup@v1.2.0", "the version 'v1.2.0'"),
        ("crm:lookup@", "the version ''"),
    ],
)
def test_a_bad_id_names_the_bad_part(text: str, part: str) -> None:
    with pytest.raises(ValueError, match=part):
        parse_tool_id(text)


def test_format_checks_each_part() -> None:
    assert format_tool_id("crm", "lookup", "1.2.0") == "crm:lookup@1.2.0"
    with pytest.raises(ValueError, match=re.escape("the namespace 'c.rm'")):
        format_tool_id("c.rm", "lookup", "1.0.0")
    with pytest.raises(ValueError, match="the version '1'"):
        format_tool_id("crm", "lookup", "1")


def test_format_and_parse_round_trip() -> None:
    for text in ("crm:lookup@1.2.0", "lookup@0.0.1", "a-b:c_d@10.20.30"):
        assert str(parse_tool_id(text)) == text


def test_versions_sort_as_numbers_not_text() -> None:
    versions = ["1.9.0", "1.10.0", "0.99.99", "1.9.10"]
    assert sorted(versions, key=semver_key, reverse=True) == [
        "1.10.0",
        "1.9.10",
        "1.9.0",
        "0.99.99",
    ]
    with pytest.raises(ValueError, match=re.escape("'1.2' is not semver")):
        semver_key("1.2")


@pytest.mark.parametrize("namespace", ["my__shell", "crm_", "a___b"])
def test_a_namespace_that_would_not_survive_the_wire_form_is_refused(namespace: str) -> None:
    from llmrtc.tools import ToolDefinition

    with pytest.raises(ValueError, match="may not contain '__' or end with '_'"):
        parse_tool_id(f"{namespace}:run@1.0.0")
    with pytest.raises(ValueError, match="may not contain '__'"):
        ToolDefinition(name="run", namespace=namespace)
    with pytest.raises(ValueError):
        ToolDefinition(name=f"{namespace}.run")


@pytest.mark.parametrize("version", ["01.2.3", "1.02.3", "1.2.03"])
def test_versions_with_leading_zeros_are_refused(version: str) -> None:
    from llmrtc.tools import ToolDefinition

    with pytest.raises(ValueError, match="without leading zeros"):
        parse_tool_id(f"crm:lookup@{version}")
    with pytest.raises(ValueError, match="semver"):
        ToolDefinition(name="crm.lookup", version=version)
    assert parse_tool_id("crm:lookup@0.10.0").version == "0.10.0"
