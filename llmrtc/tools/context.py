"""`ToolContext`: what a running tool may know about the call it serves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from llmrtc.abort import AbortSignal
from llmrtc.tools.calls import ModelUsage

__all__ = ["ToolContext"]

_EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Passed to every handler as its second argument (or injected into an `@tool` function
    parameter annotated `ToolContext`)."""

    call_id: str
    """The id of the call being served."""
    abort_signal: AbortSignal
    """Never None and private to this call: set when the batch is aborted or this call times out.
    Long-running and thread-bound handlers should check it to stop cooperatively."""
    session_id: str | None = None
    """The session the call belongs to, if the caller gave one."""
    turn_id: str | None = None
    """The conversational turn the call belongs to, if the caller gave one."""
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY_METADATA)
    """Read-only mapping of caller-supplied values (e.g. a playbook control object)."""
    models: Any = None
    """The model pool the executor was given (`ToolExecutor(models=...)`, a
    `llmrtc.catalog.ModelPool`), for LLM-backed tools; None when it has none."""
    model_usage: ModelUsage | None = None
    """What `report_model_usage` last recorded; it goes onto the call's result."""

    def report_model_usage(self, usage: ModelUsage) -> None:
        """Record the models this call used; the executor puts it on the call's
        `ToolCallResult.model_usage` (ok or not), its hooks and its span. Report before
        returning or raising; the last report wins."""
        object.__setattr__(self, "model_usage", usage)


# The executor builds one context per call on its hot path: the slots' own descriptors set the
# fields in half the time of the frozen dataclass's `__init__` (see `calls.new_result`).
_context_slots = tuple(
    ToolContext.__dict__[name].__set__
    for name in ("call_id", "abort_signal", "session_id", "turn_id", "metadata", "models")
)


_set_usage = ToolContext.__dict__["model_usage"].__set__


def new_context(
    call_id: str,
    abort_signal: AbortSignal,
    session_id: str | None,
    turn_id: str | None,
    metadata: Mapping[str, Any],
    models: Any = None,
) -> ToolContext:
    """`ToolContext(call_id, abort_signal, session_id, turn_id, metadata, models)`, built
    faster."""
    made = object.__new__(ToolContext)
    set_call_id, set_signal, set_session, set_turn, set_metadata, set_models = _context_slots
    set_call_id(made, call_id)
    set_signal(made, abort_signal)
    set_session(made, session_id)
    set_turn(made, turn_id)
    set_metadata(made, metadata)
    set_models(made, models)
    _set_usage(made, None)
    return made
