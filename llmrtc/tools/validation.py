"""Checking a call's arguments against its `ToolDefinition`: `prepare_arguments` (what the
executor runs before a handler) and `validate_tool_arguments` (the same check, as a result).

The check itself belongs to the definition's compiled schema (`llmrtc.tools.arguments`, where
`ArgumentsError`, `compile_validator` and `parse_arguments` live).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from llmrtc.tools.arguments import ArgumentSchema, ArgumentsError
from llmrtc.tools.definition import ToolDefinition

__all__ = [
    "ValidationResult",
    "prepare_arguments",
    "validate_tool_arguments",
]


@dataclass(frozen=True)
class ValidationResult:
    """The outcome of checking a call's arguments against its tool's schema."""

    valid: bool
    """True when the arguments parse and satisfy the schema."""
    errors: list[str] = field(default_factory=list)
    """One message per problem, each starting with the JSON path (`units: 'kelvin' is not …`)."""
    arguments: dict[str, Any] | None = None
    """The parsed arguments with schema defaults filled in (None when not valid)."""


def prepare_arguments(
    definition: ToolDefinition,
    raw: Mapping[str, Any] | str | None,
    *,
    validate: bool = True,
    formats: bool = True,
) -> Any:
    """Parse, validate (when `validate`), fill defaults, and build the handler's `args`.

    What the model sent is validated, then the schema's defaults are filled in (each default was
    checked against its own schema when the tool was defined).

    Args:
        definition: The tool whose schema applies.
        raw: The arguments as a mapping or the JSON string a model produced.
        validate: False skips the schema check (JSON is still parsed, defaults still filled).
        formats: False treats `format` as an annotation instead of an assertion.

    Returns:
        A dict, or a validated instance of `definition.parameters_model` when it has one
        (the model then applies its own defaults).

    Raises:
        ArgumentsError: listing every problem with its JSON path.
    """
    compiled: ArgumentSchema = definition._validator  # type: ignore[attr-defined]
    return compiled.prepare(raw, validate=validate, formats=formats)


def validate_tool_arguments(
    definition: ToolDefinition,
    args: Mapping[str, Any] | str | None,
    *,
    validate_formats: bool = True,
) -> ValidationResult:
    """Check arguments (a dict or the raw JSON string a model produced) against a tool's schema.

    This is exactly the check the executor makes before calling a handler: what was sent is
    validated, then the schema's defaults are filled in. Never raises for bad arguments: read
    `.valid` and `.errors`.

    Args:
        definition: The tool whose `parameters` schema applies.
        args: The arguments as a mapping or a JSON string.
        validate_formats: False treats `format` (`"date"`, `"email"`, ...) as an annotation
            instead of an assertion.

    Returns:
        A `ValidationResult`; when valid, `arguments` holds the parsed dict with defaults filled.
    """
    try:
        prepared = prepare_arguments(definition, args, validate=True, formats=validate_formats)
    except ArgumentsError as exc:
        return ValidationResult(valid=False, errors=exc.errors)
    if isinstance(prepared, BaseModel):
        prepared = prepared.model_dump()
    return ValidationResult(valid=True, errors=[], arguments=prepared)
