"""Floor 3: one conversational turn — the model ⇄ tools loop, streamed events, history."""

from llmrtc.agent.events import (
    AgentEvent,
    StageChanged,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnStopReason,
)
from llmrtc.agent.handler import ResumableHandler, TurnHandler
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.runner import TurnRunner
from llmrtc.agent.settings import TurnSettings

__all__ = [
    "AgentEvent",
    "ConversationHistory",
    "ResumableHandler",
    "StageChanged",
    "TextDelta",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnCompleted",
    "TurnFailed",
    "TurnHandler",
    "TurnRunner",
    "TurnSettings",
    "TurnStopReason",
]
