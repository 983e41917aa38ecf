"""`ResourceLimits`: how many calls may hold each named resource at once
(`ToolDefinition.resources`), as first-come-first-served pools that one or several executors
draw from.

A plain mapping given to `ToolExecutor(resource_limits={"crm": 2})` caps that executor's calls.
A server that builds one executor per session caps them all together by giving each the same
`ResourceLimits` object: a CRM that allows two requests at a time gets two, whichever sessions
send them. The pools serve one event loop at a time (like the executor's concurrency slots).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from llmrtc.execution._slots import SlotPool
from llmrtc.tools.definition import RESOURCE_NAME_PATTERN

__all__ = ["ResourceLimits"]


class ResourceLimits(Mapping[str, int]):
    """Limits per resource name, and the pools that enforce them; share one object between
    executors to share the limits.

    Example:
        crm = ResourceLimits({"crm": 2})
        def agent_factory() -> TurnRunner:       # one executor per session, one CRM limit
            return TurnRunner(llm, ToolExecutor(registry, resource_limits=crm))

    Raises:
        ValueError: a name that is not a resource name, or a limit that is not an int >= 1.
    """

    def __init__(self, limits: Mapping[str, int]) -> None:
        """Check `limits` and make one pool per resource."""
        if not isinstance(limits, Mapping):
            raise ValueError(
                f"resource_limits must be a mapping of resource name to limit, got {limits!r}"
            )
        pools: dict[str, SlotPool] = {}
        for name, limit in limits.items():
            if not isinstance(name, str) or not RESOURCE_NAME_PATTERN.match(name):
                raise ValueError(
                    f"resource_limits: {name!r} is not a resource name (1-64 letters, digits, "
                    "'_', '.' or '-')"
                )
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise ValueError(
                    f"resource_limits[{name!r}] must be an integer >= 1, got {limit!r}"
                )
            pools[name] = SlotPool(limit)
        self.pools = pools
        """The pool of each resource (the executor takes and releases slots in them)."""

    def __getitem__(self, name: str) -> int:
        return self.pools[name].total

    def __iter__(self) -> Iterator[str]:
        return iter(self.pools)

    def __len__(self) -> int:
        return len(self.pools)

    def in_use(self, name: str) -> int:
        """Calls holding the resource `name` right now (across every executor sharing it)."""
        return self.pools[name].in_use

    def __repr__(self) -> str:
        return f"ResourceLimits({dict(self)!r})"
