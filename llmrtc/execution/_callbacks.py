"""The executor's simple `on_tool_*` callbacks, as a `Hooks` on the one hook mechanism."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from llmrtc.telemetry.events import (
    BreakerChangeEvent,
    ToolEndEvent,
    ToolErrorEvent,
    ToolProgressEvent,
    ToolRetryEvent,
    ToolStartEvent,
)
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools.calls import ToolCall, ToolCallResult

ToolStartCallback = Callable[[ToolCall, Any], Any]
"""`on_tool_start(call, ctx)`: a handler is about to run; sync or async."""
ToolEndCallback = Callable[[ToolCallResult], Any]
"""`on_tool_end(result)`: once for every call, as it finishes; sync or async."""
ToolErrorCallback = Callable[[ToolCall, BaseException], Any]
"""`on_tool_error(call, error)`: for every call whose status is not `ok`; sync or async."""
ToolProgressCallback = Callable[[ToolProgressEvent], Any]
"""`on_tool_progress(event)`: a running tool reported progress (`ToolContext.progress`); sync
or async."""
ToolRetryCallback = Callable[[ToolRetryEvent], Any]
"""`on_tool_retry(event)`: a call's attempt failed and it is tried again; sync or async."""
BreakerChangeCallback = Callable[[BreakerChangeEvent], Any]
"""`on_breaker_change(event)`: a tool's circuit breaker changed state; sync or async."""


def _call_of(event: ToolStartEvent | ToolEndEvent | ToolErrorEvent) -> ToolCall:
    return ToolCall(event.call_id, event.tool_name, event.arguments)


class CallbackHooks(Hooks):
    """Adapts plain callbacks to `Hooks`: only the callbacks given become hook methods, each
    sync or async like the callback, so they get the same isolation and time limit."""

    def __init__(
        self,
        on_tool_start: ToolStartCallback | None = None,
        on_tool_end: ToolEndCallback | None = None,
        on_tool_error: ToolErrorCallback | None = None,
        on_tool_progress: ToolProgressCallback | None = None,
        on_tool_retry: ToolRetryCallback | None = None,
        on_breaker_change: BreakerChangeCallback | None = None,
    ) -> None:
        if on_tool_start is not None:
            self.on_tool_start = _adapt(on_tool_start, lambda e: (_call_of(e), e.context))  # type: ignore[method-assign]
        if on_tool_end is not None:
            self.on_tool_end = _adapt(on_tool_end, _result_of)  # type: ignore[method-assign]
        if on_tool_error is not None:
            self.on_tool_error = _adapt(on_tool_error, lambda e: (_call_of(e), e.error))  # type: ignore[method-assign]
        if on_tool_progress is not None:
            self.on_tool_progress = _adapt(on_tool_progress, lambda e: (e,))  # type: ignore[method-assign]
        if on_tool_retry is not None:
            self.on_tool_retry = _adapt(on_tool_retry, lambda e: (e,))  # type: ignore[method-assign]
        if on_breaker_change is not None:
            self.on_breaker_change = _adapt(on_breaker_change, lambda e: (e,))  # type: ignore[method-assign]


def result_from_end_event(event: ToolEndEvent) -> ToolCallResult:
    """The `ToolCallResult` a `ToolEndEvent` reports (equal to the one `execute` returns)."""
    return ToolCallResult(
        event.call_id,
        event.tool_name,
        event.status,  # type: ignore[arg-type]
        event.result,
        event.error,
        event.duration_s * 1000,
        event.model_usage,
        event.reused_from,
        event.attempts,
    )


def _result_of(event: ToolEndEvent) -> tuple[ToolCallResult]:
    return (result_from_end_event(event),)


def _adapt(callback: Callable[..., Any], arguments: Callable[[Any], tuple[Any, ...]]) -> Any:
    if inspect.iscoroutinefunction(inspect.unwrap(callback)):

        async def async_hook(event: Any) -> None:
            await callback(*arguments(event))

        return async_hook

    def sync_hook(event: Any) -> Any:
        return callback(*arguments(event))  # an awaitable it returns is still awaited

    return sync_hook
