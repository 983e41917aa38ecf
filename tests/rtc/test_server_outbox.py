"""The session outbox: one ordered queue, each message sent once on the first transport up,
a full queue (a client that reads nothing) reported once."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Close

from llmrtc.rtc._outbox import Outbox
from llmrtc.rtc.protocol import AssistantTextMessage, PongMessage

pytestmark = pytest.mark.anyio


class Socket:
    """Stands in for the WebSocket transport: records what is sent, or blocks, or is closed."""

    def __init__(self, *, blocked: bool = False, closed: bool = False) -> None:
        self.sent: list[str] = []
        self.blocked = blocked
        self.closed = closed

    async def send(self, text: str) -> None:
        if self.closed:
            raise ConnectionClosedOK(Close(1000, ""), Close(1000, ""), True)
        if self.blocked:
            await anyio.sleep_forever()
        self.sent.append(text)


class Channel:
    """Stands in for an aiortc data channel."""

    def __init__(self, state: str = "open", *, refuse_over: int | None = None) -> None:
        self.readyState = state
        self.bufferedAmount = 0
        self.sent: list[str] = []
        self.refuse_over = refuse_over

    def send(self, text: str) -> None:
        if self.refuse_over is not None and len(text) > self.refuse_over:
            raise ValueError("over the remote max-message-size")
        self.sent.append(text)


def delta(i: int) -> AssistantTextMessage:
    return AssistantTextMessage(delta=str(i))


async def drain(outbox: Outbox) -> None:
    outbox.close()
    with anyio.fail_after(5):
        await outbox.run()


async def test_messages_go_in_order_on_the_channel_once_open_else_the_websocket() -> None:
    socket, channel = Socket(), Channel("connecting")
    outbox = Outbox(socket, on_overflow=lambda: None)  # type: ignore[arg-type]
    outbox.channel = channel  # type: ignore[assignment]
    outbox.put(delta(1))
    outbox.put(delta(2))
    async with anyio.create_task_group() as group:
        group.start_soon(outbox.run)
        with anyio.fail_after(5):
            while len(socket.sent) < 2:
                await anyio.sleep(0.01)
        channel.readyState = "open"
        outbox.put(delta(3))
        outbox.put(PongMessage(id="p"), route="websocket")
        outbox.put(PongMessage(id="q"), route="channel")
        outbox.close()
    assert [AssistantTextMessage.model_validate_json(t).delta for t in socket.sent[:2]] == [
        "1",
        "2",
    ]
    assert socket.sent[2:] == ['{"type":"pong","id":"p"}']
    assert channel.sent == ['{"type":"assistant_text","delta":"3"}', '{"type":"pong","id":"q"}']
    assert (outbox.sent_on_websocket, outbox.sent_on_channel) == (3, 2)


async def test_a_message_the_channel_refuses_goes_on_the_websocket_once() -> None:
    socket, channel = Socket(), Channel(refuse_over=40)
    outbox = Outbox(socket, on_overflow=lambda: None)  # type: ignore[arg-type]
    outbox.channel = channel  # type: ignore[assignment]
    outbox.put(delta(1))
    outbox.put(AssistantTextMessage(delta="x" * 100))
    await drain(outbox)
    assert channel.sent == ['{"type":"assistant_text","delta":"1"}']
    assert len(socket.sent) == 1 and "x" * 100 in socket.sent[0]


async def test_a_closed_websocket_drops_what_has_nowhere_to_go() -> None:
    outbox = Outbox(Socket(closed=True), on_overflow=lambda: None)  # type: ignore[arg-type]
    outbox.put(delta(1))
    outbox.put(delta(2))
    await drain(outbox)
    assert outbox.sent_on_websocket == 0


async def test_a_client_that_reads_nothing_overflows_once_and_nothing_blocks() -> None:
    overflows: list[Any] = []
    outbox = Outbox(Socket(blocked=True), on_overflow=lambda: overflows.append(1), limit=3)  # type: ignore[arg-type]
    async with anyio.create_task_group() as group:
        group.start_soon(outbox.run)
        for i in range(10):  # never blocks the producer
            outbox.put(delta(i))
        await anyio.sleep(0.05)
        group.cancel_scope.cancel()
    assert overflows == [1]


async def test_a_backed_up_data_channel_overflows() -> None:
    overflows: list[Any] = []
    channel = Channel()
    channel.bufferedAmount = 64 * 1024 * 1024
    outbox = Outbox(Socket(), on_overflow=lambda: overflows.append(1))  # type: ignore[arg-type]
    outbox.channel = channel  # type: ignore[assignment]
    outbox.put(delta(1))
    outbox.put(delta(2))
    await drain(outbox)
    assert overflows == [1]
