"""Toolkits and permissions: `Toolkit` (a code-owned bundle of tools, a policy and UI metadata)
and `ToolsConfig` (what an agent may use: one switch per toolkit, per-tool booleans, and
per-namespace allowed / blocked actions)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from llmrtc.tools.ids import from_wire_name, parse_tool_id
from llmrtc.tools.offer import with_reasoning_tool
from llmrtc.tools.tool import Tool

__all__ = ["Toolkit", "ToolsConfig", "canonical_tool_name"]

_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def canonical_tool_name(name: str) -> str:
    """The dotted name (`crm.lookup`) for any form a tool is named by: `crm.lookup`,
    `crm__lookup`, `crm:lookup` or `crm:lookup@1.2.0`.

    Raises:
        ValueError: for a name no tool can have (the bad part named).
    """
    return parse_tool_id(from_wire_name(name) if "." not in name else name).qualified_name


@dataclass(frozen=True)
class Toolkit:
    """A bundle of atomic tools granted by one switch, with the policy text the model gets when
    any of them is offered, and metadata for a settings UI (seed 004).

    Example:
        Toolkit("billing", tools=["billing.refund", "billing.lookup_invoice"],
                policy="Refund only after reading the invoice back to the caller.",
                title="Billing", description="Look up invoices and issue refunds.")
    """

    key: str
    """The switch's name in `ToolsConfig.settings` (letters, digits, `_`, `-`)."""
    tools: Sequence[str] = ()
    """Member tools, by name (`billing.refund`), wire name or id (stored as dotted names)."""
    policy: str = ""
    """System-prompt text for the model, added when any member is offered."""
    title: str = ""
    """Short label for a UI (defaults to `key`)."""
    description: str = ""
    """One sentence for a UI: what granting this toolkit allows."""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _KEY.match(self.key):
            raise ValueError(
                f"toolkit key {self.key!r}: use letters, digits, '_' or '-' (it is a settings key)"
            )
        if isinstance(self.tools, str) or not self.tools:
            raise ValueError(
                f"toolkit {self.key!r}: tools must be a non-empty list of tool names, "
                f"got {self.tools!r}"
            )
        try:
            names = tuple(dict.fromkeys(canonical_tool_name(t) for t in self.tools))
        except (ValueError, TypeError) as exc:
            raise ValueError(f"toolkit {self.key!r}: {exc}") from None
        object.__setattr__(self, "tools", names)
        for attr in ("policy", "title", "description"):
            if not isinstance(getattr(self, attr), str):
                raise ValueError(f"toolkit {self.key!r}: {attr} must be a string")
        if not self.title:
            object.__setattr__(self, "title", self.key)


@dataclass(frozen=True)
class ToolsConfig:
    """What an agent may use, with the one-switch semantics of seed 004.

    For a tool that belongs to toolkits (by its dotted name):
      - a toolkit key set to False turns every member off (a member's own True does not
        override it; when two toolkits disagree, False wins);
      - a toolkit key set to True turns its members on, and a member's own boolean overrides
        (`{"billing": True, "billing.refund": False}` grants billing without refunds);
      - with no toolkit key set, the member's own boolean decides, and a member with none is
        off: a toolkit is a permission that must be granted.
    A tool in no toolkit is on unless its own boolean is False.

    On top of that, `allowed_actions` / `blocked_actions` constrain a namespace by the tools'
    local names (seed 001): a namespace listed in `allowed_actions` offers only those actions;
    an action in `blocked_actions` is off whatever the switches say.

    A tool that is not enabled is invisible (search, listing, the model) and refused at
    execution: `ToolInjection.build` applies `permits` through `catalog.restricted`.

    Example:
        ToolsConfig({"billing": True, "billing.refund": False, "shell.run": False},
                    toolkits=[billing_kit],
                    allowed_actions={"files": ["read", "ls"]},
                    blocked_actions={"db": ["drop_table"]})
    """

    settings: Mapping[str, bool] = field(default_factory=dict)
    """Toolkit keys and tool names (any form) to booleans."""
    toolkits: Sequence[Toolkit] = ()
    """The toolkits the settings' keys may name."""
    allowed_actions: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Namespace → the only local tool names (`read`) it offers."""
    blocked_actions: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Namespace → local tool names that are always off."""
    reasoning_for_call: bool = False
    """Offer every permitted tool with an optional `_reasoningForCall` string (the model says
    why it chose the tool): `offer` adds it; the executor takes the value out of the arguments
    before validation and the handler and records it on hooks and spans."""

    def __post_init__(self) -> None:
        if not isinstance(self.reasoning_for_call, bool):
            raise ValueError(
                f"reasoning_for_call must be true or false, got {self.reasoning_for_call!r}"
            )
        kits: dict[str, Toolkit] = {}
        for kit in self.toolkits:
            if not isinstance(kit, Toolkit):
                raise TypeError(f"toolkits takes Toolkit objects, got {type(kit).__name__}")
            if kit.key in kits:
                raise ValueError(f"two toolkits have the key {kit.key!r}")
            kits[kit.key] = kit
        settings: dict[str, bool] = {}
        for key, value in dict(self.settings).items():
            if not isinstance(value, bool):
                raise ValueError(f"tools config {key!r}: expected true or false, got {value!r}")
            try:
                name = key if key in kits else canonical_tool_name(key)
            except (ValueError, TypeError):
                raise ValueError(
                    f"tools config key {key!r} is neither a toolkit ({sorted(kits)}) nor a tool "
                    "name ('namespace.name', 'namespace__name' or 'namespace:name@1.2.3')"
                ) from None
            settings[name] = value
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "toolkits", tuple(kits.values()))
        for attr in ("allowed_actions", "blocked_actions"):
            object.__setattr__(self, attr, _actions(attr, getattr(self, attr)))
        members: dict[str, list[Toolkit]] = {}
        for kit in kits.values():
            for name in kit.tools:
                members.setdefault(name, []).append(kit)
        object.__setattr__(self, "_members", members)

    def enabled(self, name: str) -> bool:
        """Whether the tool named `name` (dotted name, wire name or id) may be used.

        Raises:
            ValueError: for a name no tool can have.
        """
        name = canonical_tool_name(name)
        namespace, _, local = name.rpartition(".")
        if namespace:
            if local in self.blocked_actions.get(namespace, ()):
                return False
            allowed = self.allowed_actions.get(namespace)
            if allowed is not None and local not in allowed:
                return False
        own = self.settings.get(name)
        kits: list[Toolkit] = self._members.get(name, [])  # type: ignore[attr-defined]
        switches = [self.settings[k.key] for k in kits if k.key in self.settings]
        if False in switches:
            return False
        if switches:  # a granted toolkit: members on unless overridden
            return own is not False
        if kits:  # no switch set: the member's own boolean, off without one
            return own is True
        return own is not False

    def permits(self, tool: Tool) -> bool:
        """`enabled` for a `Tool` (the predicate `catalog.restricted` takes)."""
        return self.enabled(tool.definition.name)

    def offer(self, tool: Tool) -> Tool:
        """`tool` as this config offers it: with `_reasoningForCall` when
        `reasoning_for_call` is on (same handler; its definition built once), else itself."""
        return with_reasoning_tool(tool) if self.reasoning_for_call else tool

    def toolkit(self, key: str) -> Toolkit | None:
        """The toolkit with that key, or None."""
        return next((kit for kit in self.toolkits if kit.key == key), None)

    def toolkits_of(self, names: Iterable[str]) -> list[Toolkit]:
        """The toolkits that hold at least one of `names` (dotted names), in config order."""
        wanted = set(names)
        return [kit for kit in self.toolkits if wanted.intersection(kit.tools)]


def _actions(attr: str, value: Mapping[str, Sequence[str]]) -> dict[str, frozenset[str]]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{attr} must map a namespace to a list of action names, got {value!r}")
    out: dict[str, frozenset[str]] = {}
    for namespace, actions in value.items():
        if not isinstance(namespace, str) or not _KEY.match(namespace):
            raise ValueError(f"{attr}: {namespace!r} is not a namespace name")
        if isinstance(actions, str) or not all(isinstance(a, str) and a for a in actions):
            raise ValueError(
                f"{attr}[{namespace!r}] must be a list of action names (local tool names such "
                f"as 'read'), got {actions!r}"
            )
        out[namespace] = frozenset(actions)
    return out
