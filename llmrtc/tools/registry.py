"""`ToolRegistry`: the named set of tools a session may call."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Sequence

from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.tool import Tool

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """Tools by name, in registration order. One registry may serve many sessions.

    Example:
        registry = ToolRegistry().register(lookupWeather).register(book_table)
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        """Create a registry, optionally registering `tools` at once."""
        self._tools: dict[str, Tool] = {}
        self.register_all(tools)

    def register(self, tool: Tool) -> ToolRegistry:
        """Add a tool; returns the registry so calls can be chained.

        Raises:
            ValueError: if a tool with the same name is already registered.
            TypeError: if `tool` is not a `Tool` (use `define_tool` or `@tool`).
        """
        if not isinstance(tool, Tool):
            raise TypeError(
                f"register() takes a Tool (from define_tool or @tool), got {type(tool).__name__}"
            )
        name = tool.definition.name
        if name in self._tools:
            raise ValueError(f"a tool named {name!r} is already registered")
        self._tools[name] = tool
        return self

    def register_all(self, tools: Iterable[Tool]) -> ToolRegistry:
        """Register several tools in order; returns the registry."""
        for item in tools:
            self.register(item)
        return self

    def unregister(self, name: str) -> bool:
        """Remove a tool by name; returns whether it was registered."""
        return self._tools.pop(name, None) is not None

    def get(self, name: str) -> Tool | None:
        """The tool with that name, or None."""
        return self._tools.get(name)

    def has(self, name: str) -> bool:
        """Whether a tool with that name is registered."""
        return name in self._tools

    def names(self) -> list[str]:
        """Registered names, in registration order."""
        return list(self._tools)

    def definitions(self, names: Sequence[str] | None = None) -> list[ToolDefinition]:
        """Definitions of all tools, or of `names` in the order given.

        Raises:
            KeyError: naming every unknown name in `names`.
        """
        if names is None:
            return [t.definition for t in self._tools.values()]
        unknown = [n for n in names if n not in self._tools]
        if unknown:
            raise KeyError(f"unknown tools {unknown}; registered: {self.names()}")
        return [self._tools[n].definition for n in names]

    def missing_tool_message(self, name: str) -> str:
        """What a model is told when it calls `name`, which this registry does not have: the
        closest names (`lookupWether` → "did you mean 'lookupWeather'?") and the ones it has."""
        available = self.names()
        by_lower = {n.lower(): n for n in available}
        close = difflib.get_close_matches(name, available, n=3, cutoff=0.6)
        if name.lower() in by_lower and by_lower[name.lower()] not in close:
            close.insert(0, by_lower[name.lower()])
        message = f"unknown tool {name!r}"
        if close:
            message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        if available:
            return message + " Available tools: " + ", ".join(available) + "."
        return message + " (no tools are registered)."

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()})"
