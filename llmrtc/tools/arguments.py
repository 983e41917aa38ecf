"""A call's arguments against a compiled parameters schema: parsed from what the model sent,
checked (full JSON Schema, Draft 2020-12, with errors a model can act on), defaults filled, and
turned into what the handler takes.

Below `ToolDefinition`, which compiles its schema here once when it is defined; the per-call
check runs on `jsonschema-rs` (ECMA-262 regexes, `format` as an assertion), and `jsonschema`
checks schemas against the meta-schema and words the errors when a call fails.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import jsonschema_rs
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for
from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import from_json
from referencing import Registry

from llmrtc.errors import LLMRTCError
from llmrtc.tools._defaults import DefaultFiller, compile_filler, schema_defaults
from llmrtc.tools._errors import error_texts, format_path, rs_error_texts, wording_validator
from llmrtc.tools.errors import ToolError

logger = logging.getLogger(__name__)

__all__ = [
    "ArgumentSchema",
    "ArgumentsError",
    "compile_validator",
    "parse_arguments",
]


class ArgumentsError(LLMRTCError, ValueError):
    """Arguments that could not be parsed or did not satisfy the schema."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def _compile_rs(schema: dict[str, Any], *, formats: bool) -> jsonschema_rs.Validator:
    # offline: defining a tool never fetches a schema over the network.
    return jsonschema_rs.validator_for(schema, validate_formats=formats, offline=True)


class ArgumentSchema:
    """A tool's parameters schema compiled for the per-call path (one per `ToolDefinition`),
    with the pydantic model its handler takes, if any.

    Built by `compile_validator`; the no-format validator and the `jsonschema` validator that
    words errors are compiled the first time something needs them.
    """

    __slots__ = ("_python", "_unformatted", "filler", "model", "schema", "tool_name", "validator")

    def __init__(
        self,
        schema: dict[str, Any],
        validator: jsonschema_rs.Validator,
        *,
        model: type[BaseModel] | None = None,
        tool_name: str | None = None,
    ) -> None:
        self.schema = schema
        self.validator = validator
        """The jsonschema-rs validator with `format` as an assertion."""
        self.model = model
        """The pydantic model the handler receives (`ToolDefinition.parameters_model`), or
        None: the handler then receives the dict with defaults filled."""
        self.tool_name = tool_name
        """The tool whose parameters these are, named in logs (None for other schemas)."""
        self.filler: DefaultFiller | None = compile_filler(schema)
        """Fills defaults into valid arguments; None when the schema declares none."""
        self._unformatted: jsonschema_rs.Validator | None = None
        self._python: dict[bool, Validator] = {}

    def checker(self, formats: bool) -> jsonschema_rs.Validator:
        """The validator asserting `format` (`formats=True`) or ignoring it."""
        if formats:
            return self.validator
        if self._unformatted is None:
            self._unformatted = _compile_rs(self.schema, formats=False)
        return self._unformatted

    def _python_validator(self, formats: bool) -> Validator:
        if formats not in self._python:
            cls = wording_validator(validator_for(self.schema, default=Draft202012Validator))
            checker = cls.FORMAT_CHECKER if formats else None
            # An empty registry: jsonschema's default one would fetch unknown refs over HTTP.
            self._python[formats] = cls(self.schema, format_checker=checker, registry=Registry())
        return self._python[formats]

    def errors(self, arguments: Any, *, formats: bool = True) -> list[str]:
        """Every violation of the schema, sorted, each prefixed with its JSON path."""
        checker = self.checker(formats)
        if checker.is_valid(arguments):  # the common case: skip collecting and wording
            return []
        found = list(checker.iter_errors(arguments))
        return error_texts(found, lambda: self._python_validator(formats), arguments)

    def prepare(
        self, raw: Mapping[str, Any] | str | None, *, validate: bool = True, formats: bool = True
    ) -> Any:
        """Parse, validate (when `validate`), fill defaults, and build the handler's `args`
        (`llmrtc.tools.validation.prepare_arguments` for a `ToolDefinition`).

        Raises:
            ArgumentsError: listing every problem with its JSON path.
        """
        arguments = parse_arguments(raw)
        if validate:
            checker = self.validator if formats else self.checker(False)
            try:
                valid = checker.is_valid(arguments)
            except ValueError as exc:  # a value JSON cannot hold (a set, bytes, a date)
                raise ArgumentsError([f"arguments must hold only JSON values: {exc}"]) from None
            if not valid:
                raise ArgumentsError(self.errors(arguments, formats=formats))
        model = self.model
        if model is None:
            filler = self.filler
            # parse_arguments returned a fresh dict: the top level may be filled in place.
            return arguments if filler is None else filler.fill(arguments, in_place=True)
        try:
            return model.model_validate(arguments)
        except PydanticValidationError as exc:
            raise ArgumentsError(
                [
                    f"{format_path(err['loc'])}: {err['msg']}" if err["loc"] else err["msg"]
                    for err in exc.errors(include_url=False)
                ]
            ) from None
        except ToolError as exc:  # a validator's message meant for the model
            raise ArgumentsError([str(exc)]) from exc
        except Exception as exc:
            # A validator that raised something pydantic does not wrap (a lookup that failed, a
            # bug): its text may hold internals (a connection string), and a voice agent speaks
            # what the model is told. The detail goes to the log only.
            logger.warning(
                "a validator of tool %r raised %s; the model was told the arguments could not "
                "be checked",
                self.tool_name,
                type(exc).__name__,
                exc_info=exc,
            )
            raise ArgumentsError(
                ["the arguments could not be checked because of an internal error"]
            ) from exc


def compile_validator(
    schema: dict[str, Any],
    *,
    model: type[BaseModel] | None = None,
    tool_name: str | None = None,
) -> ArgumentSchema:
    """Check `schema` (meta-schema, regexes, refs, defaults) and compile its validator once.

    `model` is the pydantic model a handler takes (its parameters' source) and `tool_name` the
    tool they belong to: see `ArgumentSchema`.

    Raises:
        ValueError: naming where the schema is wrong and why.
    """
    try:
        # format_checker=None: `pattern`s are ECMA-262 regexes, which Python's `re` (the
        # meta-schema's "regex" format check) would refuse; jsonschema-rs checks them below.
        meta = validator_for(schema, default=Draft202012Validator)
        meta.check_schema(schema, format_checker=None)  # type: ignore[call-arg]
    except SchemaError as exc:
        where = format_path(exc.absolute_path) or "(root)"
        raise ValueError(
            f"parameters is not a valid JSON Schema at {where}: {exc.message}"
        ) from None
    try:
        validator = _compile_rs(schema, formats=True)
    except jsonschema_rs.ValidationError as exc:
        message = exc.message.splitlines()[0] if exc.message else str(exc)
        if isinstance(exc.kind, jsonschema_rs.ValidationErrorKind.Referencing):
            raise ValueError(
                f"parameters has a $ref that cannot be resolved: {message} (a tool's schema is "
                "never fetched over the network: put what it refers to under $defs)"
            ) from None
        where = format_path(exc.instance_path) or "(root)"
        raise ValueError(f"parameters is not a valid JSON Schema at {where}: {message}") from None
    except ValueError as exc:  # a set, bytes, a date inside the schema
        raise ValueError(f"parameters must hold only JSON values: {exc}") from None
    _check_defaults(schema)
    return ArgumentSchema(schema, validator, model=model, tool_name=tool_name)


def _check_defaults(schema: dict[str, Any]) -> None:
    """A `default` must satisfy the schema it sits in: the handler receives it unchecked."""
    found = list(schema_defaults(schema))
    if not found:
        return
    subschemas = jsonschema_rs.validator_map_for(schema, validate_formats=True, offline=True)
    problems: list[str] = []
    for path, default in found:
        pointer = "#" + "".join(
            "/" + str(part).replace("~", "~0").replace("/", "~1") for part in path
        )
        validator = subschemas.get(pointer)
        if validator is None:
            continue  # not a schema location jsonschema-rs evaluates (e.g. `definitions`)
        where = format_path((*path, "default"))
        try:
            if validator.is_valid(default):
                continue
        except ValueError as exc:  # a set, bytes, a date: nothing a model could be shown
            problems.append(f"the default at {where} is not a JSON value: {exc}")
            continue
        reasons = "; ".join(rs_error_texts(validator.iter_errors(default)))
        problems.append(f"the default at {where} breaks its own schema: {reasons}")
    if problems:
        raise ValueError(
            "; ".join(problems) + " (a default is given to the handler as is: make it satisfy "
            "its schema or drop it; a function parameter `x: T = None` needs the type `T | None`)"
        )


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
            # pydantic-core parses JSON to the same values as `json`, about 7x faster; what it
            # refuses (bad JSON, a lone surrogate) is parsed again by `json`, which words the
            # error (or accepts the surrogate, as it always did).
            text = arguments
            arguments = from_json(text)
        except ValueError:
            try:
                arguments = json.loads(text)
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
