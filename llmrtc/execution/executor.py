"""`ToolExecutor`: runs a model's tool calls and gives every call exactly one result, in order."""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectSendStream

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
    error_type_name,
    hooks_for,
)
from llmrtc.tools.calls import ToolCall, ToolCallResult, ToolCallStatus
from llmrtc.tools.context import ToolContext
from llmrtc.tools.definition import ExecutionPolicy
from llmrtc.tools.errors import ToolError
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool
from llmrtc.tools.validation import ArgumentsError, prepare_arguments

__all__ = ["ToolExecutor"]

_EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})
# One logger for the package (not per module): handler failures are logged here in full.
logger = logging.getLogger("llmrtc.execution")

ResultCallback = Callable[[ToolCallResult], object]
"""`on_result(result)`: called once per call as it gets its result."""
_execution_ids = itertools.count(1)


class _Dispatch:
    """The hooks of one batch, sorted by what they listen to (picked once, not per call)."""

    __slots__ = ("active", "end", "error", "start")

    def __init__(self, leaves: Iterable[Hooks | None]) -> None:
        leaves = tuple(leaves)
        self.start = hooks_for(leaves, "on_tool_start")
        self.end = hooks_for(leaves, "on_tool_end")
        self.error = hooks_for(leaves, "on_tool_error")
        self.active = bool(self.start or self.end or self.error)


class _Batch:
    """The state of one `execute` call: its calls, their results so far, and shared context."""

    __slots__ = (
        "announced",
        "calls",
        "durations",
        "errors",
        "execution_ids",
        "hooks",
        "metadata",
        "on_result",
        "queued",
        "reported",
        "reporting",
        "results",
        "session_id",
        "signal",
        "signals",
        "stage_id",
        "started",
        "tools",
        "turn_id",
    )

    def __init__(
        self,
        calls: list[ToolCall],
        signal: AbortSignal | None,
        hooks: _Dispatch,
        tools: ToolRegistry,
        on_result: ResultCallback | None,
        **ids: Any,
    ) -> None:
        count = len(calls)
        self.calls = calls
        self.results: list[ToolCallResult | None] = [None] * count
        # perf_counter() when each handler started (0.0: never started), and its signal: an
        # unfinished call's signal is aborted with its result, also when the caller cancels.
        self.started: list[float] = [0.0] * count
        self.signals: list[AbortSignal | None] = [None] * count
        # For the hooks: what each call's end event needs, and whether it was sent.
        self.announced = [False] * count
        self.reported = [False] * count
        self.durations = [0.0] * count
        self.queued = [0.0] * count
        self.errors: list[BaseException | None] = [None] * count
        self.execution_ids = [f"x{next(_execution_ids)}" for _ in calls] if hooks.active else ()
        self.signal = signal
        self.hooks = hooks
        self.tools = tools
        self.on_result = on_result
        # Whether finished calls are reported (to hooks or on_result) in the caller's task.
        self.reporting = hooks.active or on_result is not None
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
        tools: ToolRegistry | None = None,
        on_result: ResultCallback | None = None,
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
            tools=tools,
            on_result=on_result,
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
        tools: ToolRegistry | None = None,
        on_result: ResultCallback | None = None,
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
            tools: The tools this batch may run (default: the executor's `registry`), usually
                a `registry.scoped(...)` view of what the model was offered. A call to any
                other tool never runs: it gets status `"not_found"` with the view's
                `missing_tool_message`. Policies and hook events come from the same view.
            on_result: Called with each call's result as it gets it (in finish order), once
                per call: also for calls that never ran or were settled as aborted, and when
                the caller is cancelled, always before `execute` returns or propagates. Called
                synchronously in the caller's task, before the end hooks of that call; what it
                raises is logged and ignored.
        """
        call_list = list(calls)
        for call in call_list:
            if not isinstance(call, ToolCall):
                raise TypeError(f"execute() takes ToolCall objects, got {type(call).__name__}")
        batch = _Batch(
            call_list,
            abort_signal,
            self._dispatch if hooks is None else _Dispatch((*self._own_hooks, hooks)),
            self.registry if tools is None else tools,
            on_result,
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
            if None in batch.results or (batch.reporting and not all(batch.reported)):
                with anyio.CancelScope(shield=True):
                    await self._settle(batch)
        return batch.results  # type: ignore[return-value]  # every slot is filled above

    # Scheduling ----------------------------------------------------------------------------

    async def _run_segments(self, batch: _Batch) -> None:
        for segment in self._segments(batch):
            if batch.aborted():
                return  # aborted from another thread; the cancel is on its way to our loop
            ready: list[tuple[int, Tool, Any]] = []
            for index in segment:
                prepared = await self._prepare(batch, index)
                if prepared is not None:
                    ready.append((index, *prepared))
            if len(ready) == 1:
                await self._run_call(batch, *ready[0], None)
                await self._report(batch, ready[0][0])
            elif ready:
                await self._run_group(batch, ready)

    def _segments(self, batch: _Batch) -> list[list[int]]:
        """Split the batch at sequential calls: each sequential call is a segment of its own."""
        segments: list[list[int]] = []
        group: list[int] = []
        for index, call in enumerate(batch.calls):
            tool = batch.tools.get(call.name)
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
        tool = batch.tools.get(call.name)
        if tool is None:
            error = ToolNotFoundError(call.name, batch.tools.missing_tool_message(call.name))
            self._record(batch, index, "not_found", error=error)
            await self._report(batch, index)
            return None
        try:
            args = prepare_arguments(
                tool.definition, call.arguments, validate=self.validate_arguments
            )
        except ArgumentsError as exc:
            invalid = InvalidToolArgumentsError(call.name, exc.errors)
            self._record(batch, index, "invalid_arguments", error=invalid)
            await self._report(batch, index)
            return None
        return tool, args

    def _limit(self, tool: Tool) -> float:
        return tool.definition.timeout or self.timeout

    def _shared_limit(self, ready: list[tuple[int, Tool, Any]]) -> float | None:
        """The one time limit a parallel group may share, if its handlers all start together.

        One deadline on the group replaces a cancel scope and a timer per call (the largest
        per-call cost measured). It is exact when every call has the same finite limit and all
        take a free slot at once: their start hooks then run before the deadline is set.
        """
        limit = self._limit(ready[0][1])
        if limit == math.inf or any(self._limit(tool) != limit for _, tool, _ in ready[1:]):
            return None
        return limit if self._slots.can_take(len(ready)) else None

    async def _run_group(self, batch: _Batch, ready: list[tuple[int, Tool, Any]]) -> None:
        """Run parallel calls; their end hooks run here, in the caller's task, as each ends."""
        limit = self._shared_limit(ready)
        contexts: dict[int, ToolContext] = {}
        if limit is not None:
            self._slots.take(len(ready))
            holding = {index for index, _, _ in ready}
            for index, tool, _ in ready:  # start hooks before the clock starts
                contexts[index] = self._context(batch, index)
                await self._announce(batch, index, tool, contexts[index])
        # Children tell this task which call ended, so end hooks run here, in the caller's
        # task; without such hooks there is nothing to tell (and no stream to pay for).
        reporting = bool(batch.hooks.end or batch.hooks.error or batch.on_result)
        send, receive = (
            anyio.create_memory_object_stream[int](math.inf) if reporting else (None, None)
        )
        try:
            async with anyio.create_task_group() as group:
                if limit is None:
                    for index, tool, args in ready:
                        group.start_soon(self._run_call, batch, index, tool, args, send)
                else:
                    deadline = time.monotonic() + limit  # before the group's: see _run_call
                    group.cancel_scope.deadline = anyio.current_time() + limit
                    for index, tool, args in ready:
                        group.start_soon(
                            self._run_in_group,
                            batch,
                            (index, tool, args, contexts[index]),
                            holding,
                            deadline,
                            send,
                        )
                if receive is not None:
                    for _ in ready:
                        await self._report(batch, await receive.receive())
        finally:
            if send is not None and receive is not None:
                send.close()
                receive.close()
            if limit is not None:
                for _ in holding:  # tasks cancelled before they ran
                    self._slots.release()
        if limit is not None and group.cancel_scope.cancel_called:
            now = time.perf_counter()
            for index, tool, _ in ready:
                if batch.results[index] is None:
                    started = batch.started[index]
                    self._timed_out(batch, index, tool, limit, now - started if started else 0.0)
        for index, _, _ in ready:  # whatever finished as the group ended
            await self._report(batch, index)

    # Running calls ------------------------------------------------------------------------

    def _context(self, batch: _Batch, index: int) -> ToolContext:
        call = batch.calls[index]
        signal = batch.signals[index] = AbortSignal(batch.signal)
        return ToolContext(call.call_id, signal, batch.session_id, batch.turn_id, batch.metadata)

    async def _announce(self, batch: _Batch, index: int, tool: Tool, ctx: ToolContext) -> None:
        if not batch.hooks.start:
            return
        batch.announced[index] = True
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

    async def _run_call(
        self,
        batch: _Batch,
        index: int,
        tool: Tool,
        args: Any,
        notify: MemoryObjectSendStream[int] | None,
    ) -> None:
        """Run one call with its own slot and its own time limit."""
        try:
            waiting_since = time.perf_counter()
            await self._slots.acquire()
            try:
                batch.queued[index] = time.perf_counter() - waiting_since
                if batch.aborted():
                    return  # aborted while queued; the batch gives it its result
                ctx = self._context(batch, index)
                await self._announce(batch, index, tool, ctx)
                if batch.aborted():
                    return
                limit = self._limit(tool)
                started = batch.started[index] = time.perf_counter()
                if limit == math.inf:  # no limit: no cancel scope to pay for
                    status, value = await self._invoke(batch, tool, args, ctx)
                else:
                    # The signal's deadline is taken before the scope's, so it has passed
                    # whenever the scope has fired: the handler's `finally` sees the timeout.
                    ctx.abort_signal._deadline = time.monotonic() + limit
                    status, value = "timeout", None  # stays so if the scope swallows the cancel
                    with anyio.move_on_after(limit) as deadline:
                        status, value = await self._invoke(batch, tool, args, ctx)
                    if status == "error" and deadline.cancel_called:
                        status = "timeout"
                duration_s = time.perf_counter() - started
            finally:
                self._slots.release()
            self._complete(batch, index, tool, status, value, duration_s)
        finally:
            if notify is not None:
                notify.send_nowait(index)

    async def _run_in_group(
        self,
        batch: _Batch,
        item: tuple[int, Tool, Any, ToolContext],
        holding: set[int],
        deadline: float,
        notify: MemoryObjectSendStream[int] | None,
    ) -> None:
        index, tool, args, ctx = item
        try:
            try:
                if batch.aborted():
                    return  # aborted from another thread before this task ran
                ctx.abort_signal._deadline = deadline
                started = batch.started[index] = time.perf_counter()
                status, value = await self._invoke(batch, tool, args, ctx)
                duration_s = time.perf_counter() - started
            finally:
                holding.discard(index)
                self._slots.release()
            if status == "error" and time.monotonic() >= deadline:
                status = "timeout"
            self._complete(batch, index, tool, status, value, duration_s)
        finally:
            if notify is not None:
                notify.send_nowait(index)

    async def _invoke(
        self, batch: _Batch, tool: Tool, args: Any, ctx: ToolContext
    ) -> tuple[ToolCallStatus, Any]:
        """Call the handler; returns ("ok", value), ("error", exception), ("timeout", None) or
        ("aborted", None)."""
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

    def _complete(
        self,
        batch: _Batch,
        index: int,
        tool: Tool,
        status: ToolCallStatus,
        value: Any,
        duration_s: float,
    ) -> None:
        if status == "ok":
            self._record(batch, index, "ok", value=value, duration_s=duration_s)
        elif status == "timeout":
            self._timed_out(batch, index, tool, self._limit(tool), duration_s)
        elif status == "error":
            self._record(batch, index, "error", error=value, duration_s=duration_s)
        # "aborted": left for the batch, which aborts every unfinished call alike

    def _timed_out(
        self, batch: _Batch, index: int, tool: Tool, limit: float, duration_s: float
    ) -> None:
        signal = batch.signals[index]
        if signal is not None:
            signal._abort("timeout")  # tell its listeners too, not only pollers
        error = ToolTimeoutError(tool.definition.name, limit)
        self._record(batch, index, "timeout", error=error, duration_s=duration_s)

    async def _settle(self, batch: _Batch) -> None:
        """Give every unfinished call its aborted result, then report whatever is unreported."""
        signal = batch.signal
        reason = signal.reason if signal is not None and signal.aborted else "execution cancelled"
        now = time.perf_counter()
        for index, result in enumerate(batch.results):
            if result is None:
                call_signal = batch.signals[index]
                if call_signal is not None:
                    call_signal._abort(reason)  # a thread still running learns it should stop
                name = batch.calls[index].name
                text = f"tool call {name!r} aborted" + (
                    f" ({reason})" if reason is not None else ""
                )
                started = batch.started[index]
                self._record(
                    batch,
                    index,
                    "aborted",
                    error=ToolAbortedError(name, text, reason),
                    duration_s=now - started if started else 0.0,
                )
            await self._report(batch, index)

    def _record(
        self,
        batch: _Batch,
        index: int,
        status: ToolCallStatus,
        *,
        value: Any = None,
        error: BaseException | None = None,
        duration_s: float = 0.0,
    ) -> None:
        """Record the call's one result (the first recorded wins)."""
        if batch.results[index] is not None:
            return
        call = batch.calls[index]
        message = None
        if error is not None:
            message = _message_for_model(call, error)
        batch.results[index] = ToolCallResult(
            call.call_id, call.name, status, value, message, duration_s * 1000
        )
        batch.durations[index] = duration_s
        batch.errors[index] = error

    async def _report(self, batch: _Batch, index: int) -> None:
        """Tell the hooks how the call ended (once; in the task that calls this)."""
        hooks = batch.hooks
        result = batch.results[index]
        if not batch.reporting or result is None or batch.reported[index]:
            return
        batch.reported[index] = True
        call = batch.calls[index]
        error = batch.errors[index]
        token = current_call_id.set(call.call_id)  # so a hook's own log records carry it
        try:
            if batch.on_result is not None:
                try:
                    batch.on_result(result)
                except Exception:
                    logger.exception("on_result callback raised for call %s; ignored", call.call_id)
            if not hooks.active:
                return
            execution_id = batch.execution_ids[index]
            if error is not None and hooks.error:
                event = ToolErrorEvent(
                    execution_id=execution_id,
                    call_id=call.call_id,
                    tool_name=call.name,
                    status=result.status,
                    error=error,
                    arguments=call.arguments,
                    session_id=batch.session_id,
                    turn_id=batch.turn_id,
                    stage_id=batch.stage_id,
                )
                await emit(hooks.error, "on_tool_error", event)
            if hooks.end:
                tool = batch.tools.get(call.name)
                definition = tool.definition if tool is not None else None
                end = ToolEndEvent(
                    execution_id=execution_id,
                    call_id=call.call_id,
                    tool_name=call.name,
                    status=result.status,
                    tool_description=definition.description if definition else "",
                    arguments=call.arguments,
                    sensitive_fields=definition.sensitive_fields if definition else (),
                    error=result.error,
                    error_type=_error_type(result.status, error),
                    exception=error if result.status == "error" else None,
                    duration_s=batch.durations[index],
                    queued_s=batch.queued[index],
                    started=batch.announced[index],
                    result=result.result,
                    result_content=result.to_content(),
                    session_id=batch.session_id,
                    turn_id=batch.turn_id,
                    stage_id=batch.stage_id,
                )
                await emit(hooks.end, "on_tool_end", end)
        finally:
            current_call_id.reset(token)


def _message_for_model(call: ToolCall, error: BaseException) -> str:
    """What the model is told about a failure: a `ToolError`'s own words, the status text of
    the executor's own errors, and for anything else a short generic sentence (a voice agent
    may speak it, and exception text can hold secrets), while the log gets the full detail."""
    if isinstance(error, ToolError | ToolExecutionError):
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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _error_type(status: str, error: BaseException | None) -> str | None:
    """The status word, or the fully qualified class name of what a handler raised."""
    if status == "ok":
        return None
    if status != "error" or error is None:
        return status
    return error_type_name(error)
