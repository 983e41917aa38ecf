"""`ClientApprovals`: a session's client approves its tool calls (`ServerConfig(approvals=
"client")`).

It is the `Approver` a session installs with `approvals()` around its voice loop, so an
executor built with `approver=approve_in_context` asks it. Each request goes to the client as
`approval_requested` (the arguments masked with the tool's `sensitive_fields`) and waits for
that client's `approve`; only the session's own `ClientInput` passes answers in, so one
session's client can never answer for another's calls.

A wait ends with the answer, with the call's abort (the executor then reports the call
`aborted`), or with the executor's `approval_timeout` (it cancels the wait). When the session
ends, every waiting request is denied ("the session ended"). A request made while no
connection is attached (between a session's end and its resume in this process, e.g. by a
call that outlives its connection) waits, and is sent to the resumed client (`send_to`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic_core import to_jsonable_python

from llmrtc.execution.approval import Approval
from llmrtc.rtc.messages import ApprovalRequestedMessage, ApproveMessage, ServerMessage
from llmrtc.rtc.protocol import ProtocolError
from llmrtc.telemetry._masking import mask_content, sensitive_values
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.context import ToolContext

__all__ = ["SESSION_ENDED", "ClientApprovals"]

logger = logging.getLogger(__name__)

SESSION_ENDED = "the session ended"
"""The reason a request still waiting when its session ends is denied with."""


@dataclass(eq=False)
class _Request:
    message: ApprovalRequestedMessage
    done: anyio.Event = field(default_factory=anyio.Event)
    answer: Approval | None = None


class ClientApprovals:
    """The `Approver` of one session whose client answers (module docstring).

    Args:
        send: Puts a message on the session's outbox (must not block).
        session_id: For logs.
    """

    def __init__(self, send: Callable[[ServerMessage], None], *, session_id: str) -> None:
        """Ask through `send`."""
        self._send: Callable[[ServerMessage], None] | None = send
        self._session_id = session_id
        # Per call id, oldest first: small models reuse ids (`call_1`), so two waiting
        # requests may share one; an answer settles the oldest.
        self._waiting: dict[str, list[_Request]] = {}

    @property
    def waiting(self) -> int:
        """Requests waiting for an answer."""
        return sum(len(requests) for requests in self._waiting.values())

    async def __call__(self, call: ToolCall, ctx: ToolContext) -> Approval:
        """Ask the client whether `call` may run and wait for its answer (or the call's
        abort: then a denial the executor reports as `aborted`)."""
        request = _Request(
            ApprovalRequestedMessage(
                call_id=call.call_id,
                name=call.name,
                arguments=_masked(call.arguments, ctx.sensitive_fields),
            )
        )
        self._waiting.setdefault(call.call_id, []).append(request)
        try:
            if self._send is not None:
                self._send(request.message)
            with ctx.abort_signal.cancel_scope():
                await request.done.wait()
        finally:
            self._forget(request)
        if request.answer is None:  # aborted: the executor reports the call as it was cut
            return Approval(False, "the call was stopped before anyone approved it")
        return request.answer

    def answer(self, message: ApproveMessage) -> None:
        """The client's `approve`: settle the oldest request waiting under its call id.

        Raises:
            ProtocolError: `unknown_approval` when no request of this session waits under
                that id (never asked, answered already, or ended).
        """
        requests = self._waiting.get(message.call_id)
        if not requests:
            raise ProtocolError(
                "unknown_approval",
                f"no call {message.call_id!r} is waiting for this session's approval (never "
                "asked, answered already, or stopped); answer only an `approval_requested` "
                "not answered yet",
            )
        request = requests[0]
        self._settle(request, Approval(message.approved, message.reason))

    def deny_all(self, reason: str = SESSION_ENDED) -> None:
        """Deny every waiting request with `reason`, and send nothing more until `send_to`
        attaches a connection again: the session is ending."""
        self._send = None
        for requests in list(self._waiting.values()):
            for request in list(requests):
                self._settle(request, Approval(False, reason))
        if reason == SESSION_ENDED:
            logger.debug("session %s: waiting approvals denied", self._session_id)

    def send_to(self, send: Callable[[ServerMessage], None]) -> None:
        """Send through `send` from now on (a resumed session's connection), and send it the
        requests still waiting: it has never seen them."""
        self._send = send
        for requests in list(self._waiting.values()):
            for request in requests:
                if request.answer is None:
                    send(request.message)

    def _settle(self, request: _Request, answer: Approval) -> None:
        request.answer = answer
        request.done.set()
        self._forget(request)

    def _forget(self, request: _Request) -> None:
        requests = self._waiting.get(request.message.call_id)
        if requests is not None and request in requests:
            requests.remove(request)
            if not requests:
                del self._waiting[request.message.call_id]


def _masked(arguments: Any, fields: Sequence[str]) -> dict[str, Any]:
    """The arguments as JSON values, each of `fields` (at any depth, and its values wherever
    they reappear) replaced by `"***"`."""
    if isinstance(arguments, str | bytes):  # raw JSON text: shown as the object it holds
        with suppress(ValueError):
            arguments = json.loads(arguments)
    value = to_jsonable_python(arguments, fallback=str)
    if not isinstance(value, dict):
        value = {"arguments": value}
    if not fields:
        return value
    masked = json.loads(mask_content(value, fields, sensitive_values(value, fields)))
    return masked if isinstance(masked, dict) else {"arguments": masked}
