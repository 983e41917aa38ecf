"""Schema defaults: filled into valid arguments per call, checked against their schema once.

The per-call filler is compiled from the schema when the tool is defined, so a call only walks
the properties that declare a default (and the nested schemas that lead to one).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

__all__ = ["DefaultFiller", "compile_filler", "fill_defaults", "schema_defaults"]

_MAX_DEPTH = 32
"""Nesting depth past which defaults are not filled (recursive schemas, absurd values)."""

# Keywords whose value is one subschema, a name → subschema map, or a list of subschemas.
# Only these locations hold schemas; a `"default"` anywhere else (a property named "default",
# a value inside `enum` or `examples`) is data, not a default.
_ONE_SCHEMA = (
    "additionalProperties",
    "additionalItems",
    "contains",
    "contentSchema",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_SCHEMA_MAPS = ("$defs", "definitions", "dependentSchemas", "dependencies", "patternProperties")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")


def schema_defaults(
    schema: Any, path: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every `(schema path, default)` pair in `schema`, at any depth, in document order."""
    if not isinstance(schema, dict):
        return
    if "default" in schema:
        yield path, schema["default"]
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, sub in properties.items():
            yield from schema_defaults(sub, (*path, "properties", name))
    for key in _ONE_SCHEMA:
        if isinstance(schema.get(key), dict):
            yield from schema_defaults(schema[key], (*path, key))
    for key in _SCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                yield from schema_defaults(sub, (*path, key, name))
    for key in _SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            for index, sub in enumerate(schema[key]):
                yield from schema_defaults(sub, (*path, key, index))


class DefaultFiller:
    """Fills the defaults of one schema node into a value of that node.

    `defaults` are `(name, value, needs_copy)` for missing properties; `children` descend into
    present properties; `items` descends into array elements.
    """

    __slots__ = ("children", "defaults", "items")

    def __init__(self) -> None:
        self.defaults: tuple[tuple[str, Any, bool], ...] = ()
        self.children: tuple[tuple[str, DefaultFiller], ...] = ()
        self.items: DefaultFiller | None = None

    def fill(self, value: Any, *, in_place: bool = False, depth: int = 0) -> Any:
        """`value` with missing defaults filled; the input is copied only where it changes."""
        if depth > _MAX_DEPTH:
            return value
        if type(value) is dict:
            out = value if in_place else None
            for name, default, needs_copy in self.defaults:
                if name not in value:
                    if out is None:
                        out = dict(value)
                    # A mutable default is copied so a handler may change it freely.
                    out[name] = copy.deepcopy(default) if needs_copy else default
            for name, child in self.children:
                if name in value:
                    old = value[name]
                    new = child.fill(old, depth=depth + 1)
                    if new is not old:
                        if out is None:
                            out = dict(value)
                        out[name] = new
            return value if out is None else out
        if type(value) is list and self.items is not None:
            items = self.items
            filled = [items.fill(item, depth=depth + 1) for item in value]
            if any(new is not old for new, old in zip(filled, value, strict=True)):
                return filled
        return value


def _follow_ref(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(ref[len("#/$defs/") :])
        if isinstance(target, dict):
            return target
    return schema


def _branch(schema: dict[str, Any], defs: dict[str, Any], wanted: str) -> dict[str, Any]:
    # Optional[X] is anyOf[X, {type: null}]: follow X when it is the only branch of the value's
    # type. With several candidates (a union of objects) a guess could fill the wrong defaults,
    # so nothing is filled.
    for key in ("anyOf", "oneOf"):
        branches = [_follow_ref(b, defs) for b in schema.get(key, ()) if isinstance(b, dict)]
        fitting = [b for b in branches if b.get("type") == wanted]
        if len(fitting) == 1:
            return fitting[0]
    return schema


def compile_filler(schema: dict[str, Any]) -> DefaultFiller | None:
    """The filler for a tool's parameters schema, or None when nothing can ever be filled."""
    defs = schema.get("$defs")
    return _compile(schema, defs if isinstance(defs, dict) else {}, {})


def _compile(
    schema: Any, defs: dict[str, Any], seen: dict[int, DefaultFiller]
) -> DefaultFiller | None:
    if not isinstance(schema, dict):
        return None
    schema = _follow_ref(schema, defs)
    if id(schema) in seen:  # a recursive schema: reuse the node (its depth guard stops it)
        return seen[id(schema)]
    node = seen[id(schema)] = DefaultFiller()
    as_object = _branch(schema, defs, "object")
    properties = as_object.get("properties")
    defaults: list[tuple[str, Any, bool]] = []
    children: list[tuple[str, DefaultFiller]] = []
    if isinstance(properties, dict):
        for name, prop in properties.items():
            if not isinstance(prop, dict):
                continue
            resolved = _follow_ref(prop, defs)
            if "default" in prop or "default" in resolved:
                default = prop["default"] if "default" in prop else resolved["default"]
                defaults.append((name, default, isinstance(default, dict | list)))
            child = _compile(prop, defs, seen)
            if child is not None:
                children.append((name, child))
    node.defaults, node.children = tuple(defaults), tuple(children)
    items = _branch(schema, defs, "array").get("items")
    node.items = _compile(items, defs, seen)
    # Nothing below fills anything. (A cycle may already hold this node; it then does nothing.)
    return node if node.defaults or node.children or node.items else None


def fill_defaults(schema: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Return `arguments` with missing properties that declare a `default` filled in.

    Descends into nested objects (following local `$ref`s into `$defs`), array items, and the
    one branch of an `anyOf`/`oneOf` that fits the value's type. The input is not modified;
    defaults are deep-copied so handlers can mutate them safely.
    """
    filler = compile_filler(schema)
    return arguments if filler is None else filler.fill(arguments)
