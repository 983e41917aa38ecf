"""Floor 3: one conversational turn — the model ⇄ tools loop, streamed events, history."""

from llmrtc.agent.cancel_tool import CANCEL_TOOL
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
from llmrtc.agent.handler import (
    BackgroundHandler,
    PreemptingHandler,
    ResumableHandler,
    TurnHandler,
)
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.preemption import Preemption
from llmrtc.agent.runner import TurnRunner
from llmrtc.agent.settings import TurnSettings

__all__ = [
    "CANCEL_TOOL",
    "AgentEvent",
    "BackgroundHandler",
    "ConversationHistory",
    "Preemption",
    "PreemptingHandler",
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
