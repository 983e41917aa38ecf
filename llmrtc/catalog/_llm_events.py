"""The events LLM-backed tools report beside the executor's own: a model fallback and an output
warning.

They belong with the others in `llmrtc.telemetry.events` (and their `on_*` methods on
`Hooks`); until they are there, they are sent to any hook object that has the method, found
with `getattr`, so a `Hooks` subclass defining `on_model_fallback` receives them today.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmrtc.telemetry.hooks import CompositeHooks, Hooks, emit

__all__ = ["ModelFallbackEvent", "ToolWarningEvent", "emit_optional"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFallbackEvent:
    """An LLM-backed tool's model failed and the tool moves on to its next model."""

    tool_name: str
    """The tool's name (`util.summarize`)."""
    tool_id: str
    """The tool's versioned id (`util:summarize@1.0.0`)."""
    call_id: str
    """The call being served."""
    failed_model: str
    """The `provider/model` id that failed."""
    error: str
    """Why it failed (for logs: may name URLs and status codes, never sent to a model)."""
    next_model: str
    """The `provider/model` id tried next."""
    attempt: int
    """How many models were tried so far (1 for the first failure)."""
    session_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolWarningEvent:
    """Something was off with a tool's output that did not fail the call."""

    tool_name: str
    tool_id: str
    call_id: str
    code: str
    """What kind of warning: `output_schema_mismatch` (JSON output not matching the tool's
    output schema; the output is still the result)."""
    message: str
    """What was wrong, with the JSON paths (content: may quote output values)."""
    model: str | None = None
    """The `provider/model` id that produced the output."""
    session_id: str | None = None
    turn_id: str | None = None


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
