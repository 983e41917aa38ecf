"""The events LLM-backed tools report beside the executor's own: a model fallback and an output
warning.

The events live in `llmrtc.telemetry.model_events` and `Hooks` has their `on_model_fallback` and
`on_tool_warning` methods; `emit_optional` still sends only to hook objects that define the
method, so any object with it (a `Hooks` subclass or not) receives them.
"""

from __future__ import annotations

from llmrtc.telemetry.hooks import CompositeHooks, Hooks, emit
from llmrtc.telemetry.model_events import ModelFallbackEvent, ToolWarningEvent

__all__ = ["ModelFallbackEvent", "ToolWarningEvent", "emit_optional"]


def _leaves(hooks: Hooks | None) -> tuple[Hooks, ...]:
    if hooks is None:
        return ()
    if type(hooks) is CompositeHooks:
        return hooks.hooks
    return (hooks,)


async def emit_optional(hooks: Hooks | None, name: str, event: object) -> None:
    """Send `event` to hook method `name` of each leaf of `hooks` that defines it, with the
    isolation `emit` gives (a hook that raises or stalls is logged, never fails the tool)."""
    chosen = [hook for hook in _leaves(hooks) if callable(getattr(hook, name, None))]
    if chosen:
        await emit(chosen, name, event)
