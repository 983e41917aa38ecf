"""A connection's opening, before it has a session: read up to the `offer`, and refusals.

Before its `offer` a client may send one `resume` and any `ping`; `end` just closes; anything
that needs a session gets `not_ready`. A refusal sends `error {code, message}` and closes with
the code's close code (`CLOSE_CODES`).
"""

from __future__ import annotations

from contextlib import suppress

import anyio
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from llmrtc.rtc.protocol import (
    CLOSE_CODES,
    EndMessage,
    ErrorCode,
    OfferMessage,
    PingMessage,
    PongMessage,
    ProtocolError,
    ResumeMessage,
    error_message,
    parse_client_message,
    to_wire,
)

__all__ = ["read_opening", "refuse", "send_error"]


async def read_opening(
    websocket: ServerConnection, timeout: float, *, first_message_timeout: float | None = None
) -> tuple[OfferMessage, ResumeMessage | None] | None:
    """Read until the `offer`: the offer and the `resume` before it, if any. None when the
    connection closed, hung up, was refused, or sent no offer within `timeout` seconds
    (`offer_timeout`), or no message at all within `first_message_timeout` seconds (refused
    with `idle_timeout` either way)."""
    resume: ResumeMessage | None = None
    started = anyio.current_time()
    first = timeout if first_message_timeout is None else min(first_message_timeout, timeout)
    heard = False
    # An opening connection costs a place among the few the server keeps for them: one that
    # says nothing gives it up soon, one that talks gets the whole `timeout` to offer.
    with anyio.CancelScope(deadline=started + first) as scope:
        async for raw in websocket:
            if not heard:
                heard = True
                scope.deadline = started + timeout
            try:
                message = parse_client_message(raw)
            except ProtocolError as exc:
                if exc.code in CLOSE_CODES:
                    await refuse(websocket, exc.code, exc.message)
                    return None
                await websocket.send(to_wire(exc.to_message()))
                continue
            match message:
                case OfferMessage():
                    return message, resume
                case ResumeMessage() if resume is None:
                    resume = message
                case ResumeMessage():
                    await send_error(
                        websocket, "unexpected_message", "only one `resume` per connection"
                    )
                case PingMessage(id=ping_id):
                    await websocket.send(to_wire(PongMessage(id=ping_id)))
                case EndMessage():
                    await websocket.close(1000, "session ended")
                    return None
                case _:
                    await send_error(
                        websocket,
                        "not_ready",
                        f"{message.type!r} needs a session: send `offer` first "
                        "(after `resume`, to resume one)",
                    )
        return None  # closed before offering
    if heard:
        why = f"No offer came within {timeout:g} s; the connection was closed."
    else:
        why = f"No message came within {first:g} s of connecting; the connection was closed."
    await refuse(websocket, "idle_timeout", why)
    return None


async def send_error(
    websocket: ServerConnection, code: ErrorCode, message: str | None = None
) -> None:
    """Send `error {code, message}` (the code's meaning without `message`)."""
    await websocket.send(to_wire(error_message(code, message)))


async def refuse(websocket: ServerConnection, code: ErrorCode, message: str | None = None) -> None:
    """Send `error {code, message}` and close with the code's close code (a client already
    gone is no error)."""
    with suppress(ConnectionClosed):
        await send_error(websocket, code, message)
        await websocket.close(CLOSE_CODES.get(code, 1008), code)
