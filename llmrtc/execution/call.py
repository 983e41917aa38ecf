"""`Call`: one tool call's lifecycle — its state, its arguments, running its handler under its
slot, cancel scope and time limit, the one result it finishes with, and its report to
`on_result` and the hooks."""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

import anyio
import pydantic_core

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.errors import LLMRTCError
from llmrtc.execution._slots import SlotPool
from llmrtc.execution.approval import ask_approval
from llmrtc.execution.batch import Batch, Policies
from llmrtc.execution.breakers import BreakerChange
from llmrtc.execution.duplicates import DuplicateEntry, duplicate_key
from llmrtc.execution.errors import (
    InvalidToolArgumentsError,
    ToolAbortedError,
    ToolDeniedError,
    ToolDuplicateError,
    ToolNotFoundError,
    ToolTimeoutError,
    ToolUnavailableError,
)
from llmrtc.telemetry.correlation import current_call_id
from llmrtc.telemetry.events import (
    BreakerChangeEvent,
    ToolEndEvent,
    ToolErrorEvent,
    ToolProgressEvent,
    ToolRetryEvent,
    ToolStartEvent,
)
from llmrtc.telemetry.hooks import emit, error_type_name
from llmrtc.tools._errors import speakable_reason
from llmrtc.tools.arguments import ArgumentsError
from llmrtc.tools.calls import ToolCall, ToolCallResult, ToolCallStatus, new_result
from llmrtc.tools.context import ToolContext, new_context
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.errors import ToolError
from llmrtc.tools.offer import unwrap_arguments
from llmrtc.tools.retry import RetryPolicy
from llmrtc.tools.tool import Tool
from llmrtc.tools.validation import prepare_arguments

__all__ = ["Call", "message_for_model", "new_calls", "report_all"]

# Handler failures are logged here in full (the model only gets a short sentence).
logger = logging.getLogger(__name__)

_perf_counter = time.perf_counter
_monotonic = time.monotonic
_execution_ids = itertools.count(1)


class _AttemptTimedOut(LLMRTCError):
    """One attempt of a retried call ran past `RetryPolicy.attempt_timeout`."""

    def __init__(self, limit: float) -> None:
        super().__init__(f"attempt timed out after {limit:g} s")
        self.limit = limit


def new_calls(calls: Iterable[ToolCall], *, numbered: bool) -> list[Call]:
    """One `Call` per tool call, in request order; `numbered` gives each an execution id (hook
    events carry it; without hooks nobody reads it)."""
    if numbered:
        return [Call(call, f"x{next(_execution_ids)}") for call in calls]
    return [Call(call, "") for call in calls]


class Call:
    """Everything the executor knows about one call of a batch, from lookup to report, and
    the steps of its life: `prepare`, `run`, `finish` (exactly once), `report`.

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
    finishes_on_interrupt = False
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
    background = False  # its tool runs in the background: its batch does not wait for it
    outlives_batch = False  # this is the run of a background call, outside its batch
    # Side-effect policies (`ToolDefinition.has_policies`); a call of a tool without them
    # never touches these.
    waits = False  # it has steps before its slot: follow a leader, approval, resources
    retry: RetryPolicy | None = None
    attempts = 0  # handler runs so far (retries count)
    follows: DuplicateEntry | None = None  # the running call whose result it will reuse
    leads: DuplicateEntry | None = None  # its duplicates reuse or refer to it
    dup_key: tuple[str, str, str] | None = None
    breaker_admitted = False  # its breaker let it through: how it ends is recorded
    breaker_ticket = 0  # the breaker generation it was admitted in
    settles = False  # it leads or was admitted: its ending updates the executor's policies
    policy_state: Policies | None = None
    changes: list[BreakerChange] | None = None  # breaker changes it caused, for the hooks
    needs_approval = False
    approval: str | None = None  # "approved" / "denied", once asked
    held: list[SlotPool] | None = None  # the resource pools it holds
    early_clock = False  # its time limit started before its resource wait

    def __init__(self, call: ToolCall, execution_id: str) -> None:
        self.call = call
        self.execution_id = execution_id

    # Before it runs -------------------------------------------------------------------------

    def prepare(self, batch: Batch) -> bool:
        """Build the call's arguments; a call that cannot run gets its result here."""
        call = self.call
        tool = self.tool
        if tool is None:
            message = batch.tools.missing_tool_message(call.name)
            self.finish("not_found", error=ToolNotFoundError(call.name, message))
            return False
        definition = tool.definition
        raw = call.arguments
        validate = batch.validate
        try:
            if tool.latent or batch.strip_reasoning or definition.reasoning_for_call:
                # A latent tool's `_output` is its result: checked whatever validate_arguments.
                raw, self.reasoning = unwrap_arguments(
                    tool, raw, strip_reasoning=batch.strip_reasoning
                )
                validate = validate or tool.latent
            self.args = prepare_arguments(definition, raw, validate=validate, formats=batch.formats)
        except ArgumentsError as exc:
            invalid = InvalidToolArgumentsError(call.name, exc.errors)
            self.finish("invalid_arguments", error=invalid)
            return False
        self.limit = definition.timeout or batch.timeout
        self.scope = batch.new_scope()
        if definition.has_policies:
            return self._admit(batch, definition)
        return True

    def _admit(self, batch: Batch, definition: ToolDefinition) -> bool:
        """The policies decided before a call may run (synchronously, so two identical calls
        of one batch never race): its configuration, duplicates, then its breaker. False when
        the call got its result here."""
        policies = self.policy_state = batch.policies
        call = self.call
        for name in definition.resources:
            if name not in policies.resources:
                logger.error(
                    "tool %r holds resource %r, which is not in the executor's "
                    "resource_limits (add resource_limits={%r: N}); the call %s did not run",
                    call.name,
                    name,
                    name,
                    call.call_id,
                )
                self.finish(
                    "error",
                    error=ToolError(f"tool {call.name!r} is not configured to run here"),
                )
                return False
        if definition.retries:
            self.retry = definition.retry
        if definition.on_duplicate != "allow" and batch.session_id is not None:
            self.dup_key = duplicate_key(batch.session_id, definition.name, self.args)
            if not self._lookup(definition):
                return False
        elif not self._admit_breaker(definition):
            return False
        approval = definition.needs_approval
        if approval is not False:
            if approval is not True:
                try:
                    approval = bool(approval(self._parsed_call()))
                except Exception:
                    logger.exception(
                        "needs_approval of tool %r raised for call %s; the call is denied",
                        call.name,
                        call.call_id,
                    )
                    self._deny("approval failed")
                    return False
            if approval:
                if policies.approver is None:
                    logger.error(
                        "tool %r needs approval but the executor has no approver "
                        "(ToolExecutor(approver=...)); the call %s is denied",
                        call.name,
                        call.call_id,
                    )
                    self._deny("no approver is configured")
                    return False
                self.needs_approval = True
        self.waits = self.needs_approval or self.follows is not None or bool(definition.resources)
        return True

    def _lookup(self, definition: ToolDefinition) -> bool:
        """Duplicate detection: lead (and pass the breaker), follow a running leader, reuse
        an `ok` result, or be rejected. False when the call got its result here."""
        duplicates = self.policy_state.duplicates  # type: ignore[union-attr]
        key: tuple[str, str, str] = self.dup_key  # type: ignore[assignment]
        entry = duplicates.find(key)
        if entry is None:
            self.leads = duplicates.lead(key, self.call.call_id)
            self.settles = True
            return self._admit_breaker(definition)
        if definition.on_duplicate == "reject":
            self.finish("duplicate", error=self._duplicate_error(entry))
            return False
        if entry.result is not None:
            self._reuse(entry)
            return False
        self.follows = entry
        return True

    def _duplicate_error(self, entry: DuplicateEntry) -> ToolDuplicateError:
        name = self.call.name
        text = f"this repeats call {entry.call_id!r} ({name}, same arguments), "
        if entry.result is None:
            text += "which is still running; its result answers that call"
        else:
            content = entry.result.to_content()
            if len(content) > 300:
                content = content[:300] + "…"
            text += f"which returned {content}"
        return ToolDuplicateError(name, text + "; do not call it again", entry.call_id)

    def _reuse(self, entry: DuplicateEntry) -> None:
        """Answer the call with the `ok` result of the call it duplicates."""
        first: ToolCallResult = entry.result  # type: ignore[assignment]  # ended ok
        call = self.call
        self.result = new_result(
            call.call_id, call.name, first.status, first.result, None, 0.0, None, entry.call_id, 0
        )

    def _admit_breaker(self, definition: ToolDefinition) -> bool:
        policy = definition.breaker
        if policy is None:
            return True
        changes = self.changes = self.changes or []
        ticket = self.policy_state.breakers.admit(definition.name, policy, changes)  # type: ignore[union-attr]
        if ticket:
            self.breaker_admitted = self.settles = True
            self.breaker_ticket = ticket
            return True
        self.finish("unavailable", error=ToolUnavailableError(self.call.name))
        return False

    def _deny(self, reason: str | None) -> None:
        self.approval = "denied"
        self.finish("denied", error=ToolDeniedError(self.call.name, reason))

    def _parsed_call(self) -> ToolCall:
        """The call with its parsed, default-filled arguments as a plain dict (what an
        approver is shown)."""
        call = self.call
        return ToolCall(
            call.call_id, call.name, pydantic_core.to_jsonable_python(self.args, fallback=repr)
        )

    def _settle(self) -> None:
        """The call has its result: record it with its breaker and its duplicates."""
        self.settles = False
        result: ToolCallResult = self.result  # type: ignore[assignment]
        state: Policies = self.policy_state  # type: ignore[assignment]
        if self.breaker_admitted:
            self.breaker_admitted = False
            definition = self.tool.definition  # type: ignore[union-attr]
            changes = self.changes = self.changes or []
            # A call that never reached its handler (it timed out waiting for a resource)
            # says nothing about the backend.
            status = result.status if self.started else "aborted"
            state.breakers.record(
                definition.name, definition.breaker, status, changes, ticket=self.breaker_ticket
            )
        entry = self.leads
        if entry is not None:
            self.leads = None
            state.duplicates.end(entry, result)

    def detached(self, batch: Batch) -> Call:
        """A prepared background call's run outside its batch: the same call, tool, arguments
        and limit, a cancel scope of `batch` (the call's own), and no finishing on interrupt
        (an abort of the starting batch never reaches it)."""
        runner = Call(self.call, self.execution_id)
        runner.tool = self.tool
        runner.args = self.args
        runner.limit = self.limit
        runner.reasoning = self.reasoning
        runner.background = runner.outlives_batch = True
        runner.scope = batch.new_scope()
        if self.policy_state is not None:
            # The run carries the policies on; this call's own answer is "running".
            runner.policy_state = self.policy_state
            runner.retry = self.retry
            runner.follows, self.follows = self.follows, None
            runner.leads, self.leads = self.leads, None
            runner.dup_key = self.dup_key
            runner.breaker_admitted, self.breaker_admitted = self.breaker_admitted, False
            runner.breaker_ticket = self.breaker_ticket
            runner.settles, self.settles = self.settles, False
            runner.changes, self.changes = self.changes, None
            runner.approval = self.approval
            # Approval is asked in the batch, unless the call started out following a
            # running call (its run asks, should that call fail and this one run after all).
            runner.needs_approval = self.needs_approval and self.approval is None
            runner.waits = (
                runner.follows is not None
                or runner.needs_approval
                or bool(self.tool.definition.resources)  # type: ignore[union-attr]
            )
        return runner

    # Running --------------------------------------------------------------------------------

    async def run(self, batch: Batch, ended: Callable[[Call], object] | None) -> None:
        """Run the call with its own slot, cancel scope and time limit, and record how it
        ended; then hand it to `ended`, if given (also when cancelled). Never raises, except
        for the cancellation of the caller's task (when run in it). One coroutine from slot to
        result: each nested one would cost per call."""
        scope: anyio.CancelScope = self.scope  # type: ignore[assignment]  # set by prepare
        slots = batch.slots
        signal = batch.signal
        try:
            with scope:
                if (
                    self.waits
                    and not self._ready_now(batch, scope)
                    and not await self._before_slot(batch, scope)
                ):
                    return  # it got its result, or went to the background
                if slots.can_take(1):  # the common case, without a coroutine to await
                    slots.take(1)
                else:
                    waiting_since = _perf_counter()
                    await slots.acquire()
                    self.queued_s += _perf_counter() - waiting_since
                try:
                    if scope.cancel_called or (signal is not None and signal.aborted):
                        return  # aborted while queued: the batch gives it its result
                    if batch.hooks.wants_start_event:
                        ctx = self._new_context(batch, None)  # the start event carries it
                        await self._announce(batch)
                        if scope.cancel_called or (signal is not None and signal.aborted):
                            return  # aborted during the start hooks: the handler never runs
                        self._start_clock(batch, scope, self.controller)
                    else:
                        ctx = self._new_context(batch, self._start_clock(batch, scope))
                    if self.finishes_on_interrupt:
                        signal = None  # it started: an abort of the batch no longer stops it
                    tool: Tool = self.tool  # type: ignore[assignment]  # prepared calls only
                    started = self.started = _perf_counter()
                    token = current_call_id.set(ctx.call_id)
                    entered = self._enter_contexts(batch) if batch.hooks.context else None
                    failure: BaseException | None = None
                    try:
                        if self.retry is not None:
                            value = await self._attempts(batch, tool, ctx)
                        elif tool.is_async:
                            value = await tool.handler(self.args, ctx)
                        else:
                            value = await batch.threads.run(tool.handler, self.args, ctx)
                            if hasattr(value, "__await__"):  # a def that returned a coroutine
                                value = await value
                    except Exception as exc:
                        failure = exc
                    except BaseException as exc:  # cancelled: decided below or by the caller
                        failure = exc
                        raise
                    finally:
                        if entered:
                            _exit_contexts(entered, failure)
                        current_call_id.reset(token)
                    duration_s = _perf_counter() - started
                    # A handler that raised while being cancelled (its cleanup failed), or that
                    # returned once its signal was set (a cooperative thread noticing the
                    # timeout or abort), has a partial value at best: it still timed out or
                    # was aborted (the batch gives every unfinished call its aborted result).
                    if signal is not None and signal.aborted:
                        return
                    deadline = self.deadline
                    if self.expired or (deadline != 0.0 and _monotonic() >= deadline):
                        self.time_out()
                    elif failure is not None:
                        if type(failure) is _AttemptTimedOut:
                            self.finish(
                                "timeout",
                                error=ToolTimeoutError(self.call.name, failure.limit),
                                duration_s=duration_s,
                            )
                        else:
                            self.finish("error", error=failure, duration_s=duration_s)
                    elif self.result is None:
                        # `finish("ok", ...)` written out: the one status every batch pays for.
                        if deadline:
                            # Finished in time: its signal never reads "timed out" later.
                            self.controller.deadline = None  # type: ignore[union-attr]
                        call = self.call
                        self.result = new_result(
                            call.call_id,
                            call.name,
                            "ok",
                            value,
                            None,
                            duration_s * 1000,
                            ctx.model_usage,
                            None,
                            self.attempts or 1,
                        )
                        self.duration_s = duration_s
                        if self.settles:
                            self._settle()
                finally:
                    self.running = False
                    slots.release()
            if self.result is None:
                if (self.started or self.early_clock) and self.timed_out():
                    # The scope ended the handler, or its wait for a resource, at its limit.
                    self.time_out()
                elif batch.finishing and batch.aborted():
                    # Interrupted while other calls finish: its result is reported now, not
                    # once the batch is over.
                    self.abort(batch.signal)
        finally:
            if self.held:
                self._release()
            if ended is not None:
                ended(self)

    def _ready_now(self, batch: Batch, scope: anyio.CancelScope) -> bool:
        """`_before_slot` without a coroutine, for the common case: a call that only holds
        resources, all free right now. False (nothing taken) when it must wait."""
        if self.follows is not None or self.needs_approval:
            return False
        pools = batch.policies.resources
        resources = self.tool.definition.resources  # type: ignore[union-attr]
        for name in resources:
            if not pools[name].can_take(1):
                return False
        self.early_clock = True
        self._start_clock(batch, scope)
        held = self.held = []
        for name in resources:
            pool = pools[name]
            pool.take(1)
            held.append(pool)
        return True

    async def _before_slot(self, batch: Batch, scope: anyio.CancelScope) -> bool:
        """The waits of a call with policies, before its concurrency slot and in this order:
        for the call it duplicates, for approval (neither holds anything, nor counts against
        its time limit), then for its resources (inside its time limit). False when the call
        got its result (or its `"running"` answer) meanwhile."""
        definition = self.tool.definition  # type: ignore[union-attr]
        while self.follows is not None:
            entry = self.follows
            waiting_since = _perf_counter()
            await entry.wait()
            self.queued_s += _perf_counter() - waiting_since
            self.follows = None
            if entry.result is not None:
                self._reuse(entry)
                return False
            # The first call failed: this one runs after all (or follows a newer one).
            if not self._lookup(definition):
                return False
        if self.needs_approval and not await self._approve(batch):
            return False
        if self.background and not self.outlives_batch and batch.background is not None:
            # Approved: from here on it runs outside its batch.
            batch.background.start(self, batch)
            return False
        resources = definition.resources
        if resources:
            # Waiting for a resource counts against the call's time limit.
            self.early_clock = True
            self._start_clock(batch, scope)
            pools = batch.policies.resources
            held = self.held = []
            waiting_since = _perf_counter()
            for name in resources:  # sorted: two calls never wait for each other's
                pool = pools[name]
                if pool.can_take(1):
                    pool.take(1)
                else:
                    await pool.acquire()
                held.append(pool)
            self.queued_s += _perf_counter() - waiting_since
        return True

    def _release(self) -> None:
        held: list[SlotPool] = self.held  # type: ignore[assignment]
        self.held = None
        for pool in reversed(held):
            pool.release()

    async def _approve(self, batch: Batch) -> bool:
        """Ask the executor's approver; False when the call was denied (it has its result)."""
        policies = batch.policies
        call = self.call
        definition = self.tool.definition  # type: ignore[union-attr]
        controller = AbortController(parent=batch.signal)
        ctx = new_context(
            call.call_id,
            controller.signal,
            batch.session_id,
            batch.turn_id,
            batch.metadata,
            batch.models,
            None,
            definition.sensitive_fields,
        )
        answer = await ask_approval(
            policies.approver,  # type: ignore[arg-type]  # checked by _admit
            self._parsed_call(),
            ctx,
            controller,
            policies.approval_timeout,
        )
        if self.scope.cancel_called or batch.aborted():  # type: ignore[union-attr]
            # Aborted while asking (an approver that stops at the abort answers "no"): the
            # call was cut, not denied; it is settled as aborted.
            return False
        if not answer.approved:
            self._deny(answer.reason)
            return False
        self.approval = "approved"
        return True

    async def _attempts(self, batch: Batch, tool: Tool, ctx: ToolContext) -> Any:
        """Run the handler until it succeeds or its `RetryPolicy` gives up (the last failure
        is raised). Every attempt and backoff is inside the call's time limit and cancel
        scope; a backoff that would end past the limit is not slept."""
        policy: RetryPolicy = self.retry  # type: ignore[assignment]
        attempt = 1
        while True:
            self.attempts = attempt
            try:
                return await self._attempt(batch, tool, ctx, policy.attempt_timeout)
            except Exception as exc:
                timed_out = type(exc) is _AttemptTimedOut
                if (
                    attempt > policy.max_retries
                    or ctx.abort_signal.aborted
                    or batch.aborted()  # a "finish" call finishes its attempt, no more
                    or not (timed_out or policy.retries(exc))
                ):
                    raise
                failure = exc
            delay = policy.delay(attempt - 1)
            if self.deadline and _monotonic() + delay >= self.deadline:
                raise failure  # no time left for another attempt: its last outcome stands
            error_type = "timeout" if timed_out else error_type_name(failure)
            logger.info(
                "tool %r (call %s) attempt %d failed (%s); retrying in %.2f s",
                self.call.name,
                self.call.call_id,
                attempt,
                error_type,
                delay,
            )
            if batch.hooks.retry:
                call = self.call
                await emit(
                    batch.hooks.retry,
                    ToolRetryEvent(
                        execution_id=self.execution_id,
                        call_id=call.call_id,
                        tool_name=call.name,
                        attempt=attempt,
                        delay_s=delay,
                        error=str(failure) if timed_out else f"{error_type}: {failure}",
                        error_type=error_type,
                        session_id=batch.session_id,
                        turn_id=batch.turn_id,
                        stage_id=batch.stage_id,
                        background=self.outlives_batch,
                    ),
                )
            if self.finishes_on_interrupt and batch.signal is not None:
                # Its signal no longer follows the batch's: an abort still ends the backoff.
                with batch.signal.cancel_scope():
                    await anyio.sleep(delay)
                if batch.aborted():
                    raise failure
            else:
                await anyio.sleep(delay)
            attempt += 1

    async def _attempt(
        self, batch: Batch, tool: Tool, ctx: ToolContext, limit: float | None
    ) -> Any:
        """One run of the handler; with `limit`, under a signal and a time limit of its own
        (an abandoned attempt's signal is aborted, so a thread-bound handler can stop)."""
        if limit is not None:
            controller = AbortController(parent=ctx.abort_signal)
            attempt_ctx = new_context(
                ctx.call_id,
                controller.signal,
                ctx.session_id,
                ctx.turn_id,
                ctx.metadata,
                ctx.models,
                ctx.progress_sink,
                ctx.sensitive_fields,
            )
            with anyio.move_on_after(limit):
                try:
                    return await self._handle(batch, tool, attempt_ctx)
                finally:
                    if attempt_ctx.model_usage is not None:
                        ctx.report_model_usage(attempt_ctx.model_usage)
            controller.abort("timeout")
            raise _AttemptTimedOut(limit)
        return await self._handle(batch, tool, ctx)

    async def _handle(self, batch: Batch, tool: Tool, ctx: ToolContext) -> Any:
        if tool.is_async:
            return await tool.handler(self.args, ctx)
        value = await batch.threads.run(tool.handler, self.args, ctx)
        if hasattr(value, "__await__"):  # a def that returned a coroutine
            value = await value
        return value

    def _new_context(self, batch: Batch, deadline: float | None) -> ToolContext:
        """The call's own controller (a child of the batch signal, unless the call finishes on
        interrupt) and the context the handler receives."""
        parent = None if self.finishes_on_interrupt else batch.signal
        controller = self.controller = AbortController(parent=parent, deadline=deadline)
        self.context = new_context(
            self.call.call_id,
            controller.signal,
            batch.session_id,
            batch.turn_id,
            batch.metadata,
            batch.models,
            self._progress_sink(batch) if batch.hooks.progress else None,
            self.tool.definition.sensitive_fields,  # type: ignore[union-attr]
        )
        return self.context

    def _progress_sink(self, batch: Batch) -> Callable[[str], Awaitable[None]]:
        """What `ctx.progress(message)` calls: the batch's progress hooks, with the ids."""
        listening = batch.hooks.progress
        definition = self.tool.definition  # type: ignore[union-attr]  # only calls that run

        async def sink(message: str) -> None:
            call = self.call
            await emit(
                listening,
                ToolProgressEvent(
                    execution_id=self.execution_id,
                    call_id=call.call_id,
                    tool_name=call.name,
                    message=message,
                    background=self.outlives_batch,
                    arguments=call.arguments,
                    sensitive_fields=definition.sensitive_fields,
                    session_id=batch.session_id,
                    turn_id=batch.turn_id,
                    stage_id=batch.stage_id,
                ),
            )

        return sink

    def _start_clock(
        self,
        batch: Batch,
        scope: anyio.CancelScope,
        controller: AbortController | None = None,
    ) -> float | None:
        """The handler starts now: so does its time limit. Returns the signal's deadline (for
        a controller made after this), or None for no limit."""
        if self.early_clock and self.running:
            # Started before the call's resource wait (`_before_slot`): it runs on.
            if controller is not None and self.deadline:
                controller.deadline = self.deadline
            return self.deadline or None
        self.running = True
        limit = self.limit
        if limit == math.inf:
            return None
        # The signal's deadline comes first, so it has passed whenever the timer fired: a
        # handler's `finally` or a polling thread sees the timeout the moment it happens.
        deadline = self.deadline = _monotonic() + limit
        if controller is not None:
            controller.deadline = deadline
        if batch.loop is not None:
            batch.arm(self, limit)
        else:
            scope.deadline = anyio.current_time() + limit
        return deadline

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

    # Finishing ------------------------------------------------------------------------------

    def finish(
        self,
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
        if self.result is not None:
            return
        call = self.call
        if status == "timeout" or status == "aborted":
            controller = self.controller
            if controller is not None:
                controller.abort(
                    getattr(error, "reason", None) if status == "aborted" else "timeout"
                )
        elif self.deadline:
            # Finished in time: never "timed out" later.
            self.controller.deadline = None  # type: ignore[union-attr]
        self.result = new_result(
            call.call_id,
            call.name,
            status,
            value,
            # Only a handler's failure has status "error"; every other status's error is ours.
            None if error is None else message_for_model(call, error, raised=status == "error"),
            duration_s * 1000,
            # An LLM-backed tool reports the models it used on its context (ok or not).
            None if self.context is None else self.context.model_usage,
            None,
            self.attempts or (1 if self.started else 0),
        )
        self.duration_s = duration_s
        self.error = error
        if self.settles:
            self._settle()

    def time_out(self) -> None:
        """Finish as `timeout` (the handler ran past its limit)."""
        error = ToolTimeoutError(self.call.name, self.limit)
        # A call that waited for a resource past its limit never started: it ran for 0 s.
        duration_s = _perf_counter() - self.started if self.started else 0.0
        self.finish("timeout", error=error, duration_s=duration_s)

    def abort(self, signal: AbortSignal | None) -> None:
        """Finish as `aborted`: by `signal` (the batch's) when it is set, else because the
        caller was cancelled (a running handler learns it through its own signal)."""
        reason = signal.reason if signal is not None and signal.aborted else "execution cancelled"
        name = self.call.name
        text = f"tool call {name!r} aborted"
        said = speakable_reason(reason)
        if said is not None:
            text += f" ({said})"
        error = ToolAbortedError(name, text, reason)
        duration_s = time.perf_counter() - self.started if self.started else 0.0
        self.finish("aborted", error=error, duration_s=duration_s)

    # Reporting ------------------------------------------------------------------------------

    def _start_event(self, batch: Batch) -> ToolStartEvent:
        """The start event of a call whose handler is about to run."""
        call = self.call
        definition = self.tool.definition  # type: ignore[union-attr]  # only calls that run
        event = self.event = ToolStartEvent(
            execution_id=self.execution_id,
            call_id=call.call_id,
            tool_name=call.name,
            tool_description=definition.description,
            arguments=call.arguments,
            sensitive_fields=definition.sensitive_fields,
            session_id=batch.session_id,
            turn_id=batch.turn_id,
            stage_id=batch.stage_id,
            context=self.context,
            reasoning=self.reasoning,
            background=self.outlives_batch,
        )
        return event

    async def _announce(self, batch: Batch) -> None:
        """Tell the start hooks (unshielded: an abort meanwhile must not wait for them)."""
        event = self._start_event(batch)
        if batch.hooks.start:
            self.announced = True
            await emit(batch.hooks.start, event, shield=False)

    def _enter_contexts(self, batch: Batch) -> list[AbstractContextManager[object]]:
        """Enter the contexts hooks want the handler to run in (e.g. its span made current).

        Called in the task that runs the handler, just before it; a hook that raises is logged
        and skipped, never stops the call.
        """
        entered: list[AbstractContextManager[object]] = []
        for hook in batch.hooks.context:
            try:
                manager = hook.tool_call_context(self.event)  # type: ignore[arg-type]
                if manager is not None:
                    manager.__enter__()
                    entered.append(manager)
            except Exception:
                logger.exception("hook %s.tool_call_context raised; ignored", type(hook).__name__)
        return entered

    async def report(self, batch: Batch) -> None:
        """Hand the call's result to `on_result`, then to the error and end hooks (once; in
        the task that calls this, the caller's)."""
        result = self.result
        if not batch.reporting or result is None or self.reported:
            return
        self.reported = True
        call = self.call
        token = current_call_id.set(call.call_id)  # so a hook's own log records carry it
        try:
            if batch.on_result is not None:
                try:
                    batch.on_result(result)
                except Exception:
                    logger.exception("on_result callback raised for call %s; ignored", call.call_id)
            hooks = batch.hooks
            if self.changes and hooks.breaker:
                await self._report_breaker(batch)
            error = self.error
            if error is not None and hooks.error:
                await emit(
                    hooks.error,
                    ToolErrorEvent(
                        execution_id=self.execution_id,
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
                definition = self.tool.definition if self.tool is not None else None
                await emit(
                    hooks.end,
                    ToolEndEvent(
                        execution_id=self.execution_id,
                        call_id=call.call_id,
                        tool_name=call.name,
                        status=result.status,
                        tool_description=definition.description if definition else "",
                        arguments=call.arguments,
                        sensitive_fields=definition.sensitive_fields if definition else (),
                        error=result.error,
                        error_type=_error_type(result.status, error),
                        exception=error if result.status == "error" else None,
                        duration_s=self.duration_s,
                        queued_s=self.queued_s,
                        started=self.announced,
                        result=result.result,
                        result_content=result.to_content(),
                        model_usage=result.model_usage,
                        session_id=batch.session_id,
                        turn_id=batch.turn_id,
                        stage_id=batch.stage_id,
                        reasoning=self.reasoning,
                        background=self.outlives_batch,
                        reused_from=result.reused_from,
                        attempts=result.attempts,
                        approval=self.approval,  # type: ignore[arg-type]
                    ),
                )
        finally:
            current_call_id.reset(token)

    async def _report_breaker(self, batch: Batch) -> None:
        changes: list[BreakerChange] = self.changes  # type: ignore[assignment]
        self.changes = None
        for change in changes:
            await emit(
                batch.hooks.breaker,
                BreakerChangeEvent(
                    tool_name=change.tool_name,
                    old_state=change.old,
                    new_state=change.new,
                    failures=change.failures,
                    reset_after=change.reset_after,
                    call_id=self.call.call_id,
                    session_id=batch.session_id,
                ),
            )


async def report_all(batch: Batch, calls: list[Call]) -> None:
    """Report every call not reported yet, in request order. A further native cancellation
    of the caller (asyncio's `Task.cancel()` pierces anyio's shield) cuts short only the hook
    it lands in: the other calls are still reported, then it propagates."""
    cancelled: BaseException | None = None
    for item in calls:
        try:
            await item.report(batch)
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled


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


def _exit_contexts(
    entered: list[AbstractContextManager[object]], error: BaseException | None
) -> None:
    """Leave the hooks' contexts in reverse order, telling each how the handler ended. A
    context cannot swallow the handler's exception: what it returns is ignored."""
    for manager in reversed(entered):
        try:
            if error is None:
                manager.__exit__(None, None, None)
            else:
                manager.__exit__(type(error), error, error.__traceback__)
        except Exception:
            logger.exception("a tool_call_context of %r raised on exit; ignored", manager)


def _error_type(status: str, error: BaseException | None) -> str | None:
    """The status word, or the fully qualified class name of what a handler raised."""
    if status == "ok":
        return None
    if status != "error" or error is None:
        return status
    return error_type_name(error)
