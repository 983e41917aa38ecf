"""`ToolExecutor`: runs a model's tool calls and gives every call exactly one result, in order."""

from __future__ import annotations

import difflib
import itertools
import math
import time
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.execution._callbacks import (
    CallbackHooks,
    ToolEndCallback,
    ToolErrorCallback,
    ToolStartCallback,
)
from llmrtc.execution._slots import SlotPool
from llmrtc.execution._threads import WorkerThreads
from llmrtc.execution.errors import (
    InvalidToolArgumentsError,
    ToolAbortedError,
    ToolExecutionError,
    ToolNotFoundError,
    ToolTimeoutError,
)
from llmrtc.telemetry.correlation import current_call_id
from llmrtc.telemetry.hooks import (
    Hooks,
    ToolEndEvent,
    ToolErrorEvent,
    ToolStartEvent,
    emit,
    hooks_for,
    is_async_hook,
)
from llmrtc.tools.calls import ToolCall, ToolCallResult, ToolCallStatus
from llmrtc.tools.context import ToolContext
from llmrtc.tools.definition import ExecutionPolicy
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool
from llmrtc.tools.validation import ArgumentsError, prepare_arguments

__all__ = ["ToolExecutor"]

_EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})
_execution_ids = itertools.count(1)


class _Dispatch:
    """The hooks of one batch, sorted by what they listen to (picked once, not per call)."""

    __slots__ = ("active", "async_start", "end", "error", "start")

    def __init__(self, leaves: Iterable[Hooks | None]) -> None:
        leaves = tuple(leaves)
        self.start = hooks_for(leaves, "on_tool_start")
        self.end = hooks_for(leaves, "on_tool_end")
        self.error = hooks_for(leaves, "on_tool_error")
        self.async_start = any(is_async_hook(h, "on_tool_start") for h in self.start)
        self.active = bool(self.start or self.end or self.error)


class _Batch:
    """The state of one `execute` call: its calls, their results so far, and shared context."""

    __slots__ = (
        "calls",
        "execution_ids",
        "hooks",
        "metadata",
        "results",
        "session_id",
        "signal",
        "signals",
        "stage_id",
        "started",
        "turn_id",
    )

    def __init__(
        self,
        calls: list[ToolCall],
        signal: AbortSignal | None,
        hooks: _Dispatch,
        **ids: Any,
    ) -> None:
        count = len(calls)
        self.calls = calls
        self.results: list[ToolCallResult | None] = [None] * count
        # perf_counter() when each handler started (0.0: never started), and its signal: an
        # unfinished call's signal is aborted with its result, also when the caller cancels.
        self.started: list[float] = [0.0] * count
        self.signals: list[AbortSignal | None] = [None] * count
        self.execution_ids = [f"x{next(_execution_ids)}" for _ in calls] if hooks.active else ()
        self.signal = signal
        self.hooks = hooks
        self.session_id: str | None = ids["session_id"]
        self.turn_id: str | None = ids["turn_id"]
        self.stage_id: str | None = ids["stage_id"]
        self.metadata: Mapping[str, Any] = ids["metadata"]

    def aborted(self) -> bool:
        return self.signal is not None and self.signal.aborted


class ToolExecutor:
    """Runs tool calls with policies, a shared concurrency limit, timeouts, abort and validation.

    One executor per session: its `max_concurrency` is shared by every batch running on it, so it
    protects that session's resources. It holds no event-loop-bound state between batches (each
    turn may run under a new loop), but serves one event loop at a time.

    Example:
        executor = ToolExecutor(registry, timeout=10.0, hooks=OpenTelemetryHooks())
        results = await executor.execute(calls, abort_signal=controller.signal)
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        default_policy: ExecutionPolicy = "parallel",
        max_concurrency: int = 10,
        timeout: float | None = 30.0,
        validate_arguments: bool = True,
        hooks: Hooks | None = None,
        on_tool_start: ToolStartCallback | None = None,
        on_tool_end: ToolEndCallback | None = None,
        on_tool_error: ToolErrorCallback | None = None,
    ) -> None:
        """Create an executor.

        Args:
            registry: Where tools are looked up by name.
            default_policy: Policy for tools whose definition leaves `execution_policy` as None.
            max_concurrency: Handlers running at once, across all batches of this executor.
                Sync handlers also get at most twice this many worker threads alive, counting
                threads abandoned after a timeout.
            timeout: Default seconds a handler may run (None or `math.inf`: no limit); a tool's
                own `timeout` overrides it. The clock starts when the handler starts.
            validate_arguments: Check arguments against the JSON Schema before calling handlers.
                (Malformed JSON and pydantic-typed parameters are always checked.)
            hooks: Observers of every call (combine several with `CompositeHooks`).
            on_tool_start: `(call, ctx)` just before a handler runs; sync or async.
            on_tool_end: `(result)` once for every call, as it finishes; sync or async.
            on_tool_error: `(call, exception)` for every call whose status is not `"ok"`.

        Raises:
            ValueError: for an unknown policy, a concurrency below 1, or a non-positive timeout.
        """
        if default_policy not in ("parallel", "sequential"):
            raise ValueError(
                f"default_policy must be 'parallel' or 'sequential', got {default_policy!r}"
            )
        if not _is_int(max_concurrency) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
        if timeout is not None and (isinstance(timeout, bool) or not timeout > 0):
            raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
        self.registry = registry
        self.default_policy: ExecutionPolicy = default_policy
        self.max_concurrency = max_concurrency
        self.timeout = math.inf if timeout is None else float(timeout)
        self.validate_arguments = validate_arguments
        self.hooks = hooks
        callbacks = None
        if on_tool_start or on_tool_end or on_tool_error:
            callbacks = CallbackHooks(on_tool_start, on_tool_end, on_tool_error)
        self._own_hooks = (hooks, callbacks)
        self._dispatch = _Dispatch(self._own_hooks)
        self._slots = SlotPool(max_concurrency)
        self._threads = WorkerThreads(2 * max_concurrency)

    @property
    def in_flight(self) -> int:
        """Handlers running right now across all batches of this executor."""
        return self._slots.in_use

    async def execute_single(
        self,
        call: ToolCall,
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        stage_id: str | None = None,
        abort_signal: AbortSignal | None = None,
        metadata: Mapping[str, Any] | None = None,
        hooks: Hooks | None = None,
    ) -> ToolCallResult:
        """Run one call; same options and guarantees as `execute`."""
        results = await self.execute(
            [call],
            session_id=session_id,
            turn_id=turn_id,
            stage_id=stage_id,
            abort_signal=abort_signal,
            metadata=metadata,
            hooks=hooks,
        )
        return results[0]

    async def execute(
        self,
        calls: Iterable[ToolCall],
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        stage_id: str | None = None,
        abort_signal: AbortSignal | None = None,
        metadata: Mapping[str, Any] | None = None,
        hooks: Hooks | None = None,
    ) -> list[ToolCallResult]:
        """Run a batch of calls and return exactly one result per call, in request order.

        Parallel calls run concurrently (within `max_concurrency`); a sequential call is a
        barrier: it starts after every earlier call finished, and later calls wait for it.
        Aborting `abort_signal` cancels running handlers and skips queued ones (`"aborted"`);
        calls that already finished keep their results. When this returns, every hook for these
        calls has returned. Cancelling the caller propagates, after the unfinished calls were
        reported `"aborted"` to the hooks and their signals set.

        Args:
            calls: The model's tool calls, in the order it made them.
            session_id: Passed to handlers in `ToolContext.session_id` and to hook events.
            turn_id: Passed to handlers in `ToolContext.turn_id` and to hook events.
            stage_id: The playbook stage, for hook events.
            abort_signal: Aborts the whole batch (e.g. on barge-in). May be set from any thread.
            metadata: Read-only values handed to every handler in `ToolContext.metadata`.
            hooks: Extra hooks for this batch only, called after the executor's own (a hook
                object that already is the executor's is not called twice).
        """
        call_list = list(calls)
        for call in call_list:
            if not isinstance(call, ToolCall):
                raise TypeError(f"execute() takes ToolCall objects, got {type(call).__name__}")
        batch = _Batch(
            call_list,
            abort_signal,
            self._dispatch if hooks is None else _Dispatch((*self._own_hooks, hooks)),
            session_id=session_id,
            turn_id=turn_id,
            stage_id=stage_id,
            metadata=MappingProxyType(dict(metadata)) if metadata else _EMPTY_METADATA,
        )
        try:
            if call_list and not batch.aborted():
                if abort_signal is None:
                    await self._run_segments(batch)
                else:
                    with anyio.CancelScope() as scope:
                        unsubscribe = abort_signal.subscribe(scope.cancel)
                        try:
                            await self._run_segments(batch)
                        finally:
                            unsubscribe()
        finally:
            # Whatever has no result now was aborted: by the signal, or by the caller cancelling
            # us. It still gets its one result and its hooks (shielded, so a cancelled caller
            # does not skip them); the caller's cancellation then propagates unchanged.
            if None in batch.results:
                with anyio.CancelScope(shield=True):
                    await self._abort_unfinished(batch)
        return batch.results  # type: ignore[return-value]  # every slot is filled above

    # Scheduling ----------------------------------------------------------------------------

    async def _run_segments(self, batch: _Batch) -> None:
        for segment in self._segments(batch.calls):
            if batch.aborted():
                return  # aborted from another thread; the cancel is on its way to our loop
            ready: list[tuple[int, Tool, Any]] = []
            for index in segment:
                prepared = await self._prepare(batch, index)
                if prepared is not None:
                    ready.append((index, *prepared))
            if len(ready) == 1:
                await self._run_call(batch, *ready[0])
            elif ready:
                limit = self._shared_limit(batch, ready)
                if limit is not None:
                    await self._run_group_with_one_deadline(batch, ready, limit)
                else:
                    async with anyio.create_task_group() as group:
                        for item in ready:
                            group.start_soon(self._run_call, batch, *item)

    def _segments(self, calls: list[ToolCall]) -> list[list[int]]:
        """Split the batch at sequential calls: each sequential call is a segment of its own."""
        segments: list[list[int]] = []
        group: list[int] = []
        for index, call in enumerate(calls):
            tool = self.registry.get(call.name)
            policy = (tool.definition.execution_policy if tool else None) or self.default_policy
            if policy == "parallel":
                group.append(index)
                continue
            if group:
                segments.append(group)
                group = []
            segments.append([index])
        if group:
            segments.append(group)
        return segments

    async def _prepare(self, batch: _Batch, index: int) -> tuple[Tool, Any] | None:
        """Look the tool up and build its arguments; a call that cannot run is finished here."""
        call = batch.calls[index]
        tool = self.registry.get(call.name)
        if tool is None:
            error = ToolNotFoundError(call.name, _not_found_message(call.name, self.registry))
            await self._finish(batch, index, "not_found", error=error)
            return None
        try:
            args = prepare_arguments(
                tool.definition, call.arguments, validate=self.validate_arguments
            )
        except ArgumentsError as exc:
            invalid = InvalidToolArgumentsError(call.name, exc.errors)
            await self._finish(batch, index, "invalid_arguments", error=invalid)
            return None
        return tool, args

    def _limit(self, tool: Tool) -> float:
        return tool.definition.timeout or self.timeout

    def _shared_limit(self, batch: _Batch, ready: list[tuple[int, Tool, Any]]) -> float | None:
        """The one time limit a parallel group may share, if its handlers all start together.

        One deadline on the group replaces a cancel scope and a timer per call (the largest
        per-call cost measured). It is only exact when every call has the same limit, all take a
        free slot at once, and no async start hook can delay one handler behind another.
        """
        limit = self._limit(ready[0][1])
        if any(self._limit(tool) != limit for _, tool, _ in ready[1:]):
            return None
        if batch.hooks.async_start or not self._slots.can_take(len(ready)):
            return None
        return limit

    # Running calls ------------------------------------------------------------------------

    def _context(self, batch: _Batch, index: int) -> ToolContext:
        call = batch.calls[index]
        signal = batch.signals[index] = AbortSignal(batch.signal)
        return ToolContext(call.call_id, signal, batch.session_id, batch.turn_id, batch.metadata)

    async def _announce(self, batch: _Batch, index: int, tool: Tool, ctx: ToolContext) -> None:
        call = batch.calls[index]
        event = ToolStartEvent(
            execution_id=batch.execution_ids[index],
            call_id=call.call_id,
            tool_name=call.name,
            tool_description=tool.definition.description,
            arguments=call.arguments,
            sensitive_fields=tool.definition.sensitive_fields,
            session_id=batch.session_id,
            turn_id=batch.turn_id,
            stage_id=batch.stage_id,
            context=ctx,
        )
        await emit(batch.hooks.start, "on_tool_start", event, shield=False)

    async def _run_call(self, batch: _Batch, index: int, tool: Tool, args: Any) -> None:
        """Run one call with its own slot and its own time limit."""
        waiting_since = time.perf_counter()
        await self._slots.acquire()
        try:
            queued_s = time.perf_counter() - waiting_since
            if batch.aborted():
                return  # aborted while queued; the batch gives it its result
            ctx = self._context(batch, index)
            if batch.hooks.start:
                await self._announce(batch, index, tool, ctx)
                if batch.aborted():
                    return
            limit = self._limit(tool)
            started = batch.started[index] = time.perf_counter()
            if limit == math.inf:  # no limit: no cancel scope to pay for
                status, value = await self._invoke(batch, index, tool, args, ctx)
            else:
                # The signal's deadline is taken before the scope's, so it has passed whenever
                # the scope has fired: the handler's own `finally` already sees the timeout.
                ctx.abort_signal._deadline = time.monotonic() + limit
                status, value = "timeout", None  # stays so if the scope swallows the cancel
                with anyio.move_on_after(limit) as deadline:
                    status, value = await self._invoke(batch, index, tool, args, ctx)
                if status == "timeout" or (status == "error" and deadline.cancel_called):
                    status, value = "timeout", ToolTimeoutError(tool.definition.name, limit)
            duration_s = time.perf_counter() - started
        finally:
            self._slots.release()
        if status == "aborted":
            return
        await self._complete(batch, index, status, value, duration_s, queued_s)

    async def _run_group_with_one_deadline(
        self, batch: _Batch, ready: list[tuple[int, Tool, Any]], limit: float
    ) -> None:
        holding = {index for index, _, _ in ready}
        self._slots.take(len(ready))
        try:
            async with anyio.create_task_group() as group:
                deadline = time.monotonic() + limit  # before the group's: see _run_call
                group.cancel_scope.deadline = anyio.current_time() + limit
                for index, tool, args in ready:
                    group.start_soon(
                        self._run_in_group, batch, index, tool, args, holding, deadline
                    )
        finally:
            for _ in holding:  # tasks cancelled before they ran
                self._slots.release()
        if group.cancel_scope.cancel_called:
            for index, tool, _ in ready:
                if batch.results[index] is None:
                    duration_s = time.perf_counter() - batch.started[index]
                    error = ToolTimeoutError(tool.definition.name, limit)
                    await self._complete(batch, index, "timeout", error, duration_s, 0.0)

    async def _run_in_group(
        self,
        batch: _Batch,
        index: int,
        tool: Tool,
        args: Any,
        holding: set[int],
        deadline: float,
    ) -> None:
        try:
            if batch.aborted():
                return  # aborted from another thread before this task ran
            ctx = self._context(batch, index)
            ctx.abort_signal._deadline = deadline
            if batch.hooks.start:
                await self._announce(batch, index, tool, ctx)
            started = batch.started[index] = time.perf_counter()
            status, value = await self._invoke(batch, index, tool, args, ctx)
            duration_s = time.perf_counter() - started
        finally:
            holding.discard(index)
            self._slots.release()
        if status == "timeout" or (status == "error" and time.monotonic() >= deadline):
            status, value = "timeout", ToolTimeoutError(tool.definition.name, self._limit(tool))
        if status != "aborted":
            await self._complete(batch, index, status, value, duration_s, 0.0)

    async def _invoke(
        self, batch: _Batch, index: int, tool: Tool, args: Any, ctx: ToolContext
    ) -> tuple[ToolCallStatus, Any]:
        """Call the handler; returns ("ok", value), ("error", exception) or ("aborted", None)."""
        token = current_call_id.set(ctx.call_id)
        try:
            if tool.is_async:
                value = await tool.handler(args, ctx)
            else:
                value = await self._threads.run(tool.handler, args, ctx)
                if hasattr(value, "__await__"):  # a plain def that returned a coroutine
                    value = await value
        except Exception as exc:
            # A handler whose cleanup raised while it was being cancelled is still aborted (or
            # timed out: the caller decides from its deadline), not a failure of its own.
            if batch.aborted():
                return "aborted", None
            if not ctx.abort_signal.aborted:
                ctx.abort_signal._deadline = None
            return "error", exc
        finally:
            current_call_id.reset(token)
        # A handler that returns once its signal is set (a cooperative thread noticing the
        # timeout or abort) has a partial value at best: the call still timed out / aborted.
        if batch.aborted():
            return "aborted", None
        deadline = ctx.abort_signal._deadline
        if deadline is not None and time.monotonic() >= deadline:
            return "timeout", None
        ctx.abort_signal._deadline = None  # finished in time: never "timed out" later
        return "ok", value

    # Results -----------------------------------------------------------------------------

    async def _abort_unfinished(self, batch: _Batch) -> None:
        signal = batch.signal
        reason = signal.reason if signal is not None and signal.aborted else "execution cancelled"
        now = time.perf_counter()
        for index, result in enumerate(batch.results):
            if result is not None:
                continue
            call_signal = batch.signals[index]
            if call_signal is not None:
                call_signal._abort(reason)  # a thread still running learns it should stop
            name = batch.calls[index].name
            text = f"tool call {name!r} aborted" + (f" ({reason})" if reason is not None else "")
            started = batch.started[index]
            await self._finish(
                batch,
                index,
                "aborted",
                error=ToolAbortedError(name, text, reason),
                duration_s=now - started if started else 0.0,
            )

    async def _complete(
        self,
        batch: _Batch,
        index: int,
        status: ToolCallStatus,
        value: Any,
        duration_s: float,
        queued_s: float,
    ) -> None:
        if status == "ok":
            await self._finish(
                batch, index, "ok", value=value, duration_s=duration_s, queued_s=queued_s
            )
            return
        if status == "timeout":
            signal = batch.signals[index]
            if signal is not None:
                signal._abort("timeout")  # tell its listeners too, not only pollers
        await self._finish(
            batch, index, status, error=value, duration_s=duration_s, queued_s=queued_s
        )

    async def _finish(
        self,
        batch: _Batch,
        index: int,
        status: ToolCallStatus,
        *,
        value: Any = None,
        error: BaseException | None = None,
        duration_s: float = 0.0,
        queued_s: float = 0.0,
    ) -> None:
        """Record the call's one result, then report it to the hooks."""
        if batch.results[index] is not None:
            return
        call = batch.calls[index]
        message = None
        if error is not None:
            message = (
                str(error)
                if isinstance(error, ToolExecutionError)
                else (f"tool {call.name!r} raised {type(error).__name__}: {error}")
            )
        result = ToolCallResult(call.call_id, call.name, status, value, message, duration_s * 1000)
        batch.results[index] = result
        hooks = batch.hooks
        if not hooks.active:
            return
        execution_id = batch.execution_ids[index]
        if error is not None and hooks.error:
            event = ToolErrorEvent(
                execution_id=execution_id,
                call_id=call.call_id,
                tool_name=call.name,
                status=status,
                error=error,
                arguments=call.arguments,
                session_id=batch.session_id,
                turn_id=batch.turn_id,
                stage_id=batch.stage_id,
            )
            await emit(hooks.error, "on_tool_error", event)
        if hooks.end:
            tool = self.registry.get(call.name)
            definition = tool.definition if tool is not None else None
            end = ToolEndEvent(
                execution_id=execution_id,
                call_id=call.call_id,
                tool_name=call.name,
                status=status,
                tool_description=definition.description if definition else "",
                arguments=call.arguments,
                sensitive_fields=definition.sensitive_fields if definition else (),
                error=message,
                error_type=_error_type(status, error),
                duration_s=duration_s,
                queued_s=queued_s,
                started=batch.started[index] > 0,
                result=value,
                result_content=result.to_content(),
                session_id=batch.session_id,
                turn_id=batch.turn_id,
                stage_id=batch.stage_id,
            )
            await emit(hooks.end, "on_tool_end", end)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _error_type(status: str, error: BaseException | None) -> str | None:
    """The status word, or the fully qualified class name of what a handler raised."""
    if status == "ok":
        return None
    if status != "error" or error is None:
        return status
    cls = type(error)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _not_found_message(name: str, registry: ToolRegistry) -> str:
    available = registry.names()
    by_lower = {n.lower(): n for n in available}
    close = difflib.get_close_matches(name, available, n=3, cutoff=0.6)
    if name.lower() in by_lower and by_lower[name.lower()] not in close:
        close.insert(0, by_lower[name.lower()])
    message = f"unknown tool {name!r}"
    if close:
        message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    if available:
        message += " Available tools: " + ", ".join(available) + "."
    else:
        message += " (no tools are registered)."
    return message
