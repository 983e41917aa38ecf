"""`ToolRegistry`: the named set of tools a session may call."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, runtime_checkable

from llmrtc.tools.calls import ToolCall
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.tool import Tool

__all__ = ["CallRouter", "ChainStep", "ToolRegistry"]


@runtime_checkable
class CallRouter(Protocol):
    """A tool that stands for another: `route_call` turns a call of it into the call to run.

    Discovery's `execute_tool(name=..., params=...)` is one: the executor asks the registry to
    `resolve` each call before it looks anything up, so the call that runs (and that hooks,
    spans, policy and timeouts see) is the real tool's, under the model's call id.
    """

    def route_call(self, call: ToolCall) -> ToolCall | None:
        """The call to run instead of `call`, or None to run `call` itself (e.g. its own
        arguments are malformed: its schema then says why)."""
        ...


@runtime_checkable
class ChainStep(Protocol):
    """A tool whose result only prepares another call (discovery's `search_tools`,
    `get_tool`, `list_categories`, `browse_category`): after its result the model still needs
    its tools, even where a provider profile leaves tools out after tool results (the offline
    model's, which otherwise answers instead of taking the next step)."""

    leads_to_call: bool
    """True: a result of this tool asks for a follow-up call."""


def _keys(definition: ToolDefinition) -> list[str]:
    """Every form a tool is looked up by: dotted name, wire name, id with and without version."""
    tool_id = definition.tool_id
    return list(
        dict.fromkeys([definition.name, definition.wire_name, tool_id, tool_id.split("@")[0]])
    )


class ToolRegistry:
    """Tools by name, in registration order. One registry may serve many sessions.

    A tool is found by its name (`crm.lookup`), its wire name (`crm__lookup`, what chat APIs
    send back) or its id (`crm:lookup@1.2.0` or `crm:lookup`); `get`, `has` and `in` accept each.
    A tool registered `hidden=True` runs when called but is never offered (`names()`,
    `definitions()`, iteration and `len` leave it out): discovery mode keeps the real tools
    there so a call that names one directly is auto-routed.

    Example:
        registry = ToolRegistry().register(lookupWeather).register(book_table)
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        """Create a registry, optionally registering `tools` at once."""
        self._tools: dict[str, Tool] = {}  # offered, by name
        self._hidden: dict[str, Tool] = {}  # runnable, never offered, by name
        self._index: dict[str, str] = {}  # every lookup form -> name
        self._refused: dict[str, str] = {}  # every lookup form of a refused tool -> reason
        self._refused_names: dict[str, str] = {}  # every lookup form of a refused tool -> name
        # Set only on a view made by `scoped()`: the registry it was cut from (to tell "not
        # offered here" from "unknown") and the phrase naming where it applies.
        self._base: ToolRegistry | None = None
        self._scope: str | None = None
        # A router view's hidden tools: the lookup index and hidden tools of the registry it
        # was cut from, shared rather than copied (a discovery catalog hides thousands, and a
        # view is cut every turn). Copy-on-write keeps them a snapshot: a registry whose dicts
        # are shared copies them before it changes (`_shared`).
        self._routed: tuple[dict[str, str], dict[str, Tool]] | None = None
        self._shared = False
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
        and the view keeps the tools it was given even if this registry changes later. When
        the view offers a `CallRouter` (discovery's `execute_tool`), it keeps this registry's
        hidden tools too, so the router's targets still run (shared, not copied: cutting a
        view costs the same with 5 hidden tools or 5 000).

        Example:
            billing = registry.scoped(
                ["lookup_invoice", "refund"],
                extra_tools=[transition_tool],  # exists only in this view
                scope="stage 'billing'",
            )
            results = await executor.execute(calls, tools=billing)

        Args:
            names: Registered tool names to offer (any lookup form), in the order to offer them.
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
        unknown = [name for name in names if self.get(name) is None]
        if unknown:
            raise ValueError(
                f"cannot offer unregistered tools {unknown}; registered: {self.names()}"
            )
        offered = [self.get(name) for name in names]
        view = ToolRegistry(dict.fromkeys(t for t in offered if t is not None))
        view.register_all(extra_tools)
        if any(isinstance(t, CallRouter) for t in view):
            if not self._hidden and self._routed is not None:
                view._routed = self._routed  # a view of a view: the same shared tools
            elif self._routed is None:
                self._shared = True
                view._routed = (self._index, self._hidden)
            else:  # hidden tools of its own and shared ones (rare): copy them
                for name in self.hidden_names():
                    hidden = self.get(name)
                    if hidden is not None and hidden.name not in view._index:
                        view.register(hidden, hidden=True)
        view._base = self
        view._scope = scope
        return view

    def register(self, tool: Tool, *, hidden: bool = False) -> ToolRegistry:
        """Add a tool; returns the registry so calls can be chained.

        Args:
            tool: The tool.
            hidden: Run it when called, but never offer it to the model.

        Raises:
            ValueError: if a tool with the same name, wire name or id is already registered
                (`crm.lookup` and a tool named `crm__lookup` would be one name on the wire).
            TypeError: if `tool` is not a `Tool` (use `define_tool` or `@tool`).
        """
        if not isinstance(tool, Tool):
            raise TypeError(
                f"register() takes a Tool (from define_tool or @tool), got {type(tool).__name__}"
            )
        name = tool.definition.name
        if name in self._tools or name in self._hidden:
            raise ValueError(f"a tool named {name!r} is already registered")
        keys = _keys(tool.definition)
        for key in keys:
            other = self._index.get(key)
            if other is not None:
                raise ValueError(
                    f"tool {name!r} collides with the registered tool {other!r}: both are "
                    f"found as {key!r} (the wire form turns '.' into '__'); rename one"
                )
        self._unshare()
        (self._hidden if hidden else self._tools)[name] = tool
        for key in keys:
            self._index[key] = name
        return self

    def register_all(self, tools: Iterable[Tool], *, hidden: bool = False) -> ToolRegistry:
        """Register several tools in order; returns the registry."""
        for item in tools:
            self.register(item, hidden=hidden)
        return self

    def refuse(self, definition: ToolDefinition, reason: str) -> ToolRegistry:
        """Remember a tool that exists but may not run here, so a model that names it anyway
        is told `reason` (e.g. "not permitted by the tools configuration") instead of
        "unknown tool". The tool is not registered: it never runs and is never offered.
        Views cut from this registry refuse it too."""
        for key in _keys(definition):
            self._refused.setdefault(key, f"tool {definition.name!r} is {reason}")
            self._refused_names.setdefault(key, definition.name)
        return self

    def unregister(self, name: str) -> bool:
        """Remove a tool (by any lookup form); returns whether it was registered."""
        canonical = self._index.get(name)
        if canonical is None:
            return False
        self._unshare()
        tool = self._tools.pop(canonical, None) or self._hidden.pop(canonical)
        for key in _keys(tool.definition):
            self._index.pop(key, None)
        return True

    def _unshare(self) -> None:
        """Views share this registry's index and hidden tools: copy them before a change."""
        if self._shared:
            self._index, self._hidden, self._shared = dict(self._index), dict(self._hidden), False

    def get(self, name: str) -> Tool | None:
        """The tool found as `name` (name, wire name or id; hidden tools too), or None."""
        canonical = self._index.get(name)
        if canonical is None:
            if self._routed is None:
                return None
            index, hidden = self._routed
            canonical = index.get(name)
            return None if canonical is None else hidden.get(canonical)
        return self._tools.get(canonical) or self._hidden.get(canonical)

    def has(self, name: str) -> bool:
        """Whether a tool is found as `name` (name, wire name or id; hidden tools too)."""
        return name in self._index or self.get(name) is not None

    def resolve(self, call: ToolCall) -> tuple[ToolCall, Tool | None]:
        """The call to run for `call`, and its tool (None: not found here).

        A call that names a tool by its wire name or id comes back named by the tool's name
        (so hooks and spans carry one name); a call of a `CallRouter` comes back as the call it
        routes to, under the same call id. The executor calls this for every call.
        """
        name = call.name
        tool = self._tools.get(name)  # the common case: the model used the name
        if tool is None:
            tool = self.get(name)
            if tool is None:
                # A refused tool named by wire name or id: hooks and spans carry its name.
                refused = self._refused_name(name)
                if refused is not None and refused != name:
                    call = ToolCall(call.call_id, refused, call.arguments)
                return call, None
        # A plain attribute test: isinstance() against a runtime Protocol costs microseconds
        # per call on the executor's hot path.
        route = getattr(tool, "route_call", None)
        if route is not None:
            routed = route(call)
            if routed is not None:
                target = self.get(routed.name)
                if target is None or hasattr(target, "route_call"):
                    # Not found (or a router itself): missing_tool_message says why.
                    refused = None if target else self._refused_name(routed.name)
                    if refused is not None and refused != routed.name:
                        routed = ToolCall(routed.call_id, refused, routed.arguments)
                    return routed, None
                if routed.name != target.name:
                    routed = ToolCall(routed.call_id, target.name, routed.arguments)
                return routed, target
        if name != tool.name:
            # Built directly: dataclasses.replace costs ~10 µs.
            call = ToolCall(call.call_id, tool.name, call.arguments)
        return call, tool

    def names(self) -> list[str]:
        """Offered names, in registration order (hidden tools are left out)."""
        return list(self._tools)

    def hidden_names(self) -> list[str]:
        """Names of the hidden tools (they run when called, but are never offered)."""
        if self._routed is None:
            return list(self._hidden)
        shared = [name for name in self._routed[1] if name not in self._index]
        return [*self._hidden, *shared]

    def refused_names(self) -> list[str]:
        """Names of the refused tools (see `refuse`), here and in the registry a view was cut
        from: they never run, but a call naming one is answered with the refusal."""
        names: dict[str, None] = {}
        registry: ToolRegistry | None = self
        while registry is not None:
            names.update(dict.fromkeys(registry._refused_names.values()))
            registry = registry._base
        return list(names)

    def leads_to_call(self, name: str) -> bool:
        """Whether the tool found as `name` is a `ChainStep` (its result asks for another
        call); False for unknown names."""
        return bool(getattr(self.get(name), "leads_to_call", False))

    def definitions(self, names: Sequence[str] | None = None) -> list[ToolDefinition]:
        """Definitions of all offered tools, or of `names` (any lookup form) in the order given.

        Raises:
            KeyError: naming every unknown name in `names`.
        """
        if names is None:
            return [t.definition for t in self._tools.values()]
        unknown = [n for n in names if not self.has(n)]
        if unknown:
            raise KeyError(f"unknown tools {unknown}; registered: {self.names()}")
        return [self.get(n).definition for n in names]  # type: ignore[union-attr]

    def missing_tool_message(self, name: str) -> str:
        """What a model is told when it calls `name`, which this registry does not run.

        A refused tool (see `refuse`): why. For a tool the registry a `scoped()` view was cut
        from has but the view does not offer: "tool 'x' is not available here" (or "in stage
        'billing'") and the tools that are. For an unknown name: the closest names
        (`lookupWether` → "did you mean 'lookupWeather'?") and the ones available.
        """
        refusal = self.refusal(name)
        if refusal is not None:
            return refusal + "."
        router = self.get(name)
        if router is not None and hasattr(router, "route_call"):
            # Only a routed call lands here: execute_tool(name="execute_tool", ...).
            return (
                f"{router.name!r} runs other tools and cannot be run through one; call "
                f"{router.name!r} itself with the name of the tool to run."
            )
        available = self.names()
        outside = self._known_outside(name)
        if outside is not None:  # named by its name, whatever spelling the model used
            where = f"in {self._scope}" if self._scope else "here"
            listed = ", ".join(available) if available else "none"
            return f"tool {outside!r} is not available {where}; tools available: {listed}."
        candidates = [*available, *self.hidden_names()]
        by_lower = {n.lower(): n for n in candidates}
        close = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
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

    def refusal(self, name: str) -> str | None:
        """Why `name` is refused (see `refuse`; e.g. "tool 'shell.run' is not permitted by
        the tools configuration"), here or in the registry a view was cut from; None when it
        is not refused."""
        registry: ToolRegistry | None = self
        while registry is not None:
            if name in registry._refused:
                return registry._refused[name]
            registry = registry._base
        return None

    def _refused_name(self, name: str) -> str | None:
        registry: ToolRegistry | None = self
        while registry is not None:
            if name in registry._refused_names:
                return registry._refused_names[name]
            registry = registry._base
        return None

    def _known_outside(self, name: str) -> str | None:
        """The name of the tool found as `name` in a registry this view was cut from (at any
        depth), or None."""
        base = self._base
        while base is not None:
            found = base.get(name)
            if found is not None:
                return found.name
            base = base._base
        return None

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.has(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        hidden = f", hidden={len(self._hidden)}" if self._hidden else ""
        return f"ToolRegistry({self.names()}{hidden})"
