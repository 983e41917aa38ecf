"""`RecordingHooks`: a `Hooks` that remembers every event it is sent, in order, for assertions.

Example:
    hooks = RecordingHooks()
    executor = ToolExecutor(registry, hooks=hooks)
    await executor.execute([ToolCall("c1", "lookup_weather", {"city": "Oslo"})])
    assert hooks.names() == ["on_tool_start", "on_tool_end"]
    (end,) = hooks.of(ToolEndEvent)
    assert end.status == "ok"
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from llmrtc.telemetry.hooks import HOOK_NAMES, Hooks

__all__ = ["RecordingHooks"]

EventT = TypeVar("EventT")


class RecordingHooks(Hooks):
    """Records `(hook name, event)` for every `on_*` hook, in the order the library calls them.

    Every method is synchronous and only appends (so recording never changes timing or
    cancellation), and the library awaits hooks before it moves on: by the time `execute` or a
    turn returns, its events are here. One object may be shared by several executors, runners
    and event loops. It does not override `tool_call_context`: it adds nothing around handlers.
    """

    def __init__(self) -> None:
        """Start with nothing recorded."""
        self.calls: list[tuple[str, Any]] = []
        """Every `(hook name, event)` received, oldest first."""

    @property
    def events(self) -> list[Any]:
        """Every event received, oldest first."""
        return [event for _, event in self.calls]

    def names(self) -> list[str]:
        """The hook name of every event received, oldest first (e.g. `"on_tool_end"`)."""
        return [name for name, _ in self.calls]

    def of(self, event_type: type[EventT], **fields: Any) -> list[EventT]:
        """The events of `event_type` received, oldest first, keeping only those whose fields
        equal every keyword given: `hooks.of(ToolEndEvent, status="ok", call_id="c1")`.

        Raises:
            AttributeError: A keyword names no field of `event_type`.
        """
        found = [event for _, event in self.calls if isinstance(event, event_type)]
        if fields:
            unknown = [name for name in fields if name not in _fields_of(event_type)]
            if unknown:
                raise AttributeError(
                    f"{event_type.__name__} has no field {unknown[0]!r}; its fields are "
                    f"{', '.join(_fields_of(event_type))}"
                )
            found = [e for e in found if all(getattr(e, k) == v for k, v in fields.items())]
        return found

    def clear(self) -> None:
        """Forget everything recorded so far."""
        self.calls.clear()

    def __repr__(self) -> str:
        return f"RecordingHooks({len(self.calls)} events)"


def _fields_of(event_type: type[Any]) -> tuple[str, ...]:
    fields = getattr(event_type, "__dataclass_fields__", None)
    return tuple(fields) if fields is not None else tuple(getattr(event_type, "__slots__", ()))


def _recorder(name: str) -> Callable[[RecordingHooks, Any], None]:
    def record(self: RecordingHooks, event: Any) -> None:
        self.calls.append((name, event))  # one atomic append: safe from any thread

    record.__name__ = name
    record.__qualname__ = f"RecordingHooks.{name}"
    record.__doc__ = f"Record the `{name}` event."
    return record


for _name in HOOK_NAMES:
    setattr(RecordingHooks, _name, _recorder(_name))
