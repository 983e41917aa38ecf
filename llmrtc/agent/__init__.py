"""Floor 3: one conversational turn — the model ⇄ tools loop, streamed events, history."""

from llmrtc.agent.events import (
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnEvent,
    TurnStopReason,
)
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.runner import TurnRunner

__all__ = [
    "ConversationHistory",
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnCompleted",
    "TurnEvent",
    "TurnRunner",
    "TurnStopReason",
]
