"""`Batch`: what the calls of one `execute` share — the executor's options at that moment, the
batch's signal, hooks, tool view and ids, and the one loop timer that ends its calls at their
time limits."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.execution._slots import SlotPool
from llmrtc.execution._threads import WorkerThreads
from llmrtc.execution.approval import Approver
from llmrtc.execution.breakers import Breakers
from llmrtc.execution.duplicates import Duplicates
from llmrtc.telemetry.events import (
    BreakerChangeEvent,
    ToolEndEvent,
    ToolErrorEvent,
    ToolProgressEvent,
    ToolRetryEvent,
    ToolStartEvent,
)
from llmrtc.telemetry.hooks import Hooks, listeners, tool_call_context_hooks
from llmrtc.tools.calls import ToolCallResult
from llmrtc.tools.definition import ExecutionPolicy
from llmrtc.tools.registry import ToolRegistry

__all__ = ["BackgroundHost", "Batch", "Dispatch", "Policies", "ResultCallback"]


ResultCallback = Callable[[ToolCallResult], object]
"""`on_result(result)`: called once per call as it gets its result."""

_scope_classes: dict[bool, type[anyio.CancelScope]] = {}  # by "is asyncio"


class Dispatch:
    """The hooks of one batch, sorted by what they listen to (picked once, not per call)."""

    __slots__ = (
        "active",
        "breaker",
        "context",
        "end",
        "error",
        "progress",
        "retry",
        "start",
        "wants_start_event",
    )

    def __init__(self, leaves: Iterable[Hooks | None]) -> None:
        leaves = tuple(leaves)
        self.start = listeners(leaves, ToolStartEvent)
        self.context = tool_call_context_hooks(leaves)
        self.end = listeners(leaves, ToolEndEvent)
        self.error = listeners(leaves, ToolErrorEvent)
        # Only listened-for progress costs a sink per call (`ToolContext.progress`).
        self.progress = listeners(leaves, ToolProgressEvent)
        self.retry = listeners(leaves, ToolRetryEvent)
        self.breaker = listeners(leaves, BreakerChangeEvent)
        self.wants_start_event = bool(self.start or self.context)
        self.active = bool(
            self.wants_start_event
            or self.end
            or self.error
            or self.progress
            or self.retry
            or self.breaker
        )


class Policies:
    """The executor's side-effect policies every batch shares (`ToolDefinition.on_duplicate`,
    `breaker`, `resources`, `needs_approval`): its memory of recent calls, its breakers, one
    FIFO pool per resource, and whom to ask for approval."""

    __slots__ = ("approval_timeout", "approver", "breakers", "duplicates", "resources")

    def __init__(
        self,
        *,
        resources: dict[str, SlotPool],
        duplicates: Duplicates,
        breakers: Breakers,
        approver: Approver | None,
        approval_timeout: float,
    ) -> None:
        self.resources = resources
        self.duplicates = duplicates
        self.breakers = breakers
        self.approver = approver
        self.approval_timeout = approval_timeout  # math.inf: wait until aborted


class Expiring(Protocol):
    """What the batch timer needs of a call (a `Call`; declared here so that the timer does not
    depend on the call's module, which depends on this one)."""

    running: bool
    expires_at: float

    def expire(self) -> None:
        """The call's time limit passed."""


class BackgroundHost(Protocol):
    """What a batch needs of the executor's background calls (a `BackgroundCalls`; declared
    here so that this module does not depend on it, which depends on this one)."""

    def start(self, item: Any, batch: Batch) -> None:
        """Start the prepared call `item` in the background and give it its `"running"`
        answer in `batch`."""


class Batch:
    """What the calls of one `execute` share. Built once per batch; the calls themselves are
    `Call`s, scheduled by `llmrtc.execution.scheduling`."""

    __slots__ = (
        "background",
        "default_policy",
        "finishing",
        "formats",
        "hooks",
        "loop",
        "metadata",
        "models",
        "on_result",
        "policies",
        "reporting",
        "session_id",
        "signal",
        "slots",
        "stage_id",
        "strip_reasoning",
        "threads",
        "timed",
        "timeout",
        "timer",
        "timer_at",
        "tools",
        "turn_id",
        "validate",
    )

    def __init__(
        self,
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
        models: Any,
        slots: SlotPool,
        threads: WorkerThreads,
        default_policy: ExecutionPolicy,
        timeout: float,
        validate: bool,
        formats: bool,
        strip_reasoning: bool,
        policies: Policies,
        background: BackgroundHost | None = None,
    ) -> None:
        self.signal = signal
        self.policies = policies
        # The executor's background calls (None: a batch of a background call itself).
        self.background = background
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
        self.timed: list[Expiring] = []
        self.session_id = session_id
        self.turn_id = turn_id
        self.stage_id = stage_id
        self.metadata = metadata
        self.models = models  # the executor's model pool, handed to each call's context
        # The executor's shared concurrency slots and worker threads.
        self.slots = slots
        self.threads = threads
        # The executor's options, read once per batch.
        self.default_policy = default_policy
        self.timeout = timeout
        self.validate = validate
        self.formats = formats
        self.strip_reasoning = strip_reasoning
        # Some call's tool has on_interrupt="finish": an abort then stops calls one by one
        # (see `scheduling._interrupt`) instead of cancelling the whole batch at once.
        self.finishing = False

    def detached(self, signal: AbortSignal) -> Batch:
        """A batch for one background call started by this one: the same options, hooks, tool
        view and ids, but `signal` instead of this batch's, no `on_result`, a timer of its
        own (this batch's ends with it) and a slot of its own: a call that runs for minutes
        must not hold one of the executor's `max_concurrency` slots meanwhile (with as many
        running, every ordinary tool, and `cancel_tool_call`, would wait for them: the agent
        would freeze). It shares the executor's policies: a background call holds its
        `resources` like any call (a CRM allowing two requests allows two, whoever sends
        them)."""
        return Batch(
            signal=signal,
            hooks=self.hooks,
            tools=self.tools,
            on_result=None,
            loop=self.loop,
            session_id=self.session_id,
            turn_id=self.turn_id,
            stage_id=self.stage_id,
            metadata=self.metadata,
            models=self.models,
            slots=SlotPool(1),
            threads=self.threads,
            default_policy=self.default_policy,
            timeout=self.timeout,
            validate=self.validate,
            formats=self.formats,
            strip_reasoning=self.strip_reasoning,
            policies=self.policies,
        )

    def arm(self, item: Expiring, limit: float) -> None:
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

    def aborted(self) -> bool:
        """Whether the batch's abort signal is set."""
        return self.signal is not None and self.signal.aborted
