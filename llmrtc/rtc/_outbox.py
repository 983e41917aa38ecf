"""`Outbox`: one ordered queue for everything a session sends its client.

Events go over the data channel once it is open, over the WebSocket before that (and after it
closes). One task sends them in the order they were put, each exactly once: a message is taken
off the queue once, and sent on the first transport that is up. Producers (the voice loop's
events, the tool hooks, replies to client messages) never block: `put` is synchronous.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

import anyio
from pydantic import BaseModel
from websockets.exceptions import ConnectionClosed

from llmrtc.rtc.protocol import to_wire

if TYPE_CHECKING:
    from aiortc import RTCDataChannel
    from websockets.asyncio.server import ServerConnection

__all__ = ["CHANNEL_BUFFER_LIMIT", "OUTBOX_LIMIT", "Outbox", "Route"]

logger = logging.getLogger(__name__)

OUTBOX_LIMIT = 4096
"""Messages queued at most: a client that reads nothing while this many pile up is gone (its
session ends as if it had vanished) rather than the server's memory growing without bound."""
CHANNEL_BUFFER_LIMIT = 8 * 1024 * 1024
"""Bytes queued on the data channel at most before its client counts as gone (overflow)."""
Route = Literal["events", "websocket", "channel"]
"""`events`: the data channel once open, else the WebSocket; `websocket` / `channel`: only
that transport (a reply on the channel a request came on), dropped if it is not up."""


class Outbox:
    """The ordered send queue of one session (see the module docstring)."""

    def __init__(
        self,
        websocket: ServerConnection,
        *,
        on_overflow: Callable[[], None],
        limit: int = OUTBOX_LIMIT,
    ) -> None:
        """Send on `websocket` (and the data channel, once `channel` is set).

        Args:
            websocket: The session's signalling connection.
            on_overflow: Called once when `limit` messages are queued (the client is not
                reading); further messages are dropped.
            limit: Most messages queued.
        """
        self._websocket = websocket
        self._websocket_open = True
        self.channel: RTCDataChannel | None = None
        """The client's `events` data channel, once it announced it."""
        self._send, self._receive = anyio.create_memory_object_stream[tuple[str, Route]](limit)
        self._on_overflow = on_overflow
        self._overflowed = False
        self.sent_on_channel = 0
        """Messages sent on the data channel so far."""
        self.sent_on_websocket = 0
        """Messages sent on the WebSocket so far (after `session` and `answer`)."""

    def put(self, message: BaseModel, *, route: Route = "events") -> None:
        """Queue `message` (never blocks; dropped once the outbox is closed or overflowed)."""
        if self._overflowed:
            return
        try:
            self._send.send_nowait((to_wire(message), route))
        except anyio.WouldBlock:
            self._overflowed = True
            logger.warning("a session's outbox is full (its client reads nothing); it ends")
            self._on_overflow()
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    def close(self) -> None:
        """Stop taking messages; `run` sends what is queued, then returns."""
        self._send.close()

    async def run(self) -> None:
        """Send every queued message in order until `close` (then drain and return)."""
        async with self._receive:
            async for text, route in self._receive:
                await self._deliver(text, route)

    async def _deliver(self, text: str, route: Route) -> None:
        channel = self.channel
        if route != "websocket" and channel is not None and channel.readyState == "open":
            if channel.bufferedAmount > CHANNEL_BUFFER_LIMIT and not self._overflowed:
                # aiortc queues without bound: a client that stopped reading is gone.
                self._overflowed = True
                logger.warning("a session's data channel is backed up; the session ends")
                self._on_overflow()
            try:
                # Over the peer's max-message-size (64-256 KiB) aiortc raises ValueError: the
                # message then goes on the WebSocket, still exactly once.
                channel.send(text)
            except Exception:  # closed between the check and the send: fall back below
                logger.debug("data channel send failed; using the WebSocket", exc_info=True)
            else:
                self.sent_on_channel += 1
                return
        if route == "channel" or not self._websocket_open:
            return
        try:
            await self._websocket.send(text)
        except ConnectionClosed:
            self._websocket_open = False
        else:
            self.sent_on_websocket += 1
