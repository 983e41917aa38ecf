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
        # Set only on a view made by `scoped()`: the registry it was cut from (to tell "not
        # offered here" from "unknown") and the phrase naming where it applies.
        self._base: ToolRegistry | None = None
        self._scope: str | None = None
        self.register_all(tools)

    def scoped(
        self,
        names: Iterable[str],
        *,
        extra_tools: Iterable[Tool] = (),
        scope: str | None = None,
    ) -> ToolRegistry:
        """A view offering only `names` (in that order) plus `extra_tools`.

        Pass the view to `ToolExecutor.execute(..., tools=view)`: what the view offers is exactly
        what may run in that batch. A call to a tool registered here but not offered by the view
        never runs; it gets a `not_found` result whose message says the tool "is not available"
        (in `scope`, when given) and lists the tools that are. This registry is not modified,
        and the view keeps the tools it was given even if this registry changes later.

        Example:
            billing = registry.scoped(
                ["lookup_invoice", "refund"],
                extra_tools=[transition_tool],  # exists only in this view
                scope="stage 'billing'",
            )
            results = await executor.execute(calls, tools=billing)

        Args:
            names: Registered tool names to offer, in the order to offer them.
            extra_tools: Tools that exist only in this view (e.g. a playbook stage's
                `playbook_transition`), offered after `names`.
            scope: Where the view applies, as a phrase that follows "not available in", e.g.
                `"stage 'billing'"`; None says "here".

        Raises:
            ValueError: naming every name in `names` this registry does not have, or when an
                extra tool has the name of another offered tool. (A name listed twice in
                `names` is offered once.)
        """
        names = list(names)
        unknown = [name for name in names if name not in self._tools]
        if unknown:
            raise ValueError(
                f"cannot offer unregistered tools {unknown}; registered: {self.names()}"
            )
        view = ToolRegistry([self._tools[name] for name in dict.fromkeys(names)])
        view.register_all(extra_tools)
        view._base = self
        view._scope = scope
        return view

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
        """What a model is told when it calls `name`, which this registry does not have.

        For a tool the registry a `scoped()` view was cut from has but the view does not offer:
        "tool 'x' is not available here" (or "in stage 'billing'") and the tools that are. For
        an unknown name: the closest names (`lookupWether` → "did you mean 'lookupWeather'?")
        and the ones available.
        """
        available = self.names()
        if self._known_outside(name):
            where = f"in {self._scope}" if self._scope else "here"
            listed = ", ".join(available) if available else "none"
            return f"tool {name!r} is not available {where}; tools available: {listed}."
        by_lower = {n.lower(): n for n in available}
        close = difflib.get_close_matches(name, available, n=3, cutoff=0.6)
        if name.lower() in by_lower and by_lower[name.lower()] not in close:
            close.insert(0, by_lower[name.lower()])
        message = f"unknown tool {name!r}"
        if close:
            message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
        else:
            message += "."
        if available:
            return message + " Available tools: " + ", ".join(available) + "."
        return message + " No tools are registered."

    def _known_outside(self, name: str) -> bool:
        """Whether a registry this view was cut from (at any depth) has `name`."""
        base = self._base
        while base is not None:
            if name in base._tools:
                return True
            base = base._base
        return False

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({self.names()})"
