"""Exceptions that describe a call's non-`ok` status (what `on_tool_error` receives when the
handler itself did not raise)."""

from __future__ import annotations

from llmrtc.errors import LLMRTCError

__all__ = [
    "InvalidToolArgumentsError",
    "ToolAbortedError",
    "ToolExecutionError",
    "ToolNotFoundError",
    "ToolTimeoutError",
]


class ToolExecutionError(LLMRTCError):
    """Base class: a tool call did not produce a result. `status` is the result status word."""

    status: str = "error"

    def __init__(self, tool_name: str, message: str) -> None:
        super().__init__(message)
        self.tool_name = tool_name


class ToolNotFoundError(ToolExecutionError):
    """No tool with that name is registered (or offered)."""

    status = "not_found"


class InvalidToolArgumentsError(ToolExecutionError):
    """The arguments did not parse or did not satisfy the schema; `errors` lists each problem."""

    status = "invalid_arguments"

    def __init__(self, tool_name: str, errors: list[str]) -> None:
        super().__init__(
            tool_name, f"invalid arguments for tool {tool_name!r}: " + "; ".join(errors)
        )
        self.errors = errors


class ToolTimeoutError(ToolExecutionError):
    """The handler ran past its time limit and was cancelled."""

    status = "timeout"

    def __init__(self, tool_name: str, timeout: float) -> None:
        super().__init__(tool_name, f"tool {tool_name!r} timed out after {timeout:g} s")
        self.timeout = timeout


class ToolAbortedError(ToolExecutionError):
    """The batch was aborted before or while the call ran."""

    status = "aborted"

    def __init__(self, tool_name: str, message: str, reason: object = None) -> None:
        super().__init__(tool_name, message)
        self.reason = reason
