"""`ToolContext`: what a running tool may know about the call it serves."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from llmrtc.abort import AbortSignal
from llmrtc.tools.calls import ModelUsage

__all__ = ["PROGRESS_INTERVAL", "PROGRESS_MAX_CHARS", "ProgressSink", "ToolContext"]

PROGRESS_INTERVAL = 0.25
"""Seconds between two progress messages of one call that are passed on: at most four a
second. A message sooner after the last one passed on is dropped (`progress` returns False)."""
PROGRESS_MAX_CHARS = 500
"""The longest progress message accepted (it is meant for a one-line status)."""

ProgressSink = Callable[[str], Awaitable[None]]
"""`sink(message)`: where `ToolContext.progress` passes a message on (set by the executor)."""

_EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Passed to every handler as its second argument (or injected into an `@tool` function
    parameter annotated `ToolContext`)."""

    call_id: str
    """The id of the call being served."""
    abort_signal: AbortSignal
    """Never None and private to this call: set when the batch is aborted or this call times out
    (a background call: when it times out or `ToolExecutor.cancel_call` / `aclose` stops it,
    never by its batch). Long-running and thread-bound handlers should check it to stop
    cooperatively."""
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
    sensitive_fields: Sequence[str] = ()
    """The tool's `sensitive_fields`: argument and result keys to mask wherever this call's
    values are shown or recorded (an approval prompt, a log line)."""
    progress_sink: ProgressSink | None = field(default=None, repr=False, compare=False)
    """Where `progress` passes messages on: set by the executor when a hook listens for
    `on_tool_progress`; None drops them (after checking them)."""
    _progress_at: float = field(default=-math.inf, init=False, repr=False, compare=False)

    async def progress(self, message: str) -> bool:
        """Tell the hooks (`on_tool_progress`, and so OpenTelemetry and a WebRTC client) how
        the call is getting on, e.g. `await ctx.progress("Checking availability")`.

        Any tool may call it, background or not; it is cheap. At most one message every
        `PROGRESS_INTERVAL` seconds (0.25 s) per call is passed on: one sent sooner is dropped,
        so a tool may report from a tight loop. Async handlers await it; a sync handler (in a
        worker thread) may call `anyio.from_thread.run(ctx.progress, message)`.

        Args:
            message: A one-line status for people: a non-empty `str` of at most
                `PROGRESS_MAX_CHARS` (500) characters without line breaks.

        Returns:
            True when the message was passed on, False when it was dropped by the rate limit.

        Raises:
            TypeError: `message` is not a `str`.
            ValueError: `message` is empty or blank, longer than 500 characters, or has a line
                break or another control character.
        """
        if not isinstance(message, str):
            raise TypeError(
                f"ToolContext.progress() takes a str (a one-line status), "
                f"got {type(message).__name__}"
            )
        if not message.strip():
            raise ValueError("ToolContext.progress() needs a non-empty message, got a blank one")
        if len(message) > PROGRESS_MAX_CHARS:
            raise ValueError(
                f"ToolContext.progress() takes at most {PROGRESS_MAX_CHARS} characters, got "
                f"{len(message)}; keep it to a one-line status"
            )
        if not message.isprintable():
            raise ValueError(
                "ToolContext.progress() takes one line of printable text: no line breaks, tabs "
                f"or other control characters (got {message[:60]!r})"
            )
        now = time.monotonic()
        if now - self._progress_at < PROGRESS_INTERVAL:
            return False
        object.__setattr__(self, "_progress_at", now)
        sink = self.progress_sink
        if sink is not None:
            await sink(message)
        return True

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
_set_sink = ToolContext.__dict__["progress_sink"].__set__
_set_sensitive = ToolContext.__dict__["sensitive_fields"].__set__
_set_progress_at = ToolContext.__dict__["_progress_at"].__set__


_set_usage = ToolContext.__dict__["model_usage"].__set__


def new_context(
    call_id: str,
    abort_signal: AbortSignal,
    session_id: str | None,
    turn_id: str | None,
    metadata: Mapping[str, Any],
    models: Any = None,
    progress_sink: ProgressSink | None = None,
    sensitive_fields: Sequence[str] = (),
) -> ToolContext:
    """`ToolContext(call_id, abort_signal, session_id, turn_id, metadata, models,
    sensitive_fields=..., progress_sink=...)`, built faster."""
    made = object.__new__(ToolContext)
    set_call_id, set_signal, set_session, set_turn, set_metadata, set_models = _context_slots
    set_call_id(made, call_id)
    set_signal(made, abort_signal)
    set_session(made, session_id)
    set_turn(made, turn_id)
    set_metadata(made, metadata)
    set_models(made, models)
    _set_usage(made, None)
    _set_sink(made, progress_sink)
    _set_sensitive(made, sensitive_fields)
    _set_progress_at(made, -math.inf)
    return made
