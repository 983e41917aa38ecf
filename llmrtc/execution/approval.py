"""Approval of tool calls (`ToolDefinition.needs_approval`): `Approval`, the `Approver` an
executor awaits before such a call runs, and `approvals()`, which lets the code that owns a
conversation (a WebRTC session asking its client) answer for the executors run inside it.

    executor = ToolExecutor(registry, approver=approve_in_context)
    with approvals(ask_the_client):
        await loop_task()          # every approval of a call run here is asked of ask_the_client
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import anyio

from llmrtc.abort import AbortController
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.context import ToolContext

__all__ = ["Approval", "Approver", "approvals", "approve_in_context", "ask_approval"]

logger = logging.getLogger(__name__)

REASON_CHARS = 200
"""The longest reason of a denial the model is told (a longer one is left out)."""


@dataclass(frozen=True, slots=True)
class Approval:
    """An approver's answer for one call.

    Attributes:
        approved: Whether the call may run.
        reason: Why not (or a note), told to the model when the call is denied; keep it a
            short sentence a voice agent may say.
    """

    approved: bool
    reason: str | None = None


Approver = Callable[[ToolCall, ToolContext], "Awaitable[Approval | bool] | Approval | bool"]
"""`async approver(call, ctx) -> Approval | bool` (or a plain function answering at once):
may the call run? `call.arguments` is the
parsed, default-filled arguments dict; `ctx` is the call's context (its `abort_signal` is set
when the batch is aborted; `sensitive_fields` names what to mask when showing the arguments)."""

_context_approver: ContextVar[Approver | None] = ContextVar("llmrtc_approver", default=None)


@contextmanager
def approvals(approver: Approver) -> Iterator[None]:
    """Within this block (this task and the tasks it starts), `approve_in_context` asks
    `approver`. Nested blocks replace the outer one's approver for their duration."""
    token = _context_approver.set(approver)
    try:
        yield
    finally:
        _context_approver.reset(token)


async def approve_in_context(call: ToolCall, ctx: ToolContext) -> Approval | bool:
    """An `Approver` that asks the approver of the enclosing `approvals()` block (a WebRTC
    session with `ServerConfig(approvals="client")` opens one), and denies the call when there
    is none: a call that needs approval never runs without it."""
    approver = _context_approver.get()
    if approver is None:
        return Approval(False, "no one is there to approve it")
    return await _answer(approver, call, ctx)


async def _answer(approver: Approver, call: ToolCall, ctx: ToolContext) -> Approval | bool:
    """What `approver` says: awaited, or as it is from a plain function answering at once."""
    answer: Any = approver(call, ctx)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer  # type: ignore[no-any-return]  # checked by the caller


async def ask_approval(
    approver: Approver,
    call: ToolCall,
    ctx: ToolContext,
    controller: AbortController,
    timeout: float,
) -> Approval:
    """Ask `approver` about `call` and return its answer as an `Approval` whose `reason` the
    model may be told (a short printable line, else None). No answer within `timeout`
    seconds (`math.inf`: none) is a denial ("no approval in time"); an approver that raises
    or returns something else than an `Approval` or a bool denies ("approval failed"; logged).
    `controller` (`ctx`'s) is aborted when the approver is given up on, so it can stop asking.
    The caller's cancellation (an abort of the batch) propagates."""
    answer: object = None
    try:
        with anyio.move_on_after(None if timeout == math.inf else timeout) as waiting:
            answer = await _answer(approver, call, ctx)
    except Exception:
        logger.exception(
            "the approver raised for call %s of tool %r; the call is denied",
            call.call_id,
            call.name,
        )
        controller.abort("approval failed")
        return Approval(False, "approval failed")
    finally:
        if answer is None:
            controller.abort("timeout")  # given up on (or cancelled): the asking may stop
    if waiting.cancelled_caught:
        return Approval(False, "no approval in time")
    if isinstance(answer, Approval):
        approved, reason = answer.approved is True, answer.reason
    elif isinstance(answer, bool):
        approved, reason = answer, None
    else:
        logger.error(
            "the approver returned %r for call %s of tool %r, not an Approval or a bool; the "
            "call is denied",
            type(answer).__name__,
            call.call_id,
            call.name,
        )
        return Approval(False, "approval failed")
    if approved:
        return Approval(True)
    speakable = isinstance(reason, str) and 0 < len(reason) <= REASON_CHARS and reason.isprintable()
    return Approval(False, reason if speakable else None)
