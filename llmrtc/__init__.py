"""llmrtc: realtime voice agents whose tool calls always get their one result.

The public face: import from here. Everything else is importable, but this list is the contract.
"""

from typing import TYPE_CHECKING, Any

from llmrtc.abort import AbortController, AbortedError, AbortSignal
from llmrtc.agent import (
    ConversationHistory,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnRunner,
)
from llmrtc.execution import (
    InvalidToolArgumentsError,
    ToolAbortedError,
    ToolExecutionError,
    ToolExecutor,
    ToolNotFoundError,
    ToolTimeoutError,
)
from llmrtc.llm import LLMError, OpenAIProvider
from llmrtc.llm.default import open_default_provider
from llmrtc.playbook import (
    Playbook,
    PlaybookEngine,
    PlaybookOrchestrator,
    Stage,
    StageChanged,
    Transition,
    load_playbook,
    validate_playbook,
)
from llmrtc.telemetry.correlation import CorrelationFilter, install_log_correlation
from llmrtc.telemetry.hooks import (
    CompositeHooks,
    Hooks,
    ToolEndEvent,
    ToolErrorEvent,
    ToolStartEvent,
)
from llmrtc.tools import (
    ExecutionPolicy,
    FunctionTool,
    Tool,
    ToolCall,
    ToolCallResult,
    ToolCallStatus,
    ToolContext,
    ToolDefinition,
    ToolRegistry,
    ValidationResult,
    define_tool,
    tool,
    validate_tool_arguments,
)

if TYPE_CHECKING:
    from llmrtc.telemetry.otel import OpenTelemetryHooks

__version__ = "0.1.0"

install_log_correlation("llmrtc")


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
    "CompositeHooks",
    "ConversationHistory",
    "CorrelationFilter",
    "ExecutionPolicy",
    "FunctionTool",
    "Hooks",
    "InvalidToolArgumentsError",
    "LLMError",
    "OpenAIProvider",
    "OpenTelemetryHooks",
    "Playbook",
    "PlaybookEngine",
    "PlaybookOrchestrator",
    "Stage",
    "StageChanged",
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
    "ToolEndEvent",
    "ToolErrorEvent",
    "ToolExecutionError",
    "ToolExecutor",
    "ToolNotFoundError",
    "ToolRegistry",
    "ToolStartEvent",
    "ToolTimeoutError",
    "Transition",
    "TurnCompleted",
    "TurnRunner",
    "ValidationResult",
    "__version__",
    "define_tool",
    "load_playbook",
    "open_default_provider",
    "tool",
    "validate_playbook",
    "validate_tool_arguments",
]
