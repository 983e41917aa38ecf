"""Argument validation: full JSON Schema (Draft 2020-12), with errors a model can act on."""

from __future__ import annotations

import copy
import json
import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

if TYPE_CHECKING:
    from llmrtc.tools.definition import ToolDefinition

__all__ = ["ArgumentsError", "ValidationResult", "prepare_arguments", "validate_tool_arguments"]


@dataclass(frozen=True)
class ValidationResult:
    """The outcome of checking a call's arguments against its tool's schema."""

    valid: bool
    """True when the arguments parse and satisfy the schema."""
    errors: list[str] = field(default_factory=list)
    """One message per problem, each starting with the JSON path (`units: 'kelvin' is not …`)."""
    arguments: dict[str, Any] | None = None
    """The parsed arguments with schema defaults filled in (None when not valid)."""


class ArgumentsError(ValueError):
    """Arguments that could not be parsed or did not satisfy the schema."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def compile_validator(schema: dict[str, Any]) -> Draft202012Validator:
    """Check `schema` against the Draft 2020-12 meta-schema and compile its validator once."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = format_path(exc.absolute_path) or "(root)"
        raise ValueError(
            f"parameters is not a valid JSON Schema at {where}: {exc.message}"
        ) from None
    return Draft202012Validator(schema)


def parse_arguments(arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """Turn a model's raw arguments into a dict.

    A JSON string is parsed (an empty string means no arguments, as some models send for
    tools without parameters). Raises `ArgumentsError` with the parse error otherwise.
    """
    if arguments is None:
        return {}
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, or absurd nesting
            raise ArgumentsError([f"arguments are not valid JSON: {exc}"]) from None
    if not isinstance(arguments, Mapping):
        raise ArgumentsError([f"arguments must be a JSON object, got {_json_type(arguments)}"])
    return dict(arguments)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def format_path(path: Iterable[Any]) -> str:
    """`["items", 2, "name"]` → `items[2].name`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


_MAX_QUOTED = 80
_short_repr = reprlib.Repr()
_short_repr.maxstring = _MAX_QUOTED
_short_repr.maxother = _MAX_QUOTED
_short_repr.maxlist = _short_repr.maxdict = 6


def _format_error(error: ValidationError) -> str:
    # "not valid under any of the given schemas" helps no one: report the most relevant
    # failure inside the anyOf/oneOf branches instead (e.g. a missing nested property).
    while error.context:
        # Skip the branches whose type did not even fit the value ("is not of type 'null'").
        fitting = [e for e in error.context if not (e.validator == "type" and not e.relative_path)]
        error = best_match(fitting or error.context)
    message = error.message
    # jsonschema quotes the offending value; a model that sent 100 kB must not get it back.
    quoted = repr(error.instance)
    if len(quoted) > _MAX_QUOTED:
        message = message.replace(quoted, _short_repr.repr(error.instance))
    where = format_path(error.absolute_path)
    return f"{where}: {message}" if where else message


def schema_errors(validator: Draft202012Validator, arguments: dict[str, Any]) -> list[str]:
    """All schema violations of `arguments`, sorted, each prefixed with its JSON path."""
    errors = list(validator.iter_errors(arguments))
    if not errors:  # the common case: skip formatting entirely
        return []
    return sorted({_format_error(e) for e in errors})


def fill_defaults(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Return `arguments` with missing properties that declare a `default` filled in.

    Descends into nested objects (following local `$ref`s into `$defs`), array items, and the
    one branch of an `anyOf`/`oneOf` that fits the value's type. The input is not modified;
    defaults are deep-copied so handlers can mutate them safely.
    """
    return _fill(schema, arguments, schema.get("$defs", {}), depth=0)  # type: ignore[no-any-return]


def _resolve(schema: dict[str, Any], defs: dict[str, Any], value: Any = None) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref[len("#/$defs/") :])
        if isinstance(target, dict):
            return target
    # Optional[X] is anyOf[X, {type: null}]: follow X when it is the only branch of the value's
    # type. With several candidates (a union of objects) a guess could fill the wrong defaults,
    # so nothing is filled.
    wanted = "object" if isinstance(value, dict) else "array" if isinstance(value, list) else None
    if wanted is None:
        return schema
    for key in ("anyOf", "oneOf"):
        branches = [_resolve(b, defs) for b in schema.get(key, ()) if isinstance(b, dict)]
        fitting = [b for b in branches if b.get("type") == wanted]
        if len(fitting) == 1:
            return fitting[0]
    return schema


def _fill(schema: Any, value: Any, defs: dict[str, Any], depth: int) -> Any:
    if depth > 32 or not isinstance(schema, dict):
        return value  # recursive schemas: stop rather than loop
    schema = _resolve(schema, defs, value)
    if isinstance(value, dict):
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            return value
        filled = dict(value)
        for name, prop in properties.items():
            if not isinstance(prop, dict):
                continue
            if name not in filled:
                resolved = _resolve(prop, defs)
                if "default" in prop or "default" in resolved:
                    filled[name] = copy.deepcopy(prop.get("default", resolved.get("default")))
            else:
                filled[name] = _fill(prop, filled[name], defs, depth + 1)
        return filled
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_fill(schema["items"], item, defs, depth + 1) for item in value]
    return value


def prepare_arguments(
    definition: ToolDefinition, raw: Mapping[str, Any] | str | None, *, validate: bool = True
) -> Any:
    """Parse, fill defaults, validate (when `validate`), and build the handler's `args`.

    Returns a dict, or a validated instance of `definition.parameters_model` when it has one
    (the model then applies its own defaults).

    Raises:
        ArgumentsError: listing every problem with its JSON path.
    """
    arguments = parse_arguments(raw)
    if definition._has_defaults:  # type: ignore[attr-defined]
        arguments = fill_defaults(definition.json_schema, arguments)
    if validate:
        errors = schema_errors(definition._validator, arguments)  # type: ignore[attr-defined]
        if errors:
            raise ArgumentsError(errors)
    model = definition.parameters_model
    if model is None:
        return arguments
    try:
        return model.model_validate(arguments)
    except PydanticValidationError as exc:
        raise ArgumentsError(
            [
                f"{format_path(err['loc'])}: {err['msg']}" if err["loc"] else err["msg"]
                for err in exc.errors(include_url=False)
            ]
        ) from None
    except Exception as exc:  # a user validator that raised something else: still bad input
        raise ArgumentsError([f"{type(exc).__name__}: {exc}"]) from exc


def validate_tool_arguments(
    definition: ToolDefinition, args: Mapping[str, Any] | str | None
) -> ValidationResult:
    """Check arguments (a dict or the raw JSON string a model produced) against a tool's schema.

    This is exactly the check the executor makes before calling a handler. Defaults declared in
    the schema are filled first, so a property that is both required and defaulted passes.
    Never raises for bad arguments: read `.valid` and `.errors`.

    Args:
        definition: The tool whose `parameters` schema applies.
        args: The arguments as a mapping or a JSON string.

    Returns:
        A `ValidationResult`; when valid, `arguments` holds the parsed dict with defaults filled.
    """
    try:
        prepared = prepare_arguments(definition, args, validate=True)
    except ArgumentsError as exc:
        return ValidationResult(valid=False, errors=exc.errors)
    if isinstance(prepared, BaseModel):
        prepared = prepared.model_dump()
    return ValidationResult(valid=True, errors=[], arguments=prepared)
