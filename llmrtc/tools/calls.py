"""`ToolCall` (what a model asked for) and `ToolCallResult` (the one answer each call gets)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pydantic_core

__all__ = [
    "RUNNING_NOTE",
    "ModelUsage",
    "ToolCall",
    "ToolCallResult",
    "ToolCallStatus",
    "to_json_content",
]

ToolCallStatus = Literal[
    "ok",
    "error",
    "invalid_arguments",
    "not_found",
    "timeout",
    "aborted",
    "duplicate",
    "unavailable",
    "denied",
    "running",
]
"""How a call ended: `ok`; `error` (the handler raised); `invalid_arguments` (did not parse or
did not match the schema; the handler was not called); `not_found` (no such tool, or not offered);
`timeout` (the handler ran past its limit and was cancelled, or waited for a resource past it);
`aborted` (the batch was aborted before or while the call ran); `duplicate` (a repeat of an
earlier call, refused by `on_duplicate="reject"`); `unavailable` (the tool's circuit breaker is
open after repeated failures); `denied` (its approval was refused or did not come in time).
None of the last three ran the handler. `running` is no ending: the batch's provisional answer for a
background call (`ToolDefinition.background`), whose final result (one of the others) follows."""

RUNNING_NOTE = (
    "This tool is still running in the background; its result will follow in a later "
    "message. Tell the user it is under way and carry on; do not call it again."
)
"""What the model reads as the `"running"` answer of a background call."""


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call requested by a model."""

    call_id: str
    """The id the model gave the call; its result must carry the same id."""
    name: str
    """The tool's name as the model wrote it."""
    arguments: Mapping[str, Any] | str = "{}"
    """A dict, or the raw JSON string the model produced (it is parsed and validated later)."""


def to_json_content(value: Any) -> str:
    """Serialize a handler's return value for the model: always valid, strict JSON; never raises.

    pydantic models, dataclasses, enums, datetimes, sets, `None`, strings and other primitives all
    serialize; NaN and infinities become `null`; anything else falls back to its `str()`, and
    what cannot be serialized at all (circular data) to its `repr()` as a JSON string.
    """
    try:
        # inf/nan become null: strict parsers (JSON.parse, many servers) reject NaN/Infinity.
        return pydantic_core.to_json(value, fallback=str, inf_nan_mode="null").decode()
    except Exception:  # circular data, invalid UTF-8 bytes, a __str__ that raises
        try:
            return json.dumps(repr(value))
        except Exception:
            return json.dumps(f"<unserializable {type(value).__name__}>")


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """What an LLM-backed tool's own model calls cost: on its `ToolCallResult.model_usage`,
    its hooks and its `execute_tool` span."""

    model: str
    """The `provider/model` id that produced the output (the last one tried, on failure)."""
    attempts: int = 1
    """Models tried, including the one that answered."""
    input_tokens: int | None = None
    """Prompt tokens of the answering request, when the server reported them."""
    output_tokens: int | None = None
    """Completion tokens of the answering request, when the server reported them."""
    failures: tuple[str, ...] = ()
    """One line per model that failed before, `"provider/model: why"`, in the order tried."""


@dataclass(frozen=True, slots=True)
class ToolCallResult:
    """The single result of one `ToolCall`, whatever happened to it."""

    call_id: str
    """The id of the call this answers."""
    tool_name: str
    """The name the call asked for."""
    status: ToolCallStatus
    """How the call ended; see `ToolCallStatus`."""
    result: Any = None
    """What the handler returned (only for status `ok`); for `running`, the note the model
    reads (`RUNNING_NOTE`)."""
    error: str | None = None
    """What went wrong, written for the model and for logs (None for status `ok`)."""
    duration_ms: float = 0.0
    """How long the handler ran; 0 for calls that never ran."""
    model_usage: ModelUsage | None = None
    """For an LLM-backed tool: the models it used (see `ToolContext.report_model_usage`)."""
    reused_from: str | None = None
    """The call id whose result this is (`on_duplicate="reuse"`: the handler did not run for
    this call); None otherwise."""
    attempts: int = 1
    """How many times the handler ran for this call (more than 1 after retries; 0 when it
    never ran: refused, reused, aborted while waiting)."""

    @property
    def success(self) -> bool:
        """True when `status == "ok"`."""
        return self.status == "ok"

    def to_content(self) -> str:
        """The JSON string to send back to the model as the tool message content.

        Successful results are serialized as JSON (a string result becomes a JSON string);
        the `"running"` answer of a background call is `{"status": "running", "note": ...}`
        (`result` holds the note); failures become `{"error": ..., "status": ...}`.
        """
        if self.status == "ok":
            return to_json_content(self.result)
        if self.status == "running":
            return json.dumps({"status": "running", "note": self.result}, ensure_ascii=False)
        return json.dumps({"error": self.error, "status": self.status}, ensure_ascii=False)


# The executor builds one result per call on its hot path. A frozen dataclass's `__init__` sets
# each field through `object.__setattr__`; the slots' own descriptors do the same in half the
# time. Same object, same fields, no validation skipped (the dataclass has none).
_result_slots = tuple(
    ToolCallResult.__dict__[name].__set__
    for name in (
        "call_id",
        "tool_name",
        "status",
        "result",
        "error",
        "duration_ms",
        "model_usage",
        "reused_from",
        "attempts",
    )
)


def new_result(
    call_id: str,
    tool_name: str,
    status: ToolCallStatus,
    result: Any,
    error: str | None,
    duration_ms: float,
    model_usage: ModelUsage | None = None,
    reused_from: str | None = None,
    attempts: int = 1,
) -> ToolCallResult:
    """`ToolCallResult(call_id, tool_name, status, result, error, duration_ms, model_usage,
    reused_from, attempts)`, built faster."""
    made = object.__new__(ToolCallResult)
    (
        set_call_id,
        set_tool_name,
        set_status,
        set_result,
        set_error,
        set_duration,
        set_usage,
        set_reused,
        set_attempts,
    ) = _result_slots
    set_call_id(made, call_id)
    set_tool_name(made, tool_name)
    set_status(made, status)
    set_result(made, result)
    set_error(made, error)
    set_duration(made, duration_ms)
    set_usage(made, model_usage)
    set_reused(made, reused_from)
    set_attempts(made, attempts)
    return made
