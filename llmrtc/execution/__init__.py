"""Floor 1: how tools *run* — the `ToolExecutor`, its policies, limits, timeouts and abort."""

from llmrtc.abort import AbortController, AbortedError, AbortSignal
from llmrtc.execution.approval import Approval, Approver, approvals, approve_in_context
from llmrtc.execution.errors import (
    InvalidToolArgumentsError,
    ToolAbortedError,
    ToolDeniedError,
    ToolDuplicateError,
    ToolExecutionError,
    ToolNotFoundError,
    ToolTimeoutError,
    ToolUnavailableError,
)
from llmrtc.execution.executor import ToolExecutor
from llmrtc.execution.observers import observe_tools
from llmrtc.execution.resources import ResourceLimits

__all__ = [
    "AbortController",
    "AbortSignal",
    "AbortedError",
    "Approval",
    "Approver",
    "InvalidToolArgumentsError",
    "ResourceLimits",
    "ToolAbortedError",
    "ToolDeniedError",
    "ToolDuplicateError",
    "ToolExecutionError",
    "ToolExecutor",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "ToolUnavailableError",
    "approvals",
    "approve_in_context",
    "observe_tools",
]
