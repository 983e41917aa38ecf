"""What `TurnRunner.run_turn` yields, in the order things happen."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from llmrtc.llm.types import Usage
from llmrtc.tools.calls import ToolCall, ToolCallResult

__all__ = [
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnCompleted",
    "TurnEvent",
    "TurnStopReason",
]

TurnStopReason = Literal["stop", "length", "max_tool_rounds", "aborted"]
"""Why a turn ended: the model finished (`stop`), hit its token limit (`length`), the tool
round limit forced a final answer (`max_tool_rounds`), or it was aborted (barge-in)."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the assistant's answer (safe to speak: never part of a tool call)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The model asked for this call (it runs with the rest of its response's calls)."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    """A call got its one result. Every `ToolCallStarted` is followed by one of these."""

    result: ToolCallResult


@dataclass(frozen=True)
class TurnCompleted:
    """The last event of every turn."""

    text: str
    """All assistant text yielded in the turn, in order."""
    tool_results: tuple[ToolCallResult, ...] = ()
    """Every tool result of the turn, in the order the calls were made."""
    usage: Usage = field(default_factory=Usage)
    """Token usage summed over the turn's model requests."""
    stop_reason: TurnStopReason = "stop"


TurnEvent = TextDelta | ToolCallStarted | ToolCallFinished | TurnCompleted
