"""Stream events: what `TurnRunner.run_turn` (any `TurnHandler`) yields, in the order things
happen.

Naming rule: a stream event is a past-tense fact without a suffix (`TextDelta`, `ToolCallStarted`,
`TurnCompleted`, `TurnFailed`, ...) and is consumed by iterating a turn. The other family, hook
events (`llmrtc.telemetry.events`), are named `<Subject><Moment>Event`, one per
`Hooks.on_<subject>_<moment>`, and reach observers through `emit`; a stream event is never sent
to hooks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from llmrtc.llm.types import Usage
from llmrtc.tools.calls import ToolCall, ToolCallResult

__all__ = [
    "AgentEvent",
    "StageChanged",
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnCompleted",
    "TurnFailed",
    "TurnStopReason",
]

logger = logging.getLogger(__name__)

TurnStopReason = Literal["stop", "length", "max_tool_rounds", "aborted", "error"]
"""Why a turn ended: the model finished (`stop`), hit its token limit (`length`), the tool
round limit forced a final answer (`max_tool_rounds`), it was aborted (barge-in), or the model
failed for good (`error`: a `TurnFailed` was yielded and the agent apologised)."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the assistant's answer (safe to speak: never part of a tool call)."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """The model asked for this call (it runs with the rest of its response's calls)."""

    call: ToolCall
    background: bool = False
    """The call's tool runs in the background (`ToolDefinition(background=True)`): the turn
    answers it `"running"` and its final result lands later, as a late result."""


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


@dataclass(frozen=True, slots=True)
class StageChanged:
    """The conversation moved to another playbook stage (yielded in the turn's event stream)."""

    from_stage: str
    to_stage: str
    transition_id: str
    reason: str | None = None
    """The model's reason (from `playbook_transition`), or `"timeout"` for a stage timer."""
    conversation_ended: bool = False
    """The new stage is terminal: the conversation is over after this turn."""


@dataclass(frozen=True, slots=True)
class TurnFailed:
    """The model (or its server) failed for good during the turn. The turn still ends with a
    short spoken-style apology as text and a valid history; the next turn works as usual."""

    message: str
    """One line for developers and logs: what failed and where (never spoken)."""
    error_type: str
    """The failure's class name, e.g. `LLMError`."""


AgentEvent = (
    TextDelta | ToolCallStarted | ToolCallFinished | StageChanged | TurnFailed | TurnCompleted
)
"""Everything a `TurnHandler` (`TurnRunner`, `PlaybookOrchestrator`) yields from a turn."""
