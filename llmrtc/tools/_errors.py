"""Error texts a model (or a tool's server) may read: arguments that failed their schema (what
is wrong and where), and which abort reasons may be told (`speakable_reason`).

`jsonschema-rs` decides validity; the texts come from `jsonschema` where it names the same
failure (its wording reads better: `'kelvin' is not one of ['celsius', 'fahrenheit']`), and
from `jsonschema-rs` itself where `jsonschema` cannot see it (ECMA-262 regexes, some formats).
This runs only on the failure path.
"""

from __future__ import annotations

import functools
import re
import reprlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import jsonschema_rs
from jsonschema import ValidationError
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import extend

__all__ = [
    "error_texts",
    "format_path",
    "rs_error_texts",
    "speakable_reason",
    "wording_validator",
]

_MAX_QUOTED = 80
_MAX_TEXT = 160


class _JSONLiterals(reprlib.Repr):
    """`repr` with JSON's literals: `null`, `true`, `false` (the model and a JSON client sent
    those, not Python's `None`, `True`, `False`); strings keep the quotes jsonschema's
    messages already put around them."""

    def repr_NoneType(self, x: None, level: int) -> str:  # reprlib dispatches on the type name
        return "null"

    def repr_bool(self, x: bool, level: int) -> str:
        return "true" if x else "false"


_short_repr = _JSONLiterals()
_short_repr.maxstring = _MAX_QUOTED
_short_repr.maxother = _MAX_QUOTED
_short_repr.maxlist = _short_repr.maxdict = 6


def _literal(value: Any) -> str:
    """`repr(value)` with JSON's `null`, `true` and `false` at any depth (keys in order)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_literal(item) for item in value) + "]"
    return repr(value)


def _shown(value: Any) -> str:
    """`value` as a message quotes it: JSON's literals, cut when its repr is long."""
    if len(repr(value)) > _MAX_QUOTED:
        return _short_repr.repr(value)
    return _literal(value)


_Key = tuple[tuple[str | int, ...], str | None]
"""A failure's identity: the instance path and the keyword that failed there."""


def format_path(path: Iterable[Any]) -> str:
    """`["items", 2, "name"]` → `items[2].name`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _with_path(path: Iterable[Any], message: str) -> str:
    where = format_path(path)
    return f"{where}: {message}" if where else message


def _pattern(
    validator: Validator, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if not isinstance(instance, str):
        return
    try:
        matched = re.search(pattern, instance) is not None
    except re.error:  # ECMA-262 only (`\p{Letter}`): jsonschema-rs words this one
        return
    if not matched:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@functools.cache
def wording_validator(cls: type[Validator]) -> type[Validator]:
    """`cls` whose `pattern` check skips regexes Python's `re` cannot read instead of raising,
    so one ECMA-262 pattern does not cost the wording of every other error."""
    extended: type[Validator] = extend(cls, {"pattern": _pattern})  # type: ignore[no-untyped-call]
    return extended


def _python_text(error: ValidationError) -> str:
    # "not valid under any of the given schemas" helps no one: report the most relevant
    # failure inside the anyOf/oneOf branches instead (e.g. a missing nested property).
    while error.context:
        # Skip the branches whose type did not even fit the value ("is not of type 'null'").
        fitting = [e for e in error.context if not (e.validator == "type" and not e.relative_path)]
        error = best_match(fitting or error.context)
    # jsonschema quotes values with Python's repr (`None is not of type 'integer'`): a JSON
    # client sent `null`, `true`, `false`. The messages that quote a schema value (type, enum,
    # const, not) are written again from the error's own fields; the others start with the
    # value and only that start is rewritten. Never by replacing text elsewhere: a schema's
    # string "None" must stay 'None'. A model that sent 100 kB must not get it back: long
    # values are cut.
    shown = _shown(error.instance)
    expected: Any = error.validator_value
    if error.validator == "type":
        types = [expected] if isinstance(expected, str) else list(expected)
        message = f"{shown} is not of type {', '.join(repr(t) for t in types)}"
    elif error.validator == "enum":
        message = f"{shown} is not one of {_literal(expected)}"
    elif error.validator == "const":
        message = f"{_literal(expected)} was expected"
    elif error.validator == "not":
        message = f"{shown} should not be valid under {_literal(expected)}"
    else:
        message = error.message
        quoted = repr(error.instance)
        if message.startswith(quoted):
            message = shown + message[len(quoted) :]
    return _with_path(error.absolute_path, message)


def _shorten(message: str) -> str:
    # jsonschema-rs quotes the value as JSON; keep its start and the constraint at the end.
    if len(message) <= _MAX_TEXT:
        return message
    return f"{message[: _MAX_TEXT - 60]}...{message[-57:]}"


def _deepest(error: jsonschema_rs.ValidationError) -> list[jsonschema_rs.ValidationError]:
    """The errors inside the anyOf/oneOf branch that came closest, else the error itself."""
    branches: Sequence[list[jsonschema_rs.ValidationError]] = getattr(error.kind, "context", ())
    if not branches:
        return [error]
    depth = len(error.instance_path)
    # A branch that failed only on `type` at the value itself did not even fit the value.
    fitting = [
        b
        for b in branches
        if b and not all(e.kind.name == "type" and len(e.instance_path) == depth for e in b)
    ]
    if not fitting:
        return [error]
    closest = min(fitting, key=len)
    return [inner for e in closest for inner in _deepest(e)]


def rs_error_texts(errors: Iterable[jsonschema_rs.ValidationError]) -> list[str]:
    """jsonschema-rs's own messages, each prefixed with its JSON path, long values cut."""
    return [
        _with_path(inner.instance_path, _shorten(inner.message))
        for error in errors
        for inner in _deepest(error)
    ]


def _rs_key(error: jsonschema_rs.ValidationError) -> _Key:
    keyword = error.schema_path[-1] if error.schema_path else None
    return tuple(error.instance_path), keyword if isinstance(keyword, str) else None


def error_texts(
    rs_errors: list[jsonschema_rs.ValidationError],
    python_validator: Callable[[], Validator],
    instance: Any,
) -> list[str]:
    """One sorted text per failure jsonschema-rs found.

    Args:
        rs_errors: What jsonschema-rs found (the source of truth).
        python_validator: Builds (or returns the cached) `jsonschema` validator for the same
            schema; if it raises, jsonschema-rs's texts are used.
        instance: The arguments that failed.
    """
    python_errors: dict[_Key, list[ValidationError]] = {}
    try:
        for error in python_validator().iter_errors(instance):
            key = (tuple(error.absolute_path), str(error.validator))
            python_errors.setdefault(key, []).append(error)
    except Exception:  # an ECMA-only regex (re.error), or a ref it cannot follow
        pass  # keep what was found so far; jsonschema-rs's own text covers the rest
    texts: set[str] = set()
    for failure in rs_errors:
        matching = python_errors.get(_rs_key(failure))
        if matching:
            texts.update(_python_text(e) for e in matching)
        else:
            texts.update(rs_error_texts([failure]))
    return sorted(texts)


_SPEAKABLE_REASON_CHARS = 40


def speakable_reason(reason: object) -> str | None:
    """An abort reason as it may be told outside the application, else None: a short one-line
    `str` the application chose as a word for it (`"barge-in"`, `"timeout"`). Anything else (an
    exception, an object, a long text) may hold addresses or tokens: the model is then told only
    that the call was aborted, and an MCP server only `"caller cancelled"`. Never calls `str()`
    on the reason (an object's `__str__` may raise or reveal)."""
    if (
        isinstance(reason, str)
        and 0 < len(reason) <= _SPEAKABLE_REASON_CHARS
        and reason.isprintable()
    ):
        return str.__str__(reason)  # a plain str even for a subclass with its own __str__
    return None
