"""The state of one batch and of each call in it, and the one path by which a call finishes."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.execution._reporting import Dispatch, message_for_model
from llmrtc.execution.errors import ToolAbortedError
from llmrtc.telemetry.hooks import ToolStartEvent
from llmrtc.tools._errors import speakable_reason
from llmrtc.tools.calls import ToolCall, ToolCallResult, ToolCallStatus, new_result
from llmrtc.tools.context import ToolContext
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool

ResultCallback = Callable[[ToolCallResult], object]
"""`on_result(result)`: called once per call as it gets its result."""

_execution_ids = itertools.count(1)
_scope_classes: dict[bool, type[anyio.CancelScope]] = {}  # by "is asyncio"


class CallState:
    """Everything the executor knows about one call of a batch, from lookup to report.

    The defaults live on the class (no `__slots__`): a call sets only what happens to it,
    which keeps building a batch cheap.
    """

    tool: Tool | None = None
    args: Any = None
    limit = 0.0  # seconds the handler may run (math.inf: no limit)
    # Set when the handler is about to run: its controller (a child of the batch signal, so a
    # timeout of one call never aborts its siblings) and the context it receives.
    controller: AbortController | None = None
    context: ToolContext | None = None
    scope: anyio.CancelScope | None = None  # cancels this call alone
    # Its tool has on_interrupt="finish": once its handler started, an abort of the batch
    # leaves it running (its controller is then no child of the batch signal).
    finish = False
    running = False  # its handler is running
    deadline = 0.0  # time.monotonic() when its time limit passes (0.0: no limit)
    expires_at = 0.0  # the same on the loop's clock (asyncio)
    expired = False  # the batch timer ended it at its limit
    event: ToolStartEvent | None = None  # built only when hooks listen
    announced = False  # start hooks were told
    started = 0.0  # perf_counter() when the handler started; 0.0: never started
    queued_s = 0.0
    duration_s = 0.0
    result: ToolCallResult | None = None
    error: BaseException | None = None  # what hooks get for a non-ok result
    reported = False
    reasoning: str | None = None  # the model's `_reasoningForCall`, taken out of the arguments

    def __init__(self, call: ToolCall, execution_id: str) -> None:
        self.call = call
        self.execution_id = execution_id

    def expire(self) -> None:
        """The time limit passed: tell the handler's signal, then cancel the handler."""
        self.expired = True
        if self.controller is not None:
            self.controller.abort("timeout")
        if self.scope is not None:
            self.scope.cancel()

    def timed_out(self) -> bool:
        """Whether the handler ran past its limit (its signal's deadline is exact even when
        the loop is too busy to fire the timer on time)."""
        return self.expired or (self.deadline != 0.0 and time.monotonic() >= self.deadline)


class Batch:
    """One `execute` call: its calls in request order and what they share."""

    __slots__ = (
        "calls",
        "finishing",
        "hooks",
        "loop",
        "metadata",
        "models",
        "on_result",
        "reporting",
        "session_id",
        "signal",
        "stage_id",
        "timed",
        "timer",
        "timer_at",
        "tools",
        "turn_id",
    )

    def __init__(
        self,
        calls: list[ToolCall],
        *,
        signal: AbortSignal | None,
        hooks: Dispatch,
        tools: ToolRegistry,
        on_result: ResultCallback | None,
        loop: Any,
        session_id: str | None,
        turn_id: str | None,
        stage_id: str | None,
        metadata: Mapping[str, Any],
        models: Any = None,
    ) -> None:
        if hooks.active:
            self.calls = [CallState(call, f"x{next(_execution_ids)}") for call in calls]
        else:
            self.calls = [CallState(call, "") for call in calls]
        self.signal = signal
        self.hooks = hooks
        self.tools = tools
        self.on_result = on_result
        # Whether finished calls are reported (to hooks or on_result) in the caller's task.
        self.reporting = hooks.active or on_result is not None
        self.loop = loop  # the running asyncio loop, or None (trio)
        # asyncio: one loop timer for the whole batch, at the earliest time limit of its
        # running calls (a timer per call, or a deadline on each call's scope, costs more).
        self.timer: Any = None
        self.timer_at = 0.0
        self.timed: list[CallState] = []
        self.session_id = session_id
        self.turn_id = turn_id
        self.stage_id = stage_id
        self.metadata = metadata
        self.models = models  # the executor's model pool, handed to each call's context
        # Some call's tool has on_interrupt="finish": an abort then stops calls one by one
        # (see `interrupt`) instead of cancelling the whole batch at once.
        self.finishing = False

    def arm(self, item: CallState, limit: float) -> None:
        """Make the batch timer end `item` after `limit` seconds (asyncio only)."""
        loop = self.loop
        item.expires_at = when = loop.time() + limit
        self.timed.append(item)
        if self.timer is None or when < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = loop.call_at(when, self._expire_due)
            self.timer_at = when

    def _expire_due(self) -> None:
        self.timer = None
        now = self.loop.time()
        waiting = []
        for item in self.timed:
            if not item.running:
                continue  # ended in time, or never started
            if item.expires_at <= now:
                item.expire()
            else:
                waiting.append(item)
        self.timed = waiting
        if waiting:
            self.timer_at = min(item.expires_at for item in waiting)
            self.timer = self.loop.call_at(self.timer_at, self._expire_due)

    def new_scope(self) -> anyio.CancelScope:
        """A fresh cancel scope for one call. anyio picks the backend's class on every
        `CancelScope()`; the class is looked up once per backend instead."""
        backend = self.loop is not None
        scope_class = _scope_classes.get(backend)
        if scope_class is None:
            scope_class = _scope_classes[backend] = type(anyio.CancelScope())
        return scope_class()

    def disarm(self) -> None:
        """Stop the batch timer (the batch is over)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.timed = []

    def interrupt(self) -> None:
        """The batch signal aborted in a batch with `"finish"` calls: cancel every call except
        those whose handler already started and finish on interrupt. A `"finish"` call still
        queued (for a slot, behind a sequential call, or in its start hooks) never started:
        nothing happened yet, so there is nothing to finish, and it is aborted like the rest.
        Runs in the loop's thread, between the steps of the calls' tasks, so a call is either
        still before its start check (which sees the signal) or already started."""
        for item in self.calls:
            if (
                item.result is None
                and item.scope is not None
                and not (item.finish and item.started)
            ):
                item.scope.cancel()

    def aborted(self) -> bool:
        """Whether the batch's abort signal is set."""
        return self.signal is not None and self.signal.aborted

    def unsettled(self) -> bool:
        """Whether a call still lacks its result, or its report."""
        return any(
            item.result is None or (self.reporting and not item.reported) for item in self.calls
        )

    def settle(self) -> None:
        """Give every call without a result its `aborted` result: by the signal, or because the
        caller was cancelled (its running handler learns it through its own signal)."""
        for item in self.calls:
            if item.result is None:
                self.settle_one(item)

    def settle_one(self, item: CallState) -> None:
        """Give `item` its `aborted` result now (see `settle`)."""
        signal = self.signal
        reason = signal.reason if signal is not None and signal.aborted else "execution cancelled"
        name = item.call.name
        text = f"tool call {name!r} aborted"
        said = speakable_reason(reason)
        if said is not None:
            text += f" ({said})"
        error = ToolAbortedError(name, text, reason)
        duration_s = time.perf_counter() - item.started if item.started else 0.0
        finish(item, "aborted", error=error, duration_s=duration_s)


def finish(
    item: CallState,
    status: ToolCallStatus,
    *,
    value: Any = None,
    error: BaseException | None = None,
    duration_s: float = 0.0,
) -> None:
    """Give the call its one result (the first wins); every status goes through here.

    A call that timed out or was aborted also has its signal aborted, so a handler still
    running (a worker thread cannot be killed) learns that it should stop.
    """
    if item.result is not None:
        return
    call = item.call
    if status == "timeout" or status == "aborted":
        controller = item.controller
        if controller is not None:
            controller.abort(getattr(error, "reason", None) if status == "aborted" else "timeout")
    elif item.deadline:
        item.controller.deadline = None  # type: ignore[union-attr]  # finished in time: never "timed out" later
    item.result = new_result(
        call.call_id,
        call.name,
        status,
        value,
        # Only a handler's failure has status "error"; every other status's error is ours.
        None if error is None else message_for_model(call, error, raised=status == "error"),
        duration_s * 1000,
        # An LLM-backed tool reports the models it used on its context (ok or not).
        None if item.context is None else item.context.model_usage,
    )
    item.duration_s = duration_s
    item.error = error
