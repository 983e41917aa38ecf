"""`ToolExecutor`: runs a model's tool calls and gives every call exactly one result, in order."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterable, Mapping
from types import MappingProxyType, TracebackType
from typing import Any

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.execution._callbacks import (
    BreakerChangeCallback,
    CallbackHooks,
    ToolEndCallback,
    ToolErrorCallback,
    ToolProgressCallback,
    ToolRetryCallback,
    ToolStartCallback,
)
from llmrtc.execution._slots import SlotPool
from llmrtc.execution._threads import WorkerThreads
from llmrtc.execution.approval import Approver
from llmrtc.execution.background import BackgroundCalls, find_background_calls
from llmrtc.execution.batch import Batch, Dispatch, Policies, ResultCallback
from llmrtc.execution.breakers import Breakers
from llmrtc.execution.call import new_calls
from llmrtc.execution.duplicates import Duplicates
from llmrtc.execution.observers import context_hooks
from llmrtc.execution.resources import ResourceLimits
from llmrtc.execution.scheduling import run_batch
from llmrtc.telemetry.correlation import current_session_id
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools.breaker import BreakerState
from llmrtc.tools.calls import ToolCall, ToolCallResult
from llmrtc.tools.definition import ExecutionPolicy, ToolDefinition
from llmrtc.tools.offer import offered_definitions
from llmrtc.tools.registry import ToolRegistry

__all__ = ["ResultCallback", "ToolExecutor"]

_EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})


class ToolExecutor:
    """Runs tool calls with policies, a shared concurrency limit, timeouts, abort and validation.

    One executor per session: its `max_concurrency` is shared by every batch running on it, so it
    protects that session's resources. It has the parts a batch runs with (the slot pool, the
    worker threads, its hooks sorted once); each `execute` makes a `Batch` of `Call`s and
    hands it to `scheduling.run_batch`. It holds no event-loop-bound state between batches (each
    turn may run under a new loop), but serves one event loop at a time. The exception is
    background calls (`ToolDefinition.background`): they run on the loop that started them,
    owned by the executor, until they end or `aclose()` / `cancel_call` stops them.

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
        validate_formats: bool = True,
        hooks: Hooks | None = None,
        on_tool_start: ToolStartCallback | None = None,
        on_tool_end: ToolEndCallback | None = None,
        on_tool_error: ToolErrorCallback | None = None,
        on_tool_progress: ToolProgressCallback | None = None,
        on_tool_retry: ToolRetryCallback | None = None,
        on_breaker_change: BreakerChangeCallback | None = None,
        models: Any = None,
        reasoning_for_call: bool = False,
        resource_limits: Mapping[str, int] | ResourceLimits | None = None,
        approver: Approver | None = None,
        approval_timeout: float | None = 30.0,
        duplicate_window: float = 300.0,
    ) -> None:
        """Create an executor.

        Args:
            registry: Where tools are looked up by name (unless a batch gets its own `tools`).
            default_policy: Policy for tools whose definition leaves `execution_policy` as None.
            max_concurrency: Handlers running at once, across all batches of this executor
                (background calls, once started, run outside this limit: see `Batch.detached`).
                Sync handlers also get at most twice this many worker threads alive, counting
                threads abandoned after a timeout.
            timeout: Default seconds a handler may run (None or `math.inf`: no limit); a tool's
                own `timeout` overrides it. The clock starts when the handler starts.
            validate_arguments: Check arguments against the JSON Schema before calling handlers.
                (Malformed JSON and pydantic-typed parameters are always checked.)
            validate_formats: Treat `format` keywords (`date`, `email`, …) as assertions when
                validating, so a hallucinated `"2020-13-45"` for a `date` is refused. False
                makes them annotations only.
            hooks: Observers of every call (combine several with `CompositeHooks`).
            on_tool_start: `(call, ctx)` just before a handler runs; sync or async.
            on_tool_end: `(result)` once for every call, as it finishes; sync or async.
            on_tool_error: `(call, exception)` for every call whose status is not `"ok"`.
            on_tool_progress: `(event)`, a `ToolProgressEvent`, for each progress message a
                running tool passes on (`ToolContext.progress`); sync or async.
            on_tool_retry: `(event)`, a `ToolRetryEvent`, each time a call's failed attempt
                is tried again (`ToolDefinition.retry`); sync or async.
            on_breaker_change: `(event)`, a `BreakerChangeEvent`, each time a tool's circuit
                breaker changes state (`ToolDefinition.breaker`); sync or async.
            models: A `llmrtc.catalog.ModelPool` for LLM-backed tools (`define_llm_tool`):
                each handler gets it as `ctx.models`, and the models a call used come back
                on its result's `model_usage`.
            reasoning_for_call: Offer every tool with an optional `_reasoningForCall` string
                (the model says why it chose the tool; see `offered_definitions`): its value is
                taken out of the arguments before validation and the handler, and recorded on
                the start/end hook events (`reasoning`) and, with content capture, on the span.
            resource_limits: How many calls may hold each named resource at once
                (`{"crm": 2}`), across all batches and background calls of this executor,
                served first come first served (`ToolDefinition.resources`). A call's wait
                counts against its time limit. Every resource a tool of `registry` names
                must be here. Executors given the same `ResourceLimits` object share its
                limits (a server with one executor per session: one CRM limit for all).
            approver: `async (call, ctx) -> Approval | bool`, asked before each call of a tool
                with `needs_approval` runs (`llmrtc.execution.approve_in_context` asks the
                enclosing `approvals()` block, e.g. a WebRTC client). Required when a tool of
                `registry` needs approval.
            approval_timeout: Seconds to wait for the approver before the call is denied ("no
                approval in time"); None waits until the batch is aborted. It does not count
                against the call's own time limit.
            duplicate_window: Seconds after a call ended `ok` during which the same call again
                (same session, tool and arguments) is a duplicate (`ToolDefinition
                .on_duplicate`); while a call runs, its repeats always are.

        Raises:
            ValueError: for an unknown policy, a concurrency below 1, a non-positive timeout,
                a bad resource limit, or a tool of `registry` whose resource has no limit or
                that needs approval with no `approver`.
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
        self.validate_formats = validate_formats
        self.hooks = hooks
        self.models = models
        if not isinstance(reasoning_for_call, bool):
            raise ValueError(
                f"reasoning_for_call must be True or False, got {reasoning_for_call!r}"
            )
        self.reasoning_for_call = reasoning_for_call
        callbacks = None
        if (
            on_tool_start
            or on_tool_end
            or on_tool_error
            or on_tool_progress
            or on_tool_retry
            or on_breaker_change
        ):
            callbacks = CallbackHooks(
                on_tool_start,
                on_tool_end,
                on_tool_error,
                on_tool_progress,
                on_tool_retry,
                on_breaker_change,
            )
        self._own_hooks = (hooks, callbacks)
        self._dispatch = Dispatch(self._own_hooks)
        self._slots = SlotPool(max_concurrency)
        self._threads = WorkerThreads(2 * max_concurrency)
        self._background = BackgroundCalls()
        self._policies = Policies(
            resources=_resource_pools(resource_limits),
            duplicates=Duplicates(_window(duplicate_window)),
            breakers=Breakers(),
            approver=_approver(approver),
            approval_timeout=_approval_timeout(approval_timeout),
        )
        self._background.duplicates = self._policies.duplicates
        self.resource_limits: Mapping[str, int] = MappingProxyType(
            {name: pool.total for name, pool in self._policies.resources.items()}
        )
        self.approver = approver
        self.approval_timeout = approval_timeout
        self.duplicate_window = float(duplicate_window)
        self._check_tools(registry)

    def _check_tools(self, registry: ToolRegistry) -> None:
        """Refuse, now, a tool that could never run here: a resource without a limit, or
        approval without an approver. (Tools reached later, through a `tools=` view or
        registered afterwards, get the same checks on their first call.)"""
        hidden = (registry.get(name) for name in registry.hidden_names())
        for tool in [*registry, *(t for t in hidden if t is not None)]:
            definition = tool.definition
            missing = [r for r in definition.resources if r not in self.resource_limits]
            if missing:
                raise ValueError(
                    f"tool {definition.name!r} holds resource(s) {', '.join(map(repr, missing))}"
                    " with no limit: pass ToolExecutor(resource_limits={"
                    + ", ".join(f"{r!r}: N" for r in missing)
                    + "})"
                )
            if definition.needs_approval is not False and self.approver is None:
                raise ValueError(
                    f"tool {definition.name!r} needs approval but the executor has no "
                    "approver: pass ToolExecutor(approver=...) (approve_in_context asks the "
                    "enclosing approvals() block, e.g. a WebRTC client)"
                )

    def breaker_state(self, name: str) -> BreakerState:
        """The circuit breaker state of the tool `name` (`ToolDefinition.breaker`):
        `"closed"` (calls run; also for a tool without a breaker, or not called yet),
        `"open"` (calls end `"unavailable"` at once) or `"half_open"` (`reset_after` passed:
        the next call is a trial)."""
        return self._policies.breakers.state(name)

    def _batch_hooks(self, hooks: Hooks | None) -> Dispatch:
        """The executor's own hooks, the batch's, and those of an enclosing `observe_tools`."""
        observer = context_hooks.get()
        if hooks is None and observer is None:
            return self._dispatch
        return Dispatch((*self._own_hooks, hooks, observer))

    def offered_definitions(self, definitions: Iterable[ToolDefinition]) -> list[ToolDefinition]:
        """The definitions as a model should be offered them by this executor: with the
        optional `_reasoningForCall` field when `reasoning_for_call` is on (built once per
        definition), else unchanged."""
        return offered_definitions(list(definitions), reasoning_for_call=self.reasoning_for_call)

    # Background calls ------------------------------------------------------------------------

    @property
    def background_calls(self) -> tuple[ToolCall, ...]:
        """The background calls running now (`ToolDefinition.background`), oldest first."""
        return self._background.calls

    def background_results(self) -> AsyncIterator[ToolCallResult]:
        """Each final result of a background call as it lands, in the order they finished.

        A queue shared by every iterator of this executor: each result is yielded once, also
        one that landed before iteration started (`take_background_results` takes them too).
        The iterator never ends by itself: stop iterating when you are done.

        Example:
            async for result in executor.background_results():
                history.append(ToolMessage(result.call_id, result.to_content()))
        """
        return self._background.results()

    async def background_landing(self) -> None:
        """Return once a background call of this executor lands, after this call began
        waiting (whoever then takes its result: nothing is taken here). For a reader that
        keeps its own queue (`llmrtc.agent.late_results`) and must not miss a landing another
        reader took first."""
        await self._background.landing()

    def take_background_results(self) -> list[ToolCallResult]:
        """The final results of background calls that landed and were not taken yet (by this
        or by `background_results`), in the order they finished; empty if none."""
        return self._background.take()

    async def cancel_call(
        self, call_id: str, *, reason: str = "cancelled"
    ) -> ToolCallResult | None:
        """Stop the running background call `call_id`: its handler's `ToolContext.abort_signal`
        aborts with `reason` and the handler is cancelled. Returns its final result (status
        `aborted`, unless it ended otherwise first) once it was reported to the hooks and
        queued in `background_results`; None when no background call with that id runs.

        Args:
            call_id: The id the model gave the call.
            reason: Why, as the model may be told it: a short one-line `str` (see `execute`).
        """
        return await self._background.cancel(call_id, reason)

    @property
    def background_token(self) -> str:
        """Names this executor's background calls in a saved state: `adopt_background_call`
        with it finds them again, in this process, while they live."""
        return self._background.token

    def adopt_background_call(self, token: str, call_id: str) -> bool:
        """Take over the background call `call_id` of the executor `token` names (its
        `background_token`, in this process and on this event loop): if it still runs, its
        final result lands here from then on (that executor's `cancel_call` and `aclose` no
        longer reach it, this one's do); if it landed there untaken, its result moves to this
        executor's queue. False when no live executor of this process has either (another
        process's token, an executor gone, an unknown call).

        Args:
            token: The `background_token` of the executor the call was started on.
            call_id: The id the model gave the call.
        """
        other = find_background_calls(token)
        if other is None:
            return False
        return self._background.adopt(other, call_id)

    async def aclose(self, *, reason: str = "session ended") -> None:
        """Stop every running background call (each ends `aborted` with `reason`, reported and
        queued like any final result) and wait until each has. Call it when the session ends
        for good; the executor stays usable. A time limit around it cuts only the wait: the
        calls stop and report in their own tasks."""
        await self._background.aclose(reason)

    async def __aenter__(self) -> ToolExecutor:
        """Host background calls in a task group of this block (on any anyio backend; on
        asyncio the executor can also own them without one); leaving it stops those still
        running, as `aclose()` does."""
        if self._background.group is not None:
            raise RuntimeError("this ToolExecutor's `async with` block is already open")
        group = anyio.create_task_group()
        await group.__aenter__()
        self._background.group = group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        group = self._background.group
        assert group is not None  # set by __aenter__
        try:
            await self.aclose()
        finally:
            self._background.group = None
            handled = await group.__aexit__(exc_type, exc, traceback)
        return handled

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
        Aborting `abort_signal`, or its deadline (or a parent's) passing, cancels running
        handlers and skips queued ones (`"aborted"`), all at once; calls that already finished
        keep their results. When this returns, every hook for these calls has returned and no
        handler task is left running. Cancelling the caller propagates, after the unfinished
        calls were reported `"aborted"` to the hooks and their signals set.

        Interrupt policy: a call whose tool has `on_interrupt="finish"` (a payment, a booking)
        and whose handler already started when `abort_signal` aborts (or its deadline passes)
        is not stopped by it: it runs to completion under its own timeout, its result is its
        real one (`ok`, `error` or `timeout`), and its `ToolContext.abort_signal` is no child
        of `abort_signal`. The other calls are aborted at once and reported as they stop; this
        returns once the finishing calls are done. A `"finish"` call that had not started
        (waiting for a concurrency slot, behind a sequential call, or in its start hooks) is
        aborted like any other: nothing happened yet, so there is nothing to finish.
        Cancelling the caller, and a call's own timeout, still stop a `"finish"` call.

        Background calls (`ToolDefinition.background`): a call of such a tool is looked up,
        validated and queued like any call, but once it may start, the batch does not wait
        for it: its result here is at once one of status `"running"` (content telling the
        model that the result will follow; `on_result` gets it, the end hooks do not), and
        the call runs on outside the batch, under its own timeout and a signal of its own:
        neither `abort_signal` nor cancelling the caller stops it. Its one final result is
        reported to the hooks (`on_tool_end`, spans, metrics) when it ends and queued for
        `background_results()`; `cancel_call` and `aclose` stop it. It holds none of the
        `max_concurrency` slots while it runs (see `Batch.detached`).

        Example:
            offered = registry.scoped(["lookup_weather"], scope="stage 'weather'")
            results = await executor.execute(
                calls, tools=offered, abort_signal=turn.signal, on_result=show_progress
            )

        Args:
            calls: The model's tool calls, in the order it made them.
            session_id: Passed to handlers in `ToolContext.session_id` and to hook events, and
                scopes duplicate detection (`ToolDefinition.on_duplicate`). Default: the
                session the calling task serves (`llmrtc.telemetry.current_session_id`, which
                a `VoiceLoop` sets for its turns), else None.
            turn_id: Passed to handlers in `ToolContext.turn_id` and to hook events.
            stage_id: The playbook stage, for hook events.
            abort_signal: Aborts the batch (e.g. on barge-in), also when its deadline
                passes, except started `"finish"` calls (see above). May be set from any
                thread. The model is told the abort reason only when it is a short one-line
                `str` (e.g. `"barge-in"`), else just "aborted".
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

        Raises:
            TypeError: when `calls` holds something other than `ToolCall`s, or `tools` is not
                a `ToolRegistry`.
        """
        call_list = list(calls)
        for call in call_list:
            if type(call) is not ToolCall and not isinstance(call, ToolCall):
                raise TypeError(f"execute() takes ToolCall objects, got {type(call).__name__}")
        if tools is not None and not isinstance(tools, ToolRegistry):
            raise TypeError(
                "tools must be a ToolRegistry (e.g. registry.scoped(names)), "
                f"got {type(tools).__name__}"
            )
        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:  # trio: no asyncio loop in this thread
            loop = None
        if session_id is None:
            # The session the calling code serves (a voice loop sets it for its turns).
            session_id = current_session_id.get()
        dispatch = self._batch_hooks(hooks)
        batch = Batch(
            signal=abort_signal,
            hooks=dispatch,
            tools=self.registry if tools is None else tools,
            on_result=on_result,
            loop=loop,
            session_id=session_id,
            turn_id=turn_id,
            stage_id=stage_id,
            metadata=MappingProxyType(dict(metadata)) if metadata else _EMPTY_METADATA,
            models=self.models,
            slots=self._slots,
            threads=self._threads,
            default_policy=self.default_policy,
            timeout=self.timeout,
            validate=self.validate_arguments,
            formats=self.validate_formats,
            strip_reasoning=self.reasoning_for_call,
            policies=self._policies,
            background=self._background,
        )
        items = new_calls(call_list, numbered=dispatch.active)
        await run_batch(batch, items)
        return [item.result for item in items]  # type: ignore[misc]  # all set by run_batch


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _resource_pools(limits: Mapping[str, int] | None) -> dict[str, SlotPool]:
    if limits is None:
        return {}
    if not isinstance(limits, ResourceLimits):
        limits = ResourceLimits(limits)  # this executor's own pools
    return limits.pools  # shared with every executor given the same object


def _window(seconds: float) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ValueError(f"duplicate_window must be seconds >= 0, got {seconds!r}")
    return float(seconds)


def _approver(approver: Approver | None) -> Approver | None:
    if approver is not None and not callable(approver):
        raise ValueError(
            f"approver must be an async callable (call, ctx) -> Approval | bool, got {approver!r}"
        )
    return approver


def _approval_timeout(seconds: float | None) -> float:
    if seconds is None:
        return math.inf
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
        raise ValueError(f"approval_timeout must be seconds > 0 or None, got {seconds!r}")
    return float(seconds)
