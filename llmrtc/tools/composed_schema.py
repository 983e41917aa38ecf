"""Seed 002's composed schema: one JSON object in which a model either calls tools (each call
its tool's parameters flattened beside `"_tool": {"const": name}`) or answers (`output`), used
as a `response_format` so a server constrains decoding to it."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.schema_form import TOOL_FIELD

logger = logging.getLogger(__name__)

__all__ = ["composed_schema"]


def composed_schema(
    definitions: Iterable[ToolDefinition],
    output_schema: Mapping[str, Any] | None = None,
    *,
    allow_both: bool = False,
) -> dict[str, Any]:
    """The composed `{calls, output}` schema (seed 002) a model answers with one JSON object.

    By default (`allow_both=False`) each call is `{"name": <wire name>, "arguments": {...}}`,
    its arguments constrained to that tool's parameters (a `oneOf` over the tools, `name` a
    const), and the object holds either calls (`output` null) or an answer (`calls` empty),
    never both: measured on the offline model, a schema allowing both made it invent an answer
    beside its calls. The root is an `anyOf` of those two branches.

    With `allow_both=True` it is seed 002's own shape: an object root, `calls` first, `output`
    nullable (`"type": [<its type>, "null"]`, `additionalProperties: false` on an answer
    object with `properties`), and each call the tool's own schema flattened, its name in
    `_tool` (`{"_tool": {"const": <wire name>}, <parameters>...}`, `_tool` required first);
    calls and an answer may come together. For seed 002's example (`greetUser(userName)`,
    answer `{summary}`):

        {"type": "object",
         "properties": {
             "calls": {"type": "array",
                       "items": {"type": "object",
                                 "properties": {"_tool": {"const": "greetUser"},
                                                "userName": {"type": "string"}},
                                 "required": ["_tool", "userName"]}},
             "output": {"type": ["object", "null"],
                        "properties": {"summary": {"type": "string"}},
                        "required": ["summary"], "additionalProperties": false}},
         "required": ["calls", "output"]}

    (the seed lists `output` first; the same schema as a dict, but a server that constrains
    decoding writes the keys in this order). An `output` schema with a combinator, `not`,
    `if`, `$ref` or `const` becomes nullable as `{"anyOf": [<schema>, {"type": "null"}]}`.

    Several tools make `items` a `oneOf` of such objects. Without tools `calls` must be empty
    (and `output` is not nullable). Sub-schemas' `$defs` move to the root.

    Args:
        definitions: The tools that may be called.
        output_schema: The answer's schema (default: a string, the reply text).
        allow_both: Seed 002's shape: flattened `_tool` calls and an answer beside them.

    Raises:
        ValueError: with `allow_both`, for a tool with a parameter named `_tool` (the flattened
            call names its tool there).
    """
    hoisted: dict[str, Any] = {}
    definitions = list(definitions)
    output = _hoist(dict(output_schema or {"type": "string"}), "output", hoisted)
    if allow_both:
        flat = [_flat_call_schema(definition, hoisted) for definition in definitions]
        if not flat:
            calls: dict[str, Any] = {"type": "array", "maxItems": 0}
        else:
            calls = {"type": "array", "items": flat[0] if len(flat) == 1 else {"oneOf": flat}}
            output = _nullable(output)
        schema: dict[str, Any] = {
            "type": "object",
            # `calls` first, as in the default shape: a server that constrains decoding writes
            # (and a voice speaks) the answer only once the calls are known, so an answer cut
            # short never says an action was done that no call asked for.
            "properties": {"calls": calls, "output": output},
            "required": ["calls", "output"],
        }
    else:
        nested = [_call_schema(definition, hoisted) for definition in definitions]
        if not nested:
            schema = _branch({"type": "array", "maxItems": 0}, output)
        else:
            with_calls = {"type": "array", "minItems": 1, "items": {"oneOf": nested}}
            schema = {
                "anyOf": [
                    _branch(with_calls, {"type": "null"}),
                    _branch({"type": "array", "maxItems": 0}, output),
                ]
            }
    if hoisted:
        schema["$defs"] = hoisted
    return schema


def _branch(calls: dict[str, Any], output: dict[str, Any]) -> dict[str, Any]:
    # `calls` first: the model decides whether to call before it writes anything else.
    return {
        "type": "object",
        "properties": {"calls": calls, "output": output},
        "required": ["calls", "output"],
        "additionalProperties": False,
    }


def _call_schema(definition: ToolDefinition, hoisted: dict[str, Any]) -> dict[str, Any]:
    arguments = _hoist(dict(definition.json_schema), definition.wire_name, hoisted)
    call: dict[str, Any] = {
        "type": "object",
        "properties": {"name": {"const": definition.wire_name}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    if definition.description:
        call["description"] = definition.description
    return call


def _flat_call_schema(definition: ToolDefinition, hoisted: dict[str, Any]) -> dict[str, Any]:
    """Seed 002's call: the tool's parameters schema with `_tool` (its name) first."""
    parameters = _hoist(dict(definition.json_schema), definition.wire_name, hoisted)
    # ToolDefinition guarantees an object schema: its properties can sit beside `_tool`.
    properties = parameters.get("properties") or {}
    if TOOL_FIELD in properties:
        raise ValueError(
            f"tool {definition.name!r} has a parameter named {TOOL_FIELD!r}, which "
            f"composed_schema(allow_both=True) uses to name the tool in a call: rename the "
            f"parameter, or use allow_both=False (arguments nested under 'arguments')"
        )
    call: dict[str, Any] = {"type": "object"}
    if definition.description:
        call["description"] = definition.description
    call.update({key: value for key, value in parameters.items() if key != "title"})
    call["type"] = "object"
    call["properties"] = {TOOL_FIELD: {"const": definition.wire_name}, **properties}
    call["required"] = [TOOL_FIELD, *(k for k in parameters.get("required", ()) if k != TOOL_FIELD)]
    return call


_NOT_NULLABLE_BY_TYPE = ("oneOf", "anyOf", "allOf", "not", "if", "$ref", "const")
"""Keywords that would still reject null after `"null"` joins the schema's `type`."""


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` that also accepts null: seed 002's `"type": [<type>, "null"]` where the schema
    has a type and nothing else that would reject null (and `additionalProperties: false` on
    an object with `properties`, as in the seed), else `{"anyOf": [schema, {"type": "null"}]}`."""
    kind = schema.get("type")
    if any(key in schema for key in _NOT_NULLABLE_BY_TYPE) or not isinstance(kind, str | list):
        return {"anyOf": [schema, {"type": "null"}]}
    types = [kind] if isinstance(kind, str) else list(kind)
    out: dict[str, Any] = {"type": types if "null" in types else [*types, "null"]}
    out.update({key: value for key, value in schema.items() if key != "type"})
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    if kind == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out


def _hoist(schema: dict[str, Any], prefix: str, hoisted: dict[str, Any]) -> dict[str, Any]:
    """Move a sub-schema's `$defs` to the composed root under `prefix__` names and point its
    `$ref`s there (a `#/$defs/x` inside a nested schema would resolve at the new root)."""
    local: dict[str, Any] = {}
    for key in ("$defs", "definitions"):
        for name, value in (schema.pop(key, None) or {}).items():
            local[f"#/{key}/{name}"] = f"{prefix}__{name}"
            hoisted[f"{prefix}__{name}"] = value
    if not local:
        return schema
    renamed = _rewrite_refs(schema, local)
    for new in local.values():
        hoisted[new] = _rewrite_refs(hoisted[new], local)
    return renamed  # type: ignore[no-any-return]


def _rewrite_refs(value: Any, renames: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        out = {key: _rewrite_refs(item, renames) for key, item in value.items()}
        ref = out.get("$ref")
        if isinstance(ref, str):
            for old, new in renames.items():
                if ref == old or ref.startswith(old + "/"):
                    out["$ref"] = "#/$defs/" + new + ref[len(old) :]
                    break
        return out
    if isinstance(value, list):
        return [_rewrite_refs(item, renames) for item in value]
    return value
