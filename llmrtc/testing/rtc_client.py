"""`RTCTestClient`: an aiortc client of `llmrtc.rtc.RTCServer` for tests of a voice agent,
the way a browser talks to it (WebSocket signalling, an offer with a microphone track and an
"events" data channel, audio and events back).

    async with RTCTestClient(server.url) as client:
        await client.say("What is the weather in Tokyo?")
        finished = await client.wait_for("tool_call_finished", name="get_weather")
        await client.wait_for("turn_completed")

It runs on asyncio only (aiortc does): anyio's pytest plugin runs it by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Coroutine
from types import TracebackType
from typing import Any

import anyio
from aiortc import RTCDataChannel, RTCPeerConnection
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from llmrtc.rtc.errors import RTCError
from llmrtc.rtc.peer import (
    PeerConnectionError,
    add_candidate,
    create_offer,
    create_peer,
    remote_audio_track,
    wait_connected,
)
from llmrtc.rtc.protocol import ProtocolError, parse_server_message
from llmrtc.rtc.tracks import InboundAudio, OutboundAudio
from llmrtc.testing._rtc_audio import (
    MIC_RATE,
    AudioInput,
    Microphone,
    default_tts,
    mic_frames,
    synthesize,
)
from llmrtc.testing._rtc_events import (
    EventLog,
    Match,
    Pings,
    check_options,
    close_code,
    require_asyncio,
    websocket_url,
)
from llmrtc.testing._rtc_signalling import await_answer
from llmrtc.voice.frames import FRAME_DURATION, AudioFrame
from llmrtc.voice.tts import TTS

__all__ = ["RTCTestClient"]

logger = logging.getLogger(__name__)

_TRAILING_SILENCE = 1.0
"""Seconds of silence `say` sends after the speech: enough for any endpointer to end the turn."""
_MAX_SERVER_MESSAGE = 16 * 1024 * 1024
"""Largest server message read (a long turn's `turn_completed` repeats the whole answer)."""
_CLOSE_GRACE = 2.0
"""Seconds `end` waits for the server to close the WebSocket."""
_LATE_EVENTS = 0.5
"""Seconds the server's last data-channel events may arrive after its WebSocket closed."""


class RTCTestClient:
    """One user of an `RTCServer`, over a real WebRTC connection.

    Entering the block connects: the WebSocket at `/ws` of `url`, a `resume` first when
    `resume` is given, an offer carrying a microphone track and an "events" data channel, the
    server's `session` and `answer`, then the media connection and the data channel. On a
    loopback URL (127.0.0.1, localhost, ::1) the peer uses loopback ICE, like the server.

    The microphone sends one 20 ms frame per 20 ms: queued audio (`say`, `send_audio`), else
    silence, as a browser does: Opus at 48 kHz that the server decodes at the level sent (two
    equal channels; see `OutboundAudio`). Everything the server sends is recorded in `events`
    (WebSocket and data channel, in order of arrival), the agent's audio in `received_audio`.

    Leaving the block sends `end` (the session is over, not resumable) unless `end` or `drop`
    came first, and closes the data channel, the peer connection and the WebSocket: no task,
    thread or peer connection of the client is left.

    Args:
        url: The server's `http://` or `https://` URL (`RTCServer.url`).
        resume: `(session_id, resume_token)` of an earlier session to take back.
        tts: The voice `say` speaks with; default `EspeakTTS` (`en-us`, 150 words per minute,
            which Whisper transcribes well). A `FakeTTS` suits a server using `FakeSTT`.
        timeout: Seconds allowed for connecting, and the default of `wait_for` and `ping`.

    Raises:
        ValueError: `url` is not an http(s) URL, or `resume` is not two non-empty strings.
    """

    def __init__(
        self,
        url: str,
        *,
        resume: tuple[str, str] | None = None,
        tts: TTS | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._ws_url, self._loopback = websocket_url(url)
        check_options(resume, timeout)
        self.url = url
        """The server URL given."""
        self._resume = resume
        self._tts = tts
        self.timeout = timeout
        """Seconds allowed for connecting; the default timeout of `wait_for` and `ping`."""
        self._log = EventLog()
        self.received_audio: list[AudioFrame] = []
        """The agent's audio as received (48 kHz stereo 20 ms frames, as aiortc decodes Opus)."""
        self.received_at: list[float] = []
        """`time.monotonic()` when each frame of `received_audio` arrived."""
        self.session_id: str | None = None
        """The session's id, from the server's `session` message."""
        self.resume_token: str | None = None
        """The token to resume this session with (the latest the server sent)."""
        self.resumed = False
        """Whether the server restored an earlier session (its `session.resumed`)."""
        self._mic = Microphone()
        self._ws: ClientConnection | None = None
        self._pc: RTCPeerConnection | None = None
        self._channel: RTCDataChannel | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._ws_closed = anyio.Event()
        self._pings = Pings()
        self._finished = False  # `end` sent or `drop` done: leaving the block only closes

    # Connecting ---------------------------------------------------------------------------------

    async def __aenter__(self) -> RTCTestClient:
        require_asyncio()
        try:
            with anyio.fail_after(self.timeout):
                await self._connect()
        except BaseException as exc:
            await self._close()
            if isinstance(exc, TimeoutError):
                raise RTCError(
                    "connection_failed",
                    f"no connection to {self._ws_url} within {self.timeout} s",
                ) from exc
            raise
        return self

    async def _connect(self) -> None:
        try:
            self._ws = await connect(self._ws_url, max_size=_MAX_SERVER_MESSAGE)
        except Exception as exc:  # refused, 404, bad handshake, DNS: all "cannot connect"
            raise RTCError(
                "connection_failed", f"cannot open the WebSocket {self._ws_url}: {exc}"
            ) from exc
        ws = self._ws
        if self._resume is not None:
            session_id, token = self._resume
            await self._send_ws({"type": "resume", "session_id": session_id, "token": token})
        pc = self._pc = create_peer(loopback=self._loopback)
        channel = self._channel = pc.createDataChannel("events")
        opened = anyio.Event()
        channel.on("open", opened.set)
        channel.on("message", self._on_channel_message)
        pc.addTrack(OutboundAudio(self._mic))
        offer = await create_offer(pc)
        # A refused `resume` may close the WebSocket before the offer goes: the server's
        # `error` is still there to read below.
        with contextlib.suppress(RTCError):
            await self._send_ws({"type": "offer", "sdp": offer.sdp})
        await await_answer(ws, pc, self._record)
        self._start(self._read_websocket(ws))
        track = remote_audio_track(pc)
        if track is not None:
            self._start(self._read_audio(InboundAudio(track)))
        try:
            await wait_connected(pc, self.timeout)
        except PeerConnectionError as exc:
            raise RTCError("connection_failed", str(exc)) from exc
        await opened.wait()

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        # Owned by the client, cancelled and awaited in `_close`, whichever task closes it
        # (a task group could only be left by the task that entered it; aiortc is asyncio).
        self._tasks.append(asyncio.get_running_loop().create_task(work))

    # Sending ------------------------------------------------------------------------------------

    async def say(self, text: str) -> None:
        """Speak `text` into the microphone (synthesised with the client's TTS), followed by
        about a second of silence; returns once all of it was sent.

        Raises:
            TTSError, ValueError: the TTS failed or produced no audio.
            RTCError: the connection is closed (`connection_closed`).
        """
        if self._tts is None:
            self._tts = default_tts()
        speech = mic_frames(await synthesize(self._tts, text))
        silence = [AudioFrame.silence(FRAME_DURATION, MIC_RATE)]
        await self._play(speech + silence * round(_TRAILING_SILENCE / FRAME_DURATION))

    async def send_audio(self, audio: AudioInput) -> None:
        """Send `audio` as microphone input: an `AudioFrame`, frames in order (any rate and
        channels), or the path of a 16-bit PCM WAV file. Returns once all of it was sent.

        Raises:
            FileNotFoundError, ValueError: a WAV path that is missing or not 16-bit PCM.
            RTCError: the connection is closed (`connection_closed`).
        """
        await self._play(mic_frames(audio))

    async def _play(self, frames: list[AudioFrame]) -> None:
        self._check_open("send audio")
        mark = self._mic.queue(frames)
        with anyio.fail_after(len(frames) * FRAME_DURATION + self.timeout):
            await self._mic.sent(mark)

    async def send_text(self, text: str) -> None:
        """Send a typed user turn (`text`)."""
        await self._send_ws({"type": "text", "text": text})

    async def interrupt(self) -> None:
        """Ask the server to cut the agent's reply now (`interrupt`)."""
        await self._send_ws({"type": "interrupt"})

    async def approve(self, call_id: str, approved: bool = True, reason: str | None = None) -> None:
        """Answer the server's `approval_requested` for `call_id` (`approve`; a server with
        `ServerConfig(approvals="client")`): `approved`, with an optional `reason` the model
        is told when denied (at most 200 characters)."""
        message: dict[str, object] = {"type": "approve", "call_id": call_id, "approved": approved}
        if reason is not None:
            message["reason"] = reason
        await self._send_ws(message)

    async def end(self) -> None:
        """Hang up: send `end` (the session is over and cannot be resumed) and close."""
        if not self._finished:
            self._finished = True
            try:
                await self._send_ws({"type": "end"})
            except RTCError:
                pass  # already closed by the server: nothing to end
            else:
                with anyio.move_on_after(_CLOSE_GRACE):
                    await self._ws_closed.wait()
        await self._close()

    async def drop(self) -> None:
        """Vanish without `end`, as a lost network would: close the WebSocket and the peer
        connection. The server keeps the session for `resume_ttl`, to resume with
        `RTCTestClient(url, resume=(client.session_id, client.resume_token))`."""
        self._finished = True
        await self._close()

    async def ping(self, timeout: float | None = None) -> float:
        """The round trip of a `ping` over the data channel, in seconds.

        Args:
            timeout: Seconds to wait for the `pong`; default the client's `timeout`.

        Raises:
            TimeoutError: no `pong` in time.
            RTCError: the connection closed first.
        """
        self._check_open("ping")
        assert self._channel is not None
        limit = self.timeout if timeout is None else timeout
        return await self._pings.measure(self._channel.send, limit)

    async def _send_ws(self, message: dict[str, Any]) -> None:
        if self._ws is None:
            raise RTCError("connection_failed", "the client is not connected")
        try:
            await self._ws.send(json.dumps(message))
        except ConnectionClosed as exc:
            raise RTCError(
                "connection_closed", f"the WebSocket is closed ({close_code(exc)})"
            ) from exc

    def _check_open(self, what: str) -> None:
        if self._pc is None or self._pc.connectionState in ("closed", "failed"):
            raise RTCError("connection_closed", f"cannot {what}: the peer connection is closed")

    # Receiving ----------------------------------------------------------------------------------

    @property
    def events(self) -> list[dict[str, Any]]:
        """Every message the server sent, as JSON dicts in order of arrival (WebSocket and
        data channel), from `session` and `answer` on; `pong`s are `ping`'s own."""
        return self._log.events

    async def wait_for(
        self,
        type: str,
        timeout: float | None = None,
        *,
        where: Match | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """The first event of `type` not returned by an earlier `wait_for`, received already
        or arriving within `timeout`, whose fields equal `fields` and for which `where(event)`
        is true. Each event is returned once: calling it twice for `tool_call_finished`
        gives the first, then the second.

        Args:
            type: The message type (`transcript`, `tool_call_finished`, ...).
            timeout: Seconds to wait at most; default the client's `timeout`.
            where: A predicate on the event dict.
            **fields: Field values the event must have (`name="get_weather"`).

        Raises:
            ValueError: `type` is not a server message type, or `fields` names a field it
                does not have.
            TimeoutError: no such event in time (the message lists what did arrive).
            RTCError: the server closed the connection and no such event came before.
            ProtocolError: the server sent a malformed message.
        """
        limit = self.timeout if timeout is None else timeout
        return await self._log.wait_for(type, limit, where, fields)

    def _record(self, raw: str | bytes) -> dict[str, Any]:
        try:
            message = parse_server_message(raw)
        except ProtocolError as exc:
            self._log.fail(exc)
            raise
        event = message.model_dump(mode="json")
        if event["type"] == "session":
            self.session_id = event["session_id"]
            self.resume_token = event["resume_token"]
            self.resumed = event["resumed"]
        if event["type"] != "pong" or not self._pings.answered(event["id"]):
            self._log.add(event)
        return event

    def _on_channel_message(self, raw: str | bytes) -> None:
        try:
            self._record(raw)
        except ProtocolError:
            logger.error("RTCTestClient: malformed message on the data channel: %r", raw[:200])

    async def _read_websocket(self, ws: ClientConnection) -> None:
        try:
            async for raw in ws:
                event = self._record(raw)
                if event["type"] == "ice" and self._pc is not None:
                    await add_candidate(self._pc, event["candidate"])
        except ConnectionClosed:
            pass
        except (ProtocolError, ValueError) as exc:  # malformed, or a candidate aiortc refused
            logger.error("RTCTestClient: bad message on the WebSocket: %s", exc)
            self._log.fail(exc)  # waiters and leaving the block raise it
            return
        self._ws_closed.set()
        await anyio.sleep(_LATE_EVENTS)
        self._log.close(f"the server closed the WebSocket (close code {ws.close_code})")

    async def _read_audio(self, inbound: InboundAudio) -> None:
        async for frame in inbound:
            self.received_audio.append(frame)
            self.received_at.append(time.monotonic())

    # Closing ------------------------------------------------------------------------------------

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if not self._finished:
            with anyio.CancelScope(shield=True):
                await self.end()
        await self._close()
        failure = self._log.failure
        if failure is not None and exc is None:
            raise failure

    async def _close(self) -> None:
        with anyio.CancelScope(shield=True):
            if self._channel is not None:
                self._channel.close()
            if self._pc is not None:
                await self._pc.close()
            if self._ws is not None:
                await self._ws.close()
            tasks, self._tasks = self._tasks, []
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._log.close("the client closed the connection")
            self._pings.close()
            self._mic.close()
