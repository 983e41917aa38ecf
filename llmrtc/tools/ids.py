"""Tool ids: `namespace:name@semver`, and the dotted / wire forms of a namespaced name."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "DEFAULT_TOOL_VERSION",
    "ToolId",
    "format_tool_id",
    "parse_tool_id",
    "to_wire_name",
    "from_wire_name",
]

DEFAULT_TOOL_VERSION = "1.0.0"
"""The version of a tool that declares none."""

_PART = re.compile(r"^[A-Za-z0-9_-]+$")
# Semver's numeric identifiers: no leading zeros (01.2.3 and 1.2.3 would be one version).
_SEMVER = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
WIRE_SEPARATOR = "__"
"""What joins namespace and name in the wire form (APIs refuse dots in function names)."""


@dataclass(frozen=True, slots=True)
class ToolId:
    """A parsed tool id. `namespace` is None for a tool without one; `version` is None when
    the id named no version (a lookup then takes the highest)."""

    namespace: str | None
    name: str
    version: str | None = None

    @property
    def qualified_name(self) -> str:
        """`namespace.name` (or `name`): the name users and the model see."""
        return f"{self.namespace}.{self.name}" if self.namespace else self.name

    def __str__(self) -> str:
        return format_tool_id(self.namespace, self.name, self.version)


def _check_part(kind: str, value: str, text: str) -> None:
    if not value:
        raise ValueError(f"tool id {text!r}: the {kind} is empty")
    if not _PART.match(value):
        raise ValueError(
            f"tool id {text!r}: the {kind} {value!r} may hold only letters, digits, '_' or '-'"
        )
    if kind == "namespace" and (WIRE_SEPARATOR in value or value.endswith("_")):
        # The wire form joins namespace and name with '__' and splits at the first one:
        # 'my__shell.run' (or 'crm_.run') would not come back as itself.
        raise ValueError(
            f"tool id {text!r}: the namespace {value!r} may not contain '{WIRE_SEPARATOR}' or "
            "end with '_' (the wire form joins namespace and name with '__')"
        )


def _check_version(value: str, text: str) -> None:
    if not _SEMVER.match(value):
        raise ValueError(
            f"tool id {text!r}: the version {value!r} is not semver MAJOR.MINOR.PATCH "
            "without leading zeros (e.g. 1.2.0)"
        )


def parse_tool_id(text: str) -> ToolId:
    """Parse `namespace:name@semver`; the namespace and the version may be left out.

    The grammar is seed 000's (`^([a-z0-9_-]+):([a-z0-9_-]+)@([0-9]+\\.[0-9]+\\.[0-9]+)$`)
    widened in two ways: letters may be upper case (tools like `lookupWeather` exist), and
    `name` alone or `namespace:name` parse too (a lookup then takes the highest version).
    `namespace.name` (the dotted form) is accepted as `namespace:name`.

    Raises:
        ValueError: naming the bad part (namespace, name or version) and what is allowed.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"tool id {text!r}: expected 'namespace:name@1.2.3'")
    rest, at, version = text.partition("@")
    if at:
        _check_version(version, text)
    if ":" in rest:
        namespace, _, name = rest.partition(":")
        _check_part("namespace", namespace, text)
    elif "." in rest:
        namespace, _, name = rest.partition(".")
        _check_part("namespace", namespace, text)
    else:
        namespace, name = None, rest
    _check_part("name", name, text)
    return ToolId(namespace, name, version if at else None)


def format_tool_id(namespace: str | None, name: str, version: str | None = None) -> str:
    """`namespace:name@version`, each part checked (`ValueError` naming the bad one)."""
    text = f"{namespace + ':' if namespace else ''}{name}{'@' + version if version else ''}"
    if namespace is not None:
        _check_part("namespace", namespace, text)
    _check_part("name", name, text)
    if version is not None:
        _check_version(version, text)
    return text


def to_wire_name(name: str) -> str:
    """`crm.lookup` → `crm__lookup`: the form `^[a-zA-Z0-9_-]{1,64}$` APIs accept."""
    return name.replace(".", WIRE_SEPARATOR, 1)


def from_wire_name(name: str) -> str:
    """`crm__lookup` → `crm.lookup` (the first `__` only); a name without `__` is returned
    as it is."""
    return name.replace(WIRE_SEPARATOR, ".", 1)
