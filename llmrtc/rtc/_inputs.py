"""`ClientInput`: what a live session does with each client message, from the WebSocket or
the `events` data channel alike.

Errors answer on the channel the message came on (a `pong` too, so a ping measures that
channel's round trip); an error whose code closes (`CLOSE_CODES`) ends the session instead.
Data-channel messages arrive in aiortc callbacks: they are queued (at most `INBOX_LIMIT`;
a flood beyond is dropped) and handled in order by `read_channel`, in the session's tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import anyio

from llmrtc.rtc._approvals import ClientApprovals
from llmrtc.rtc._outbox import Outbox, Route
from llmrtc.rtc.peer import add_candidate
from llmrtc.rtc.protocol import (
    CLOSE_CODES,
    ApproveMessage,
    EndMessage,
    ErrorCode,
    IceMessage,
    InterruptMessage,
    OfferMessage,
    PingMessage,
    PongMessage,
    ProtocolError,
    ResumeMessage,
    TextMessage,
    parse_client_message,
)
from llmrtc.voice.loop import TurnQueueFull

if TYPE_CHECKING:
    from aiortc import RTCDataChannel, RTCPeerConnection

    from llmrtc.voice.loop import VoiceLoop

__all__ = ["INBOX_LIMIT", "ClientInput"]

logger = logging.getLogger(__name__)

INBOX_LIMIT: Final = 256
"""Data-channel messages queued for handling at most."""


class ClientInput:
    """Handles one session's client messages (module docstring).

    Args:
        loop: The session's voice loop (`text`, `interrupt`).
        pc: Its peer connection (trickled `ice`).
        outbox: Where replies and errors go.
        end: `end(reason, code=..., message=...)` ends the session.
        touch: Called for every message but `ping` (the idle clock restarts).
        session_id: For logs.
        approvals: The session's client approvals (`approve`), or None when the application
            approves (`approve` is then unexpected).
    """

    def __init__(
        self,
        *,
        loop: VoiceLoop,
        pc: RTCPeerConnection,
        outbox: Outbox,
        end: Callable[..., None],
        touch: Callable[[], None],
        session_id: str,
        approvals: ClientApprovals | None = None,
    ) -> None:
        """Handle messages for one session."""
        self._loop = loop
        self._pc = pc
        self._outbox = outbox
        self._end = end
        self._touch = touch
        self._session_id = session_id
        self._approvals = approvals
        self._send, self._receive = anyio.create_memory_object_stream[str | bytes](INBOX_LIMIT)

    async def handle(self, raw: str | bytes, route: Route) -> None:
        """Parse and act on one message that came on `route` (any message but `ping` is user
        activity: a forgotten tab's keep-alive pings do not keep its session alive)."""
        try:
            message = parse_client_message(raw)
            if not isinstance(message, PingMessage):
                self._touch()
            await self._dispatch(message, route)
        except ProtocolError as exc:
            if exc.code in CLOSE_CODES:
                code: ErrorCode = exc.code
                self._end(code, code=code, message=exc.message)
            else:
                self._outbox.put(exc.to_message(), route=route)

    async def _dispatch(self, message: object, route: Route) -> None:
        match message:
            case TextMessage(text=text):
                try:
                    await self._loop.send_text(text)
                except TurnQueueFull as exc:
                    raise ProtocolError(
                        "too_many_turns",
                        f"{exc.limit} typed turns already wait for the agent (this server's "
                        "limit); this `text` was not taken: send it again after a "
                        "`turn_completed`, or send `interrupt` to drop the waiting ones",
                    ) from None
            case InterruptMessage():
                await self._loop.interrupt()
            case EndMessage():
                self._end("end")
            case PingMessage(id=ping_id):
                self._outbox.put(PongMessage(id=ping_id), route=route)
            case IceMessage(candidate=candidate):
                data = None if candidate is None else candidate.model_dump()
                try:
                    await add_candidate(self._pc, data)
                except ValueError as exc:
                    raise ProtocolError("bad_candidate", str(exc)) from None
            case ApproveMessage():
                if self._approvals is None:
                    raise ProtocolError(
                        "unexpected_message",
                        "'approve' answers an `approval_requested`, and this server never "
                        "sends one: its application approves tool calls itself "
                        "(ServerConfig.approvals='app'); the message was ignored",
                    )
                self._approvals.answer(message)
            case OfferMessage() | ResumeMessage():
                raise ProtocolError(
                    "unexpected_message",
                    f"{message.type!r} is only allowed before the session starts; "
                    "this connection already has a session (reconnect to start another)",
                )

    def on_datachannel(self, channel: RTCDataChannel) -> None:
        """aiortc's `datachannel` event: the client's first `events` channel carries the
        protocol (events out once it is open, client messages in); others are ignored."""
        if channel.label != "events" or self._outbox.channel is not None:
            return
        self._outbox.channel = channel

        @channel.on("message")
        def on_message(raw: object) -> None:
            if not isinstance(raw, str | bytes):
                return
            try:
                self._send.send_nowait(raw)
            except anyio.WouldBlock:
                logger.warning("session %s: data channel flood; message dropped", self._session_id)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass

    async def read_channel(self) -> None:
        """Handle the data channel's messages in order (until `close`)."""
        async with self._receive:
            async for raw in self._receive:
                await self.handle(raw, "channel")

    def close(self) -> None:
        """Take no more data-channel messages."""
        self._send.close()
