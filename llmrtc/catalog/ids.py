"""Tool ids (`namespace:name@semver`) as the catalog speaks them.

The grammar lives on floor 0 (`llmrtc.tools.ids`) so a `ToolDefinition` can name itself; this
module re-exports it so catalog users write `from llmrtc.catalog import parse_tool_id`.
"""

from __future__ import annotations

from llmrtc.tools.ids import (
    DEFAULT_TOOL_VERSION,
    ToolId,
    format_tool_id,
    from_wire_name,
    parse_tool_id,
    to_wire_name,
)

__all__ = [
    "DEFAULT_TOOL_VERSION",
    "ToolId",
    "format_tool_id",
    "from_wire_name",
    "parse_tool_id",
    "semver_key",
    "to_wire_name",
]


def semver_key(version: str) -> tuple[int, int, int]:
    """`"1.10.0"` → `(1, 10, 0)`: sorts versions numerically (`1.10.0` > `1.9.0`).

    Raises:
        ValueError: if `version` is not `MAJOR.MINOR.PATCH`.
    """
    parts = version.split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        raise ValueError(f"version {version!r} is not semver MAJOR.MINOR.PATCH (e.g. 1.2.0)")
    major, minor, patch = (int(part) for part in parts)
    return major, minor, patch
