"""Toolkits and `ToolsConfig`: seed 004's one-switch semantics, seed 001's constraints."""

from __future__ import annotations

import pytest

from llmrtc.catalog.toolkits import Toolkit, ToolsConfig, canonical_tool_name

KIT = Toolkit(
    "billing",
    tools=["billing.refund", "billing__lookup_invoice"],
    policy="Read the amount back before refunding.",
    title="Billing",
    description="Invoices and refunds.",
)


@pytest.mark.parametrize(
    ("settings", "refund", "lookup"),
    [
        # toolkit key true -> members on by default
        ({"billing": True}, True, True),
        # ... and a member boolean overrides
        ({"billing": True, "billing.refund": False}, False, True),
        # toolkit key false -> all members off, member booleans do not override
        ({"billing": False}, False, False),
        ({"billing": False, "billing.refund": True}, False, False),
        # toolkit key absent -> per-tool booleans; a member with none is off
        ({}, False, False),
        ({"billing.refund": True}, True, False),
        ({"billing__refund": True, "billing:lookup_invoice@1.0.0": False}, True, False),
    ],
)
def test_one_switch_semantics(settings: dict[str, bool], refund: bool, lookup: bool) -> None:
    config = ToolsConfig(settings, toolkits=[KIT])
    assert config.enabled("billing.refund") is refund
    assert config.enabled("billing.lookup_invoice") is lookup
    # every spelling of a name gives the same answer
    assert config.enabled("billing__refund") is refund
    assert config.enabled("billing:refund@2.0.0") is refund


def test_tools_outside_toolkits_are_on_unless_switched_off() -> None:
    config = ToolsConfig({"shell.run": False}, toolkits=[KIT])
    assert config.enabled("files.read")
    assert config.enabled("lookupWeather")
    assert not config.enabled("shell.run")


def test_a_false_toolkit_wins_over_a_true_one() -> None:
    other = Toolkit("money", tools=["billing.refund"])
    config = ToolsConfig({"billing": True, "money": False}, toolkits=[KIT, other])
    assert not config.enabled("billing.refund")
    assert config.enabled("billing.lookup_invoice")


def test_allowed_and_blocked_actions_constrain_a_namespace() -> None:
    config = ToolsConfig(
        {"billing": True},
        toolkits=[KIT],
        allowed_actions={"files": ["read", "ls"]},
        blocked_actions={"db": ["drop_table"], "billing": ["refund"]},
    )
    assert config.enabled("files.read") and config.enabled("files.ls")
    assert not config.enabled("files.write")
    assert config.enabled("db.query") and not config.enabled("db.drop_table")
    # a blocked action stays off even when its toolkit is granted
    assert not config.enabled("billing.refund")
    assert config.enabled("billing.lookup_invoice")
    # tools without a namespace are not constrained
    assert config.enabled("read")


def test_toolkit_metadata_and_members_are_normalised() -> None:
    assert KIT.tools == ("billing.refund", "billing.lookup_invoice")
    assert Toolkit("x", tools=["a.b"]).title == "x"
    config = ToolsConfig({}, toolkits=[KIT])
    assert config.toolkit("billing") is KIT
    assert config.toolkits_of(["billing.refund", "files.read"]) == [KIT]
    assert canonical_tool_name("crm:lookup@1.2.0") == "crm.lookup"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Toolkit("bad key", tools=["a.b"]), "toolkit key 'bad key'"),
        (lambda: Toolkit("k", tools=[]), "non-empty list"),
        (lambda: Toolkit("k", tools=["a.b.c"]), "toolkit 'k'"),
        (lambda: ToolsConfig({"billing": "yes"}, toolkits=[KIT]), "expected true or false"),
        (lambda: ToolsConfig({"no such!": True}), "neither a toolkit"),
        (lambda: ToolsConfig({}, toolkits=[KIT, KIT]), "two toolkits have the key"),
        (lambda: ToolsConfig(allowed_actions={"files": "read"}), "allowed_actions['files']"),
    ],
)
def test_mistakes_are_refused_with_what_and_where(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        make()  # type: ignore[operator]
