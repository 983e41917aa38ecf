"""@tool builds definitions from signatures and Google-style docstrings."""

from __future__ import annotations

import enum
import warnings
from typing import Annotated, Any, Literal

import anyio
import pytest
from pydantic import BaseModel, Field

from llmrtc import FunctionTool, ToolCall, ToolContext, ToolExecutor, ToolRegistry, tool
from llmrtc.tools.tool import ToolDefinitionWarning


class Units(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Address(BaseModel):
    street: str
    zip_code: str = "00000"


@tool
def lookupWeather(
    city: str,
    ctx: ToolContext,
    units: Literal["celsius", "fahrenheit"] = "celsius",
    days: Annotated[int, Field(ge=1, le=7, description="Forecast days.")] = 1,
    note: str | None = None,
) -> dict[str, Any]:
    """Current weather for a city.

    Uses the house weather service.

    Args:
        city: City name,
            for example "Tokyo".
        units (str): Temperature units.
        days: Overridden by the Field description.

    Returns:
        The weather.
    """
    return {"city": city, "units": units, "days": days, "call_id": ctx.call_id}


def test_schema_from_signature_and_docstring() -> None:
    definition = lookupWeather.definition
    assert definition.name == "lookupWeather"
    assert (
        definition.description == "Current weather for a city.\n\nUses the house weather service."
    )
    schema = definition.parameters
    assert isinstance(schema, dict)
    props = schema["properties"]
    assert set(props) == {"city", "units", "days", "note"}  # ToolContext is not exposed
    assert schema["required"] == ["city"]
    assert props["city"] == {"type": "string", "description": 'City name, for example "Tokyo".'}
    assert props["units"]["enum"] == ["celsius", "fahrenheit"]
    assert props["units"]["default"] == "celsius"
    assert props["units"]["description"] == "Temperature units."
    assert props["days"]["description"] == "Forecast days."
    assert (props["days"]["minimum"], props["days"]["maximum"]) == (1, 7)
    assert props["note"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert schema["additionalProperties"] is False


def test_decorated_function_is_still_callable_directly() -> None:
    assert isinstance(lookupWeather, FunctionTool)
    result = lookupWeather("Oslo", ToolContext(call_id="x", abort_signal=None))  # type: ignore[arg-type]
    assert result == {"city": "Oslo", "units": "celsius", "days": 1, "call_id": "x"}
    assert lookupWeather.__name__ == "lookupWeather"
    assert "Current weather" in (lookupWeather.__doc__ or "")


def test_options_override_name_description_policy_and_timeout() -> None:
    @tool(name="save", description="Save it.", execution_policy="sequential", timeout=3)
    async def save_record(record_id: int) -> str:
        """Ignored summary."""
        return str(record_id)

    definition = save_record.definition
    assert (definition.name, definition.description) == ("save", "Save it.")
    assert (definition.execution_policy, definition.timeout) == ("sequential", 3)
    assert save_record.is_async


def test_enum_nested_model_and_list_types() -> None:
    @tool
    def ship(address: Address, units: Units, tags: list[str] = []) -> None:  # noqa: B006
        """Ship."""

    schema = ship.definition.parameters
    assert isinstance(schema, dict)
    assert schema["properties"]["units"] == {"$ref": "#/$defs/Units"}
    assert schema["$defs"]["Units"]["enum"] == ["celsius", "fahrenheit"]
    assert schema["$defs"]["Address"]["required"] == ["street"]
    assert schema["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "default": [],
    }


def test_context_is_detected_under_postponed_annotations() -> None:
    # This module uses `from __future__ import annotations`: hints are strings until resolved.
    @tool
    async def whoami(ctx: ToolContext, loud: bool = False) -> str:
        """Say the call id."""
        return ctx.call_id

    schema = whoami.definition.parameters
    assert isinstance(schema, dict)
    assert list(schema["properties"]) == ["loud"]


def test_var_args_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"\*args/\*\*kwargs"):

        @tool
        def bad(*names: str) -> None:
            """Bad."""


def test_unresolvable_hints_are_a_clear_error() -> None:
    with pytest.raises(ValueError, match="cannot resolve type hints"):

        @tool
        def bad(x: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
            """Bad."""


@pytest.mark.anyio
async def test_handler_receives_validated_typed_values_and_context() -> None:
    seen: dict[str, Any] = {}

    @tool
    async def ship(address: Address, units: Units, ctx: ToolContext, count: int = 2) -> str:
        """Ship."""
        seen.update(address=address, units=units, count=count, session=ctx.session_id)
        return "shipped"

    executor = ToolExecutor(ToolRegistry([ship]))
    call = ToolCall("c1", "ship", '{"address": {"street": "Main 1"}, "units": "celsius"}')
    result = await executor.execute_single(call, session_id="s1")
    assert result.status == "ok", result.error
    assert seen == {
        "address": Address(street="Main 1"),
        "units": Units.CELSIUS,
        "count": 2,
        "session": "s1",
    }


@pytest.mark.anyio
async def test_positional_only_parameters_are_passed_positionally() -> None:
    @tool
    def add(a: int, b: int, /) -> int:
        """Add."""
        return a + b

    result = await ToolExecutor(ToolRegistry([add])).execute_single(
        ToolCall("c", "add", {"a": 2, "b": 3})
    )
    assert result.result == 5


@pytest.mark.anyio
async def test_extra_arguments_are_reported_not_silently_dropped() -> None:
    result = await ToolExecutor(ToolRegistry([lookupWeather])).execute_single(
        ToolCall("c", "lookupWeather", {"city": "Oslo", "country": "NO"})
    )
    assert result.status == "invalid_arguments"
    assert "'country' was unexpected" in (result.error or "")


def test_sync_tool_runs_in_a_worker_thread() -> None:
    import threading

    threads: list[int] = []

    @tool
    def where() -> str:
        """Where am I?"""
        threads.append(threading.get_ident())
        return "here"

    async def main() -> None:
        result = await ToolExecutor(ToolRegistry([where])).execute_single(ToolCall("c", "where"))
        assert result.result == "here"

    anyio.run(main)
    assert threads and threads[0] != threading.get_ident()


def test_a_tool_without_description_or_type_hints_warns_at_the_decorator_line() -> None:
    with pytest.warns(ToolDefinitionWarning) as caught:

        @tool
        def loose(city, days: int = 1, units="celsius"):  # type: ignore[no-untyped-def]
            return city

    messages = [str(w.message) for w in caught]
    assert messages == [
        "tool 'loose' has no description, so the model sees only its name; add a docstring "
        "or pass @tool(description=...)",
        "tool 'loose': parameter 'city' has no type hint, so the model is told nothing about it "
        "and any JSON value is accepted; annotate it (e.g. 'city: str')",
        "tool 'loose': parameter 'units' has no type hint, so the model is told nothing about "
        "it and any JSON value is accepted; annotate it (e.g. 'units: str')",
    ]
    # co_firstlineno of a decorated function is its (first) decorator's line.
    line = loose.__wrapped__.__code__.co_firstlineno
    assert {(w.filename, w.lineno) for w in caught} == {(__file__, line)}
    assert loose.definition.parameters["properties"]["city"] == {}  # still usable as before


def test_the_warning_points_at_the_call_site_of_the_configured_decorator_too() -> None:
    with pytest.warns(ToolDefinitionWarning, match="no description") as caught:

        @tool(timeout=2.0)
        def quiet(city: str) -> str:
            return city

    line = quiet.__wrapped__.__code__.co_firstlineno
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def test_a_described_typed_tool_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        @tool
        def tidy(city: str, ctx: ToolContext) -> str:
            """Say the city."""
            return city

        @tool(description="Say the city.")
        def tidier(city: str) -> str:
            return city
