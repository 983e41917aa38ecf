"""Floor 4: playbooks — declarative stage machines for conversations.

Models and loading (`Playbook`, `load_playbook`), static checks (`validate_playbook`), the pure
state machine (`PlaybookEngine`), and the orchestrator that runs turns through it
(`PlaybookOrchestrator`, with the built-in `playbook_transition` tool).
"""

from llmrtc.playbook.engine import (
    PlaybookControl,
    PlaybookEngine,
    StageChange,
    StageHookEvent,
    TurnFacts,
)
from llmrtc.playbook.graph import to_mermaid
from llmrtc.playbook.loading import load_playbook, load_playbook_tools
from llmrtc.playbook.models import (
    Condition,
    CustomCondition,
    IntentCondition,
    KeywordCondition,
    LLMConfig,
    LLMDecisionCondition,
    MaxTurnsCondition,
    MCPServerConfig,
    Playbook,
    Stage,
    TimeoutCondition,
    ToolCallCondition,
    Transition,
    TransitionAction,
)
from llmrtc.playbook.orchestrator import PlaybookOrchestrator, StageChanged
from llmrtc.playbook.validation import Finding, PlaybookError, validate_playbook

__all__ = [
    "MCPServerConfig",
    "Condition",
    "CustomCondition",
    "Finding",
    "IntentCondition",
    "KeywordCondition",
    "LLMConfig",
    "LLMDecisionCondition",
    "MaxTurnsCondition",
    "Playbook",
    "PlaybookControl",
    "PlaybookEngine",
    "PlaybookError",
    "PlaybookOrchestrator",
    "Stage",
    "StageChange",
    "StageChanged",
    "StageHookEvent",
    "TimeoutCondition",
    "ToolCallCondition",
    "Transition",
    "TransitionAction",
    "TurnFacts",
    "load_playbook",
    "load_playbook_tools",
    "to_mermaid",
    "validate_playbook",
]
