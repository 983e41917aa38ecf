"""The events of LLM-backed tools (`llmrtc.catalog.define_llm_tool`), beside the executor's
own: a model fallback and an output warning. Re-exported by `llmrtc.telemetry.events`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelFallbackEvent", "ToolWarningEvent"]


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
