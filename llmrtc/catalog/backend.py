"""`ToolBackend`: a source of tools for a `ToolCatalog`, and `LocalBackend`, the in-memory one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from llmrtc.tools.ids import parse_tool_id
from llmrtc.tools.tool import Tool

__all__ = ["LocalBackend", "ToolBackend"]


@runtime_checkable
class ToolBackend(Protocol):
    """Where a catalog gets tools from (in-memory, a remote catalog, an MCP server, ...).

    A catalog calls `list()` when it rebuilds its cache (at first use and after `invalidate()`),
    so a backend whose tools change should ask its catalog to `invalidate()`. A `list()` that
    raises is reported and skipped by the catalog; the other backends still serve.
    """

    @property
    def name(self) -> str:
        """Unique among the backends of one catalog (`"local"`, `"crm-remote"`)."""
        ...

    async def list(self) -> list[Tool]:
        """Every tool this backend offers."""
        ...

    async def get(self, tool_id: str) -> Tool | None:
        """The tool with exactly this id (`namespace:name@1.2.0`), or None."""
        ...


class LocalBackend:
    """Tools held in memory, keyed by their `tool_id`.

    Example:
        backend = LocalBackend([lookup_customer, issue_refund], name="local")
    """

    def __init__(self, tools: Iterable[Tool] = (), *, name: str = "local") -> None:
        """Hold `tools` under the backend name `name`.

        Raises:
            ValueError: if two tools share a tool id, or `name` is empty.
            TypeError: if an item is not a `Tool`.
        """
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a backend name must be a non-empty string, got {name!r}")
        self._name = name
        self._tools: dict[str, Tool] = {}
        for item in tools:
            if not isinstance(item, Tool):
                raise TypeError(
                    f"backend {name!r}: expected Tool objects (from define_tool or @tool), "
                    f"got {type(item).__name__}"
                )
            tool_id = item.definition.tool_id
            if tool_id in self._tools:
                raise ValueError(f"backend {name!r}: two tools have the id {tool_id!r}")
            self._tools[tool_id] = item

    @property
    def name(self) -> str:
        """The backend's name."""
        return self._name

    async def list(self) -> list[Tool]:
        """The tools, in the order given."""
        return list(self._tools.values())

    async def get(self, tool_id: str) -> Tool | None:
        """The tool with exactly this id, or None (also for a malformed id)."""
        try:
            parsed = parse_tool_id(tool_id)
        except ValueError:
            return None
        return self._tools.get(str(parsed))

    def __repr__(self) -> str:
        return f"LocalBackend(name={self._name!r}, tools={len(self._tools)})"
