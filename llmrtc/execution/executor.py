"""`ToolExecutor`: runs a model's tool calls and gives every call exactly one result, in order."""

from __future__ import annotations

import difflib
import inspect
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.execution._slots import SlotPool
from llmrtc.execution.errors import (
    InvalidToolArgumentsError,
    ToolAbortedError,
    ToolExecutionError,
    ToolNotFoundError,
    ToolTimeoutError,
)
from llmrtc.tools.calls import ToolCall, ToolCallResult
from llmrtc.tools.context import ToolContext
from llmrtc.tools.definition import ExecutionPolicy
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool
from llmrtc.tools.validation import ArgumentsError, prepare_arguments

__all__ = ["ToolExecutor"]

logger = logging.getLogger(__name__)

ToolStartCallback = Callable[[ToolCall, ToolContext], Any]
ToolEndCallback = Callable[[ToolCallResult], Any]
ToolErrorCallback = Callable[[ToolCall, BaseException], Any]

_EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})


class _Batch:
    """The state of one `execute` call: its calls, their results so far, and shared context."""

    __slots__ = ("calls", "metadata", "results", "session_id", "signal", "started", "turn_id")

    def __init__(
        self,
        calls: list[ToolCall],
        session_id: str | None,
        turn_id: str | None,
        signal: AbortSignal | None,
        metadata: Mapping[str, Any],
    ) -> None:
        self.calls = calls
        self.results: list[ToolCallResult | None] = [None] * len(calls)
        # perf_counter() when each handler started (0.0: never started), for aborted durations.
        self.started: list[float] = [0.0] * len(calls)
        self.session_id = session_id
        self.turn_id = turn_id
        self.signal = signal
        self.metadata = metadata


class ToolExecutor:
    """Runs tool calls with policies, a shared concurrency limit, timeouts, abort and validation.

    One executor per session: its `max_concurrency` is shared by every batch running on it, so it
    protects that session's resources. It holds no event-loop-bound state between batches.

    Example:
        executor = ToolExecutor(registry, timeout=10.0)
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
        on_tool_start: ToolStartCallback | None = None,
        on_tool_end: ToolEndCallback | None = None,
        on_tool_error: ToolErrorCallback | None = None,
    ) -> None:
        """Create an executor.

        Args:
            registry: Where tools are looked up by name.
            default_policy: Policy for tools whose definition leaves `execution_policy` as None.
            max_concurrency: Handlers running at once, across all batches of this executor.
            timeout: Default seconds a handler may run (None or `math.inf`: no limit); a tool's
                own `timeout` overrides it. The clock starts when the handler starts.
            validate_arguments: Check arguments against the JSON Schema before calling handlers.
                (Malformed JSON and pydantic-typed parameters are always checked.)
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
        if (
            isinstance(max_concurrency, bool)
            or not isinstance(max_concurrency, int)
            or max_concurrency < 1
        ):
            raise ValueError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be positive seconds or None, got {timeout!r}")
        self.registry = registry
        self.default_policy: ExecutionPolicy = default_policy
        self.max_concurrency = max_concurrency
        self.timeout = math.inf if timeout is None else float(timeout)
        self.validate_arguments = validate_arguments
        self.on_tool_start = on_tool_start
        self.on_tool_end = on_tool_end
        self.on_tool_error = on_tool_error
        self._slots = SlotPool(max_concurrency)
        # Sync handlers get their own thread limiter, per event loop: threads abandoned after a
        # timeout then never eat into anyio's shared default pool.
        self._thread_limiter: RunVar[anyio.CapacityLimiter] = RunVar(f"llmrtc-tools-{id(self)}")

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
        abort_signal: AbortSignal | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> ToolCallResult:
        """Run one call; same guarantees as `execute`."""
        results = await self.execute(
            [call],
            session_id=session_id,
            turn_id=turn_id,
            abort_signal=abort_signal,
            metadata=metadata,
        )
        return results[0]

    async def execute(
        self,
        calls: Iterable[ToolCall],
        *,
        session_id: str | None = None,
        turn_id: str | None = None,
        abort_signal: AbortSignal | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[ToolCallResult]:
        """Run a batch of calls and return exactly one result per call, in request order.

        Parallel calls run concurrently (within `max_concurrency`); a sequential call is a
        barrier: it starts after every earlier call finished, and later calls wait for it.
        Aborting `abort_signal` cancels running handlers and skips queued ones (`"aborted"`);
        calls that already finished keep their results.

        Args:
            calls: The model's tool calls, in the order it made them.
            session_id: Passed to handlers in `ToolContext.session_id`.
            turn_id: Passed to handlers in `ToolContext.turn_id`.
            abort_signal: Aborts the whole batch (e.g. on barge-in). May be set from any thread.
            metadata: Read-only values handed to every handler in `ToolContext.metadata`.
        """
        call_list = list(calls)
        for call in call_list:
            if not isinstance(call, ToolCall):
                raise TypeError(f"execute() takes ToolCall objects, got {type(call).__name__}")
        batch = _Batch(
            call_list,
            session_id,
            turn_id,
            abort_signal,
            MappingProxyType(dict(metadata)) if metadata else _EMPTY_METADATA,
        )
        try:
            if call_list and not (abort_signal is not None and abort_signal.aborted):
                await self._run_batch(batch)
        finally:
            # Whatever has no result now was aborted: by the signal, or by the caller cancelling
            # us. It still gets its one result and its hooks (shielded, so a cancelled caller
            # does not skip them); the caller's cancellation then propagates unchanged.
            if any(result is None for result in batch.results):
                with anyio.CancelScope(shield=True):
                    await self._abort_unfinished(batch)
        return batch.results  # type: ignore[return-value]  # every slot is filled above

    async def _run_batch(self, batch: _Batch) -> None:
        with anyio.CancelScope() as scope:
            unsubscribe = batch.signal.subscribe(scope.cancel) if batch.signal else None
            try:
                for segment in self._segments(batch.calls):
                    if len(segment) == 1:
                        await self._run_call(batch, segment[0])
                        continue
                    async with anyio.create_task_group() as group:
                        for index in segment:
                            group.start_soon(self._run_call, batch, index)
            finally:
                if unsubscribe is not None:
                    unsubscribe()

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

    async def _run_call(self, batch: _Batch, index: int) -> None:
        call = batch.calls[index]
        tool = self.registry.get(call.name)
        if tool is None:
            message = _not_found_message(call.name, self.registry.names())
            await self._finish(batch, index, "not_found", ToolNotFoundError(call.name, message))
            return
        try:
            args = prepare_arguments(
                tool.definition, call.arguments, validate=self.validate_arguments
            )
        except ArgumentsError as exc:
            await self._finish(
                batch, index, "invalid_arguments", InvalidToolArgumentsError(call.name, exc.errors)
            )
            return

        await self._slots.acquire()
        try:
            if batch.signal is not None and batch.signal.aborted:
                return  # aborted while queued; the batch fills in the result
            controller = AbortController(parent=batch.signal)
            ctx = ToolContext(
                call_id=call.call_id,
                abort_signal=controller.signal,
                session_id=batch.session_id,
                turn_id=batch.turn_id,
                metadata=batch.metadata,
            )
            if self.on_tool_start is not None:
                await _call_hook("on_tool_start", self.on_tool_start, call, ctx)
            outcome, value, duration_ms = await self._invoke(
                batch, index, tool, args, ctx, controller
            )
        finally:
            self._slots.release()

        if outcome == "ok":
            await self._finish(batch, index, "ok", value, duration_ms)
        elif outcome == "timeout":
            await self._finish(batch, index, "timeout", value, duration_ms)
        else:
            await self._finish(batch, index, "error", value, duration_ms)

    async def _invoke(
        self,
        batch: _Batch,
        index: int,
        tool: Tool,
        args: Any,
        ctx: ToolContext,
        controller: AbortController,
    ) -> tuple[str, Any, float]:
        """Run the handler under its timeout; returns (outcome, value or exception, duration)."""
        limit = tool.definition.timeout or self.timeout
        started = batch.started[index] = time.perf_counter()
        try:
            with anyio.move_on_after(limit) as deadline:
                if tool.is_async:
                    value = await tool.handler(args, ctx)
                else:
                    value = await anyio.to_thread.run_sync(
                        tool.handler, args, ctx, abandon_on_cancel=True, limiter=self._limiter()
                    )
        except Exception as exc:
            return "error", exc, (time.perf_counter() - started) * 1000
        duration_ms = (time.perf_counter() - started) * 1000
        if deadline.cancel_called:
            # Tell cooperative code (a thread cannot be killed) to stop; its late value is dropped.
            controller.abort("timeout")
            return "timeout", ToolTimeoutError(tool.definition.name, limit), duration_ms
        return "ok", value, duration_ms

    def _limiter(self) -> anyio.CapacityLimiter:
        try:
            return self._thread_limiter.get()
        except LookupError:
            limiter = anyio.CapacityLimiter(self.max_concurrency)
            self._thread_limiter.set(limiter)
            return limiter

    async def _abort_unfinished(self, batch: _Batch) -> None:
        signal = batch.signal
        reason = signal.reason if signal is not None and signal.aborted else "execution cancelled"
        now = time.perf_counter()
        for index, result in enumerate(batch.results):
            if result is None:
                name = batch.calls[index].name
                started = batch.started[index]
                await self._finish(
                    batch,
                    index,
                    "aborted",
                    ToolAbortedError(name, f"tool call {name!r} aborted ({reason})", reason),
                    (now - started) * 1000 if started else 0.0,
                )

    async def _finish(
        self, batch: _Batch, index: int, status: str, value: Any, duration_ms: float = 0.0
    ) -> None:
        """Record the call's one result, then report it to the hooks."""
        if batch.results[index] is not None:
            return
        call = batch.calls[index]
        if status == "ok":
            result = ToolCallResult(call.call_id, call.name, "ok", value, None, duration_ms)
        else:
            error = value if isinstance(value, ToolExecutionError) else None
            message = (
                str(value)
                if error
                else f"tool {call.name!r} raised {type(value).__name__}: {value}"
            )
            result = ToolCallResult(call.call_id, call.name, status, None, message, duration_ms)  # type: ignore[arg-type]
        batch.results[index] = result
        if status != "ok" and self.on_tool_error is not None:
            await _call_hook("on_tool_error", self.on_tool_error, call, value)
        if self.on_tool_end is not None:
            await _call_hook("on_tool_end", self.on_tool_end, result)


async def _call_hook(name: str, hook: Callable[..., Any], *args: Any) -> None:
    """Call a sync or async hook; a hook that raises is logged and changes nothing."""
    try:
        outcome = hook(*args)
        if inspect.isawaitable(outcome):
            # Shielded: a hook reporting an abort must not itself be cut short by it.
            with anyio.CancelScope(shield=True):
                await outcome
    except Exception:
        logger.exception("tool hook %s (%r) raised; ignored", name, hook)


def _not_found_message(name: str, available: list[str]) -> str:
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
