"""Floor 1: how tools *run* — the `ToolExecutor`, its policies, limits, timeouts and abort."""

from llmrtc.abort import AbortController, AbortedError, AbortSignal
from llmrtc.execution.errors import (
    InvalidToolArgumentsError,
    ToolAbortedError,
    ToolExecutionError,
    ToolNotFoundError,
    ToolTimeoutError,
)
from llmrtc.execution.executor import ToolExecutor
from llmrtc.execution.observers import observe_tools

__all__ = [
    "AbortController",
    "AbortSignal",
    "AbortedError",
    "InvalidToolArgumentsError",
    "ToolAbortedError",
    "ToolExecutionError",
    "ToolExecutor",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "observe_tools",
]
