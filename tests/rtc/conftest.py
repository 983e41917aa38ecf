"""Helpers for the server tests: a raw signalling + aiortc client (what any client does, step by
step, so tests can also misbehave on purpose), fake speech, paced audio, leak counters."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from tests._requirements import Settings, require

if "rtc" in Settings.left_out:
    # Left out of this run on purpose (--without rtc): collect nothing here. A skip raised
    # while pytest imports a conftest named on its command line would abort the run.
    collect_ignore_glob = ["*"]
else:
    require("rtc")
    from aiortc import RTCPeerConnection
    from websockets.asyncio.client import ClientConnection, connect
    from websockets.exceptions import ConnectionClosed

    from llmrtc.rtc.config import ServerConfig
    from llmrtc.rtc.peer import (
        accept_answer,
        create_offer,
        create_peer,
        description_from_dict,
        wait_connected,
    )
    from llmrtc.rtc.server import RTCServer
    from llmrtc.rtc.tracks import InboundAudio, OutboundAudio
    from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD
    from llmrtc.voice.frames import FRAME_DURATION, AudioFrame
    from llmrtc.voice.speech import Speech


TIMEOUT = 20.0
"""Generous bound for anything to arrive (loopback connects in ~50 ms)."""


def fake_speech(
    tts: FakeTTS | None = None, transcripts: Iterable[str | BaseException] = ()
) -> Speech:
    """Fake engines: `FakeSTT` hears what `tts` says (after any scripted transcripts)."""
    tts = tts or FakeTTS()
    return Speech(vad=FakeVAD(), stt=FakeSTT(list(transcripts), tts=tts), tts=tts)


def config(**overrides: Any) -> ServerConfig:
    """A loopback config on a free port."""
    return ServerConfig(**{"host": "127.0.0.1", "port": 0, **overrides})


async def paced(frames: Iterable[AudioFrame], rate: int = 48000) -> AsyncIterator[AudioFrame]:
    """One frame per 20 ms against the clock, then silence until the reader stops."""
    start = anyio.current_time()
    index = 0
    for frame in frames:
        await anyio.sleep_until(start + index * FRAME_DURATION)
        rate = frame.sample_rate
        yield frame
        index += 1
    while True:
        await anyio.sleep_until(start + index * FRAME_DURATION)
        yield AudioFrame.silence(FRAME_DURATION, rate)
        index += 1


class Mic:
    """A microphone the test speaks into: silence until `say` queues audio."""

    def __init__(self, rate: int = 24000) -> None:
        self.rate = rate
        self._queue: list[AudioFrame] = []

    def say(self, pcm: bytes, *, silence_after: float = 1.0) -> None:
        from llmrtc.voice.audio import split_frames

        tail = bytes(2 * round(self.rate * silence_after))
        self._queue.extend(split_frames(pcm + tail, self.rate))

    async def frames(self) -> AsyncIterator[AudioFrame]:
        start = anyio.current_time()
        index = 0
        while True:
            await anyio.sleep_until(start + index * FRAME_DURATION)
            index += 1
            yield (
                self._queue.pop(0) if self._queue else AudioFrame.silence(FRAME_DURATION, self.rate)
            )


class RawClient:
    """A protocol client built from the parts: a WebSocket, an aiortc peer with a microphone
    track and the `events` data channel. Every message from either channel lands in
    `messages` (with the channel it came on)."""

    def __init__(self, url: str) -> None:
        self.ws_url = url.replace("http://", "ws://").rstrip("/") + "/ws"
        self.ws: ClientConnection | None = None
        self.pc: RTCPeerConnection | None = None
        self.channel: Any = None
        self.messages: list[tuple[str, dict[str, Any]]] = []
        self.received_audio: list[AudioFrame] = []
        self.mic = Mic()
        self.close_code: int | None = None
        self._changed = anyio.Event()
        self._closed = anyio.Event()
        self._group: Any = None

    @property
    def events(self) -> list[dict[str, Any]]:
        return [message for _, message in self.messages]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.events if m["type"] == kind]

    async def send(self, message: dict[str, Any] | str | bytes) -> None:
        assert self.ws is not None
        data = message if isinstance(message, str | bytes) else json.dumps(message)
        await self.ws.send(data)

    async def offer(self, *, channel: bool = True, audio: bool = True) -> None:
        """Make the peer, send the offer, and apply the answer when it comes."""
        pc = self.pc = create_peer(loopback=True)
        if audio:
            pc.addTrack(OutboundAudio(self.mic.frames()))
        if channel:
            self.channel = pc.createDataChannel("events")
            self.channel.on("message", lambda raw: self._add("channel", raw))

        @pc.on("track")
        def on_track(track: Any) -> None:
            self._group.start_soon(self._record, track)

        offer = await create_offer(pc)
        await self.send({"type": "offer", "sdp": offer.sdp})

    async def connect(self, *, resume: tuple[str, str] | None = None) -> dict[str, Any]:
        """The usual opening (resume, offer, answer, connected); returns the `session`."""
        if resume is not None:
            await self.send({"type": "resume", "session_id": resume[0], "token": resume[1]})
        await self.offer()
        answer = await self.wait_for("answer")
        assert self.pc is not None
        await accept_answer(self.pc, description_from_dict(answer))
        await wait_connected(self.pc, TIMEOUT)
        with anyio.fail_after(TIMEOUT):
            while self.channel.readyState != "open":
                await anyio.sleep(0.01)
        return self.of_type("session")[-1]

    async def wait_for(
        self, kind: str, *, count: int = 1, timeout: float = TIMEOUT, **fields: Any
    ) -> dict[str, Any]:
        """The `count`-th message of `kind` (matching `fields`), waiting for it."""
        with anyio.fail_after(timeout):
            while True:
                found = [
                    m
                    for m in self.of_type(kind)
                    if all(m.get(key) == value for key, value in fields.items())
                ]
                if len(found) >= count:
                    return found[count - 1]
                changed = self._changed
                await changed.wait()

    async def wait_count(self, count: int, timeout: float = TIMEOUT) -> None:
        """Wait until `count` messages arrived in all."""
        with anyio.fail_after(timeout):
            while len(self.messages) < count:
                changed = self._changed
                await changed.wait()

    async def wait_closed(self, timeout: float = TIMEOUT) -> int | None:
        with anyio.fail_after(timeout):
            await self._closed.wait()
        return self.close_code

    def _add(self, where: str, raw: str | bytes) -> None:
        self.messages.append((where, json.loads(raw)))
        self._changed.set()
        self._changed = anyio.Event()

    async def _read_ws(self) -> None:
        assert self.ws is not None
        try:
            async for raw in self.ws:
                self._add("websocket", raw)
        except ConnectionClosed:
            pass
        self.close_code = self.ws.close_code
        self._closed.set()
        self._changed.set()

    async def _record(self, track: Any) -> None:
        async for frame in InboundAudio(track):
            self.received_audio.append(frame)

    async def close(self) -> None:
        if self.pc is not None:
            await self.pc.close()
        if self.ws is not None:
            await self.ws.close()
        if self._group is not None:
            self._group.cancel_scope.cancel()


@asynccontextmanager
async def raw_client(url: str, *, from_address: str | None = None) -> AsyncIterator[RawClient]:
    """A `RawClient` connected to the server at `url`; `from_address`: the loopback address
    its WebSocket comes from (e.g. `127.0.0.2`, another client than the tests' 127.0.0.1)."""
    client = RawClient(url)
    options: dict[str, Any] = {}
    if from_address is not None:
        options["local_addr"] = (from_address, 0)
    async with connect(client.ws_url, **options) as ws, anyio.create_task_group() as group:
        client.ws, client._group = ws, group
        group.start_soon(client._read_ws)
        try:
            yield client
        finally:
            with anyio.CancelScope(shield=True):
                await client.close()


@asynccontextmanager
async def running(server: RTCServer) -> AsyncIterator[RTCServer]:
    async with server:
        yield server


async def until(condition: Any, timeout: float = TIMEOUT) -> None:
    """Wait until `condition()` is true (polling; the server tears sessions down after the
    client sees the close)."""
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.02)


def peer_connections() -> int:
    """Live `RTCPeerConnection` objects (collected first)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, RTCPeerConnection))


def own_threads() -> set[str]:
    """Live threads, without asyncio's default executor (aiortc encodes in it)."""
    return {t.name for t in threading.enumerate() if not t.name.startswith("asyncio_")}


async def settle_tasks(baseline: int, timeout: float = 10.0) -> int:
    """The number of asyncio tasks once back to `baseline` (or after `timeout`)."""
    with anyio.move_on_after(timeout):
        while len(asyncio.all_tasks()) > baseline:
            await anyio.sleep(0.05)
    return len(asyncio.all_tasks())


async def settled(server: RTCServer, timeout: float = TIMEOUT) -> None:
    """Wait until every admitted session has closed and saved its state (a session frees its
    live slot, `active_sessions`, as soon as it starts ending: before that)."""
    with anyio.fail_after(timeout):
        await server.wait_idle()
