"""Floor 0: what a tool *is*: definitions, handlers, the registry, calls, results, validation."""

from llmrtc.tools.breaker import BreakerState, CircuitBreaker
from llmrtc.tools.calls import (
    RUNNING_NOTE,
    ModelUsage,
    ToolCall,
    ToolCallResult,
    ToolCallStatus,
    to_json_content,
)
from llmrtc.tools.context import PROGRESS_INTERVAL, PROGRESS_MAX_CHARS, ToolContext
from llmrtc.tools.definition import (
    REASONING_FIELD,
    TOOL_NAME_PATTERN,
    DuplicatePolicy,
    ExecutionPolicy,
    ToolDefinition,
)
from llmrtc.tools.errors import ToolError
from llmrtc.tools.registry import CallRouter, ToolRegistry
from llmrtc.tools.retry import RetryPolicy
from llmrtc.tools.schema_form import OUTPUT_FIELD
from llmrtc.tools.tool import (
    FunctionTool,
    LatentTool,
    Tool,
    ToolDefinitionWarning,
    ToolHandler,
    define_tool,
    tool,
)
from llmrtc.tools.validation import ValidationResult, validate_tool_arguments

__all__ = [
    "OUTPUT_FIELD",
    "PROGRESS_INTERVAL",
    "PROGRESS_MAX_CHARS",
    "RUNNING_NOTE",
    "REASONING_FIELD",
    "BreakerState",
    "CircuitBreaker",
    "DuplicatePolicy",
    "LatentTool",
    "ModelUsage",
    "CallRouter",
    "TOOL_NAME_PATTERN",
    "ExecutionPolicy",
    "FunctionTool",
    "RetryPolicy",
    "Tool",
    "ToolCall",
    "ToolCallResult",
    "ToolCallStatus",
    "ToolContext",
    "ToolDefinition",
    "ToolDefinitionWarning",
    "ToolError",
    "ToolHandler",
    "ToolRegistry",
    "ValidationResult",
    "define_tool",
    "to_json_content",
    "tool",
    "validate_tool_arguments",
]
