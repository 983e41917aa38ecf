"""How the executor reports calls: hook events, `on_result`, the log, and what the model is
told about a failure."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from llmrtc.telemetry.correlation import current_call_id
from llmrtc.telemetry.hooks import (
    Hooks,
    ToolEndEvent,
    ToolErrorEvent,
    ToolStartEvent,
    emit,
    error_type_name,
    hooks_for,
)
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.errors import ToolError

if TYPE_CHECKING:
    from llmrtc.execution._state import Batch, CallState

# One logger for the package (not per module): handler failures are logged here in full.
logger = logging.getLogger("llmrtc.execution")


class Dispatch:
    """The hooks of one batch, sorted by what they listen to (picked once, not per call)."""

    __slots__ = ("active", "context", "end", "error", "start", "wants_start_event")

    def __init__(self, leaves: Iterable[Hooks | None]) -> None:
        leaves = tuple(leaves)
        self.start = hooks_for(leaves, "on_tool_start")
        self.context = hooks_for(leaves, "tool_call_context")
        self.end = hooks_for(leaves, "on_tool_end")
        self.error = hooks_for(leaves, "on_tool_error")
        self.wants_start_event = bool(self.start or self.context)
        self.active = bool(self.wants_start_event or self.end or self.error)


def message_for_model(call: ToolCall, error: BaseException, *, raised: bool) -> str:
    """What the model is told about a failure.

    The executor's own status texts (timeout, not found, …) for the errors it created itself
    (`raised` False); for what a handler raised (`raised` True), a `ToolError`'s own words, and
    for anything else a short generic sentence, since a voice agent may speak it and exception
    text can hold secrets. That includes the executor's own error classes raised by a handler
    (e.g. a nested lookup's `ToolNotFoundError`): its text was never meant for the model. The
    full exception is logged here (WARNING with its traceback) and goes to hooks as
    `ToolEndEvent.exception`.
    """
    if not raised:
        return str(error)
    if isinstance(error, ToolError):
        logger.debug("tool %r (call %s) reported: %s", call.name, call.call_id, error)
        return str(error)
    logger.warning(
        "tool %r (call %s) raised %s; the model was told it failed with an internal error",
        call.name,
        call.call_id,
        error_type_name(error),
        exc_info=error,
    )
    return f"tool {call.name!r} failed because of an internal error"


def start_event(batch: Batch, item: CallState) -> ToolStartEvent:
    """The start event of a call whose handler is about to run."""
    call = item.call
    definition = item.tool.definition  # type: ignore[union-attr]  # only calls that run
    event = item.event = ToolStartEvent(
        execution_id=item.execution_id,
        call_id=call.call_id,
        tool_name=call.name,
        tool_description=definition.description,
        arguments=call.arguments,
        sensitive_fields=definition.sensitive_fields,
        session_id=batch.session_id,
        turn_id=batch.turn_id,
        stage_id=batch.stage_id,
        context=item.context,
        reasoning=item.reasoning,
    )
    return event


async def announce(batch: Batch, item: CallState) -> None:
    """Tell the start hooks (unshielded: an abort meanwhile must not wait for them)."""
    event = start_event(batch, item)
    if batch.hooks.start:
        item.announced = True
        await emit(batch.hooks.start, "on_tool_start", event, shield=False)


def enter_call_contexts(batch: Batch, item: CallState) -> list[AbstractContextManager[object]]:
    """Enter the contexts hooks want the handler to run in (e.g. its span made current).

    Called in the task that runs the handler, just before it; a hook that raises is logged
    and skipped, never stops the call.
    """
    entered: list[AbstractContextManager[object]] = []
    for hook in batch.hooks.context:
        try:
            manager = hook.tool_call_context(item.event)  # type: ignore[arg-type]
            if manager is not None:
                manager.__enter__()
                entered.append(manager)
        except Exception:
            logger.exception("hook %s.tool_call_context raised; ignored", type(hook).__name__)
    return entered


def exit_call_contexts(
    entered: list[AbstractContextManager[object]], error: BaseException | None
) -> None:
    """Leave the contexts in reverse order, telling each how the handler ended. A context
    cannot swallow the handler's exception: what it returns is ignored."""
    for manager in reversed(entered):
        try:
            if error is None:
                manager.__exit__(None, None, None)
            else:
                manager.__exit__(type(error), error, error.__traceback__)
        except Exception:
            logger.exception("a tool_call_context of %r raised on exit; ignored", manager)


async def report(batch: Batch, item: CallState) -> None:
    """Hand the call's result to `on_result`, then to the error and end hooks (once; in the
    task that calls this, the caller's)."""
    result = item.result
    if not batch.reporting or result is None or item.reported:
        return
    item.reported = True
    call = item.call
    token = current_call_id.set(call.call_id)  # so a hook's own log records carry it
    try:
        if batch.on_result is not None:
            try:
                batch.on_result(result)
            except Exception:
                logger.exception("on_result callback raised for call %s; ignored", call.call_id)
        hooks = batch.hooks
        error = item.error
        if error is not None and hooks.error:
            await emit(
                hooks.error,
                "on_tool_error",
                ToolErrorEvent(
                    execution_id=item.execution_id,
                    call_id=call.call_id,
                    tool_name=call.name,
                    status=result.status,
                    error=error,
                    arguments=call.arguments,
                    session_id=batch.session_id,
                    turn_id=batch.turn_id,
                    stage_id=batch.stage_id,
                ),
            )
        if hooks.end:
            definition = item.tool.definition if item.tool is not None else None
            await emit(
                hooks.end,
                "on_tool_end",
                ToolEndEvent(
                    execution_id=item.execution_id,
                    call_id=call.call_id,
                    tool_name=call.name,
                    status=result.status,
                    tool_description=definition.description if definition else "",
                    arguments=call.arguments,
                    sensitive_fields=definition.sensitive_fields if definition else (),
                    error=result.error,
                    error_type=_error_type(result.status, error),
                    exception=error if result.status == "error" else None,
                    duration_s=item.duration_s,
                    queued_s=item.queued_s,
                    started=item.announced,
                    result=result.result,
                    result_content=result.to_content(),
                    model_usage=result.model_usage,
                    session_id=batch.session_id,
                    turn_id=batch.turn_id,
                    stage_id=batch.stage_id,
                    reasoning=item.reasoning,
                ),
            )
    finally:
        current_call_id.reset(token)


async def report_all(batch: Batch) -> None:
    """Report every call not reported yet, in request order. A further native cancellation
    of the caller (asyncio's `Task.cancel()` pierces anyio's shield) cuts short only the hook
    it lands in: the other calls are still reported, then it propagates."""
    cancelled: BaseException | None = None
    for item in batch.calls:
        try:
            await report(batch, item)
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled


def _error_type(status: str, error: BaseException | None) -> str | None:
    """The status word, or the fully qualified class name of what a handler raised."""
    if status == "ok":
        return None
    if status != "error" or error is None:
        return status
    return error_type_name(error)
