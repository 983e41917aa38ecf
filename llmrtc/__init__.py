"""llmrtc: realtime voice agents whose tool calls always get their one result.

Define tools with `@tool` or `define_tool`, run them with a `ToolExecutor` (timeouts, abort,
validation, one result per call), let a `TurnRunner` drive the model ⇄ tools loop over any
OpenAI-compatible model (`open_default_provider()` picks the environment's or the offline one),
shape conversations as playbooks (`load_playbook`, `PlaybookOrchestrator`), and observe it all
through `Hooks` (or `OpenTelemetryHooks`). Test your own bots with `llmrtc.testing`.

Every name below is the supported API; other modules are importable but may change.
"""

from typing import TYPE_CHECKING, Any

from llmrtc.abort import AbortController, AbortedError, AbortSignal
from llmrtc.agent import (
    AgentEvent,
    BackgroundHandler,
    ConversationHistory,
    ResumableHandler,
    StageChanged,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnHandler,
    TurnRunner,
    TurnSettings,
)
from llmrtc.errors import LLMRTCError
from llmrtc.execution import (
    Approval,
    Approver,
    InvalidToolArgumentsError,
    ResourceLimits,
    ToolAbortedError,
    ToolDeniedError,
    ToolDuplicateError,
    ToolExecutionError,
    ToolExecutor,
    ToolNotFoundError,
    ToolTimeoutError,
    ToolUnavailableError,
    approvals,
    approve_in_context,
)
from llmrtc.llm import (
    CompatProfile,
    LLMError,
    LLMProvider,
    ModelSettings,
    OpenAIProvider,
)
from llmrtc.llm.default import open_default_provider
from llmrtc.playbook import (
    Playbook,
    PlaybookEngine,
    PlaybookOrchestrator,
    Stage,
    Transition,
    load_playbook,
    load_playbook_tools,
    validate_playbook,
)
from llmrtc.telemetry.correlation import CorrelationFilter, install_log_correlation
from llmrtc.telemetry.events import (
    BargeInEvent,
    BreakerChangeEvent,
    ErrorEvent,
    LLMEndEvent,
    LLMFirstTokenEvent,
    LLMStartEvent,
    ModelFallbackEvent,
    SessionEndEvent,
    SessionStartEvent,
    SpeechEndEvent,
    SpeechStartEvent,
    StageEnterEvent,
    StageExitEvent,
    STTEndEvent,
    ToolEndEvent,
    ToolErrorEvent,
    ToolProgressEvent,
    ToolRetryEvent,
    ToolStartEvent,
    ToolWarningEvent,
    TransitionEvent,
    TTSEndEvent,
    TTSStartEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from llmrtc.telemetry.hooks import CompositeHooks, Hooks
from llmrtc.tools import (
    BreakerState,
    CircuitBreaker,
    DuplicatePolicy,
    ExecutionPolicy,
    FunctionTool,
    RetryPolicy,
    Tool,
    ToolCall,
    ToolCallResult,
    ToolCallStatus,
    ToolContext,
    ToolDefinition,
    ToolDefinitionWarning,
    ToolError,
    ToolRegistry,
    ValidationResult,
    define_tool,
    tool,
    validate_tool_arguments,
)
from llmrtc.tools.loader import load_tools_file

if TYPE_CHECKING:
    from llmrtc.telemetry.otel import OpenTelemetryHooks

from llmrtc._version import __version__


def __getattr__(name: str) -> Any:
    # OpenTelemetryHooks pulls in the OpenTelemetry API: import it on first use only, so
    # `import llmrtc` stays light for users who never trace.
    if name == "OpenTelemetryHooks":
        from llmrtc.telemetry.otel import OpenTelemetryHooks

        return OpenTelemetryHooks
    raise AttributeError(f"module 'llmrtc' has no attribute {name!r}")


__all__ = [
    "AbortController",
    "AbortSignal",
    "AbortedError",
    "AgentEvent",
    "Approval",
    "Approver",
    "BargeInEvent",
    "BreakerChangeEvent",
    "BreakerState",
    "CircuitBreaker",
    "CompositeHooks",
    "ConversationHistory",
    "CorrelationFilter",
    "DuplicatePolicy",
    "ErrorEvent",
    "ExecutionPolicy",
    "FunctionTool",
    "Hooks",
    "InvalidToolArgumentsError",
    "LLMEndEvent",
    "LLMError",
    "LLMRTCError",
    "LLMFirstTokenEvent",
    "LLMProvider",
    "RetryPolicy",
    "ResourceLimits",
    "CompatProfile",
    "LLMStartEvent",
    "ModelFallbackEvent",
    "ModelSettings",
    "OpenAIProvider",
    "OpenTelemetryHooks",
    "Playbook",
    "PlaybookEngine",
    "PlaybookOrchestrator",
    "STTEndEvent",
    "SessionEndEvent",
    "SessionStartEvent",
    "SpeechEndEvent",
    "SpeechStartEvent",
    "Stage",
    "StageChanged",
    "StageEnterEvent",
    "StageExitEvent",
    "TTSEndEvent",
    "TTSStartEvent",
    "TextDelta",
    "Tool",
    "ToolAbortedError",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallResult",
    "ToolCallStarted",
    "ToolCallStatus",
    "ToolContext",
    "ToolDefinition",
    "ToolDefinitionWarning",
    "ToolEndEvent",
    "ToolError",
    "ToolErrorEvent",
    "ToolProgressEvent",
    "ToolRetryEvent",
    "ToolDeniedError",
    "ToolDuplicateError",
    "ToolUnavailableError",
    "ToolExecutionError",
    "ToolExecutor",
    "ToolNotFoundError",
    "ToolRegistry",
    "ToolStartEvent",
    "ToolWarningEvent",
    "ToolTimeoutError",
    "Transition",
    "TransitionEvent",
    "TurnCompleted",
    "TurnEndEvent",
    "TurnFailed",
    "BackgroundHandler",
    "ResumableHandler",
    "TurnHandler",
    "TurnRunner",
    "TurnSettings",
    "TurnStartEvent",
    "ValidationResult",
    "__version__",
    "approvals",
    "approve_in_context",
    "install_log_correlation",
    "define_tool",
    "load_playbook",
    "load_playbook_tools",
    "load_tools_file",
    "open_default_provider",
    "tool",
    "validate_playbook",
    "validate_tool_arguments",
]
