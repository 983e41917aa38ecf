"""Exceptions that describe a call's non-`ok` status (what `on_tool_error` receives when the
handler itself did not raise)."""

from __future__ import annotations

from llmrtc.errors import LLMRTCError

__all__ = [
    "InvalidToolArgumentsError",
    "ToolAbortedError",
    "ToolDeniedError",
    "ToolDuplicateError",
    "ToolExecutionError",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "ToolUnavailableError",
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


class ToolDuplicateError(ToolExecutionError):
    """The call repeats an earlier one (same tool, same arguments, same session) and its tool
    has `on_duplicate="reject"`; `first_call_id` names the earlier call."""

    status = "duplicate"

    def __init__(self, tool_name: str, message: str, first_call_id: str) -> None:
        super().__init__(tool_name, message)
        self.first_call_id = first_call_id


class ToolUnavailableError(ToolExecutionError):
    """The tool's circuit breaker is open after repeated failures: the call did not run."""

    status = "unavailable"

    def __init__(self, tool_name: str) -> None:
        super().__init__(
            tool_name,
            f"tool {tool_name!r} is temporarily unavailable after repeated failures; it did "
            "not run. Tell the user, and try again later",
        )


class ToolDeniedError(ToolExecutionError):
    """The call needed approval and did not get it (denied, no answer in time, or no approver
    configured): it did not run. `reason` is what the model was told why."""

    status = "denied"

    def __init__(self, tool_name: str, reason: str | None) -> None:
        text = f"the call of {tool_name!r} was not approved, so it did not run"
        if reason:
            text += f" ({reason})"
        # Said so, a small model tells the user instead of a vague "I can't help with that".
        text += ". Tell the user it was not done; do not call it again unless they ask"
        super().__init__(tool_name, text)
        self.reason = reason
