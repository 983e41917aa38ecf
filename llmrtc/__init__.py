"""llmrtc: realtime voice agents whose tool calls always get their one result.

The public face: import from here. Everything else is importable, but this list is the contract.
"""

from llmrtc.abort import AbortController, AbortedError, AbortSignal
from llmrtc.execution import (
    InvalidToolArgumentsError,
    ToolAbortedError,
    ToolExecutionError,
    ToolExecutor,
    ToolNotFoundError,
    ToolTimeoutError,
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

__version__ = "0.1.0"

__all__ = [
    "AbortController",
    "AbortSignal",
    "AbortedError",
    "ExecutionPolicy",
    "FunctionTool",
    "InvalidToolArgumentsError",
    "Tool",
    "ToolAbortedError",
    "ToolCall",
    "ToolCallResult",
    "ToolCallStatus",
    "ToolContext",
    "ToolDefinition",
    "ToolExecutionError",
    "ToolExecutor",
    "ToolNotFoundError",
    "ToolRegistry",
    "ToolTimeoutError",
    "ValidationResult",
    "__version__",
    "define_tool",
    "tool",
    "validate_tool_arguments",
]
