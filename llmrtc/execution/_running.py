"""How one call of a batch runs: its concurrency slot, cancel scope and time limit, its
context and signal, the handler, and the result it ends with. A base of `ToolExecutor`, split
out of it by concern; one coroutine per call (each nested one would cost per call)."""

from __future__ import annotations

import math
import time

import anyio

from llmrtc.abort import AbortController
from llmrtc.execution._group import Finished
from llmrtc.execution._reporting import announce, enter_call_contexts, exit_call_contexts
from llmrtc.execution._slots import SlotPool
from llmrtc.execution._state import Batch, CallState, finish
from llmrtc.execution._threads import WorkerThreads
from llmrtc.execution.errors import ToolTimeoutError
from llmrtc.telemetry.correlation import current_call_id
from llmrtc.tools.context import ToolContext, new_context
from llmrtc.tools.tool import Tool

_perf_counter = time.perf_counter
_monotonic = time.monotonic


class CallRunner:
    """Runs the calls of `ToolExecutor`'s batches (see `_run_call`)."""

    _slots: SlotPool
    _threads: WorkerThreads

    async def _run_call(self, batch: Batch, item: CallState, finished: Finished | None) -> None:
        """Run one call with its own slot, cancel scope and time limit, and record how it
        ended. Never raises, except for the cancellation of the caller's task (when run in
        it). One coroutine from slot to result: each nested one would cost per call."""
        scope: anyio.CancelScope = item.scope  # type: ignore[assignment]  # set by _prepare
        slots = self._slots
        signal = batch.signal
        try:
            with scope:
                if slots.can_take(1):  # the common case, without a coroutine to await
                    slots.take(1)
                else:
                    waiting_since = _perf_counter()
                    await slots.acquire()
                    item.queued_s = _perf_counter() - waiting_since
                try:
                    if scope.cancel_called or (signal is not None and signal.aborted):
                        return  # aborted while queued: the batch gives it its result
                    if batch.hooks.wants_start_event:
                        ctx = self._context(batch, item, None)  # the start event carries it
                        await announce(batch, item)
                        if scope.cancel_called or (signal is not None and signal.aborted):
                            return  # aborted during the start hooks: the handler never runs
                        self._start_clock(batch, item, scope, item.controller)
                    else:
                        ctx = self._context(batch, item, self._start_clock(batch, item, scope))
                    if item.finish:
                        signal = None  # it started: an abort of the batch no longer stops it
                    tool: Tool = item.tool  # type: ignore[assignment]  # prepared calls only
                    started = item.started = _perf_counter()
                    token = current_call_id.set(ctx.call_id)
                    entered = enter_call_contexts(batch, item) if batch.hooks.context else None
                    failure: BaseException | None = None
                    try:
                        if tool.is_async:
                            value = await tool.handler(item.args, ctx)
                        else:
                            value = await self._threads.run(tool.handler, item.args, ctx)
                            if hasattr(value, "__await__"):  # a def that returned a coroutine
                                value = await value
                    except Exception as exc:
                        failure = exc
                    except BaseException as exc:  # cancelled: decided below or by the caller
                        failure = exc
                        raise
                    finally:
                        if entered:
                            exit_call_contexts(entered, failure)
                        current_call_id.reset(token)
                    duration_s = _perf_counter() - started
                    # A handler that raised while being cancelled (its cleanup failed), or that
                    # returned once its signal was set (a cooperative thread noticing the
                    # timeout or abort), has a partial value at best: it still timed out or
                    # was aborted (the batch gives every unfinished call its aborted result).
                    if signal is not None and signal.aborted:
                        return
                    if item.timed_out():
                        self._time_out(item)
                    elif failure is not None:
                        finish(item, "error", error=failure, duration_s=duration_s)
                    else:
                        finish(item, "ok", value=value, duration_s=duration_s)
                finally:
                    item.running = False
                    slots.release()
            if item.result is None:
                if item.started and item.timed_out():
                    self._time_out(item)  # the scope ended the handler at its limit
                elif batch.finishing and batch.aborted():
                    # Interrupted while other calls finish: its result is reported now, not
                    # once the batch is over.
                    batch.settle_one(item)
        finally:
            if finished is not None:
                finished.put(item)

    def _context(self, batch: Batch, item: CallState, deadline: float | None) -> ToolContext:
        """The call's own controller (a child of the batch signal, unless the call finishes on
        interrupt) and the context the handler receives."""
        parent = None if item.finish else batch.signal
        controller = item.controller = AbortController(parent=parent, deadline=deadline)
        item.context = new_context(
            item.call.call_id,
            controller.signal,
            batch.session_id,
            batch.turn_id,
            batch.metadata,
            batch.models,
        )
        return item.context

    def _start_clock(
        self,
        batch: Batch,
        item: CallState,
        scope: anyio.CancelScope,
        controller: AbortController | None = None,
    ) -> float | None:
        """The handler starts now: so does its time limit. Returns the signal's deadline (for
        a controller made after this), or None for no limit."""
        item.running = True
        limit = item.limit
        if limit == math.inf:
            return None
        # The signal's deadline comes first, so it has passed whenever the timer fired: a
        # handler's `finally` or a polling thread sees the timeout the moment it happens.
        deadline = item.deadline = _monotonic() + limit
        if controller is not None:
            controller.deadline = deadline
        if batch.loop is not None:
            batch.arm(item, limit)
        else:
            scope.deadline = anyio.current_time() + limit
        return deadline

    def _time_out(self, item: CallState) -> None:
        error = ToolTimeoutError(item.call.name, item.limit)
        finish(item, "timeout", error=error, duration_s=_perf_counter() - item.started)
