"""How `llmrtc chat` and `llmrtc voice` show a turn's tool calls and stage changes: one
line each, the same in both commands."""

from __future__ import annotations

import json

from llmrtc.agent import StageChanged, ToolCallFinished, ToolCallStarted

__all__ = ["event_line"]


def event_line(event: object) -> str | None:
    """The line for a tool call starting (`  -> name({...})`), finishing
    (`  <- name status N ms: result`) or a stage change (`  [stage a -> b (transition)]`);
    None for any other event (the command shows text, errors and the turn's end itself)."""
    if isinstance(event, ToolCallStarted):
        arguments = event.call.arguments
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return f"  -> {event.call.name}({shown})"
    if isinstance(event, ToolCallFinished):
        result = event.result
        outcome = result.to_content() if result.success else result.error
        return f"  <- {result.tool_name} {result.status} {result.duration_ms:.0f} ms: {outcome}"
    if isinstance(event, StageChanged):
        return f"  [stage {event.from_stage} -> {event.to_stage} ({event.transition_id})]"
    return None
