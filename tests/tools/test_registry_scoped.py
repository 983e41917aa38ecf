"""`ToolRegistry.scoped`: a view that offers some tools, and says why the others are refused."""

from __future__ import annotations

import pytest

from llmrtc import ToolDefinition, ToolRegistry, define_tool


def _tool(name: str) -> object:
    return define_tool(ToolDefinition(name, f"{name} tool"), lambda args, ctx: name)


def _registry() -> ToolRegistry:
    return ToolRegistry([_tool(n) for n in ("lookupWeather", "refund", "safe")])  # type: ignore[misc]


def test_a_view_offers_only_the_names_given_plus_its_own_extra_tools() -> None:
    registry = _registry()
    transition = _tool("playbook_transition")
    view = registry.scoped(["safe", "refund", "safe"], extra_tools=[transition])  # type: ignore[list-item]
    assert view.names() == ["safe", "refund", "playbook_transition"]
    assert [d.name for d in view.definitions()] == view.names()
    assert view.get("lookupWeather") is None and "lookupWeather" not in view
    assert view.get("safe") is registry.get("safe")
    assert registry.names() == ["lookupWeather", "refund", "safe"]  # the base is untouched


def test_unknown_names_are_refused_when_the_view_is_made() -> None:
    with pytest.raises(ValueError, match=r"\['nope', 'nada'\].*registered: \['lookupWeather'"):
        _registry().scoped(["safe", "nope", "nada"])


def test_an_extra_tool_cannot_shadow_an_offered_one() -> None:
    with pytest.raises(ValueError, match="already registered"):
        _registry().scoped(["safe"], extra_tools=[_tool("safe")])  # type: ignore[list-item]


def test_a_registered_tool_not_offered_is_not_available_here() -> None:
    view = _registry().scoped(["safe"])
    assert view.missing_tool_message("refund") == (
        "tool 'refund' is not available here; tools available: safe."
    )
    staged = _registry().scoped([], scope="stage 'billing'")
    assert staged.missing_tool_message("refund") == (
        "tool 'refund' is not available in stage 'billing'; tools available: none."
    )


def test_views_of_views_still_know_what_was_registered() -> None:
    inner = _registry().scoped(["safe", "refund"], scope="stage 'billing'").scoped(["safe"])
    assert "is not available here" in inner.missing_tool_message("lookupWeather")


def test_unknown_names_still_get_did_you_mean_among_the_offered_tools() -> None:
    view = _registry().scoped(["lookupWeather", "safe"], scope="stage 'weather'")
    message = view.missing_tool_message("lookupWether")
    assert message.startswith("unknown tool 'lookupWether'; did you mean 'lookupWeather'?")
    assert "Available tools: lookupWeather, safe." in message
