"""`Session`: one admitted user, from the SDP answer to the saved state.

A session owns its voice loop, its peer connection, its outbox and its tasks; `RTCServer`
admits it and runs `Session.run` in the WebSocket's connection task. Everything a session
starts ends inside `run`: the readers (WebSocket, data channel, inbound audio), the event
forwarder, the idle watchdog, the outbox, the voice loop (its turn aborted, every tool call
given its one result) and the peer connection. A failure of one session is logged and ends
that session only; `run` never raises.

Ending goes in this order: the inputs stop, the voice loop closes (the turn is aborted; a
started `"finish"` call runs on unless `abort_tools` was called, as a shutdown does), the events
that produced (each `tool_call_finished`) are sent, the outbox drains, the WebSocket closes,
the peer closes, and the state is saved, each step whatever the one before did.

How a session ends decides what the client gets and whether it can come back:

| reason | client gets | resumable |
| --- | --- | --- |
| `end` (client hung up) | close 1000 | no |
| `replaced` (resumed on a new connection) | `error session_replaced`, close 1000 | by the new one |
| `vanished` (WebSocket closed without `end`) | nothing (it is gone) | yes |
| `peer_failed` (the media connection failed) | close 1001 | yes |
| `idle_timeout` | `error idle_timeout`, close 1000 | yes |
| `shutting_down` (server left, grace over) | `error shutting_down`, close 1001 | yes |
| a closing protocol error | `error <code>`, close per `CLOSE_CODES` | yes |
| `internal` (the session itself failed) | `error internal`, close 1011 | yes |

With `ServerConfig(approvals="client")` the session's `ClientApprovals` (`self.approvals`)
answers `approve_in_context` for every tool call of its voice loop: it asks this client, and
whatever still waits when the session ends is denied ("the session ended") before the loop
closes, so the model is told why the call did not run.

Background tool calls (`ToolDefinition(background=True)`) are the handler's, not the
connection's: closing the voice loop leaves them running, and the saved state records them.
`RTCServer` closes the handler (`handler.aclose()`, which stops them) when the session ended
for good (`end`), and otherwise once `resume_ttl` passes (or the server leaves); a resume in
this process adopts them first (`TurnRunner.restore`), so a `replaced` session hands them
over.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import TYPE_CHECKING, Any, Final

import anyio
from websockets.exceptions import ConnectionClosed

from llmrtc.execution.approval import approvals
from llmrtc.execution.observers import observe_tools
from llmrtc.rtc._approvals import ClientApprovals
from llmrtc.rtc._handlers import save_state, stage_of, transcript_of
from llmrtc.rtc._inputs import ClientInput
from llmrtc.rtc._outbox import Outbox
from llmrtc.rtc._tool_events import ToolEventRelay
from llmrtc.rtc.config import ServerConfig
from llmrtc.rtc.events import wire_event
from llmrtc.rtc.peer import accept_offer, create_peer, remote_audio_track
from llmrtc.rtc.protocol import (
    CLOSE_CODES,
    AnswerMessage,
    BargeInMessage,
    ErrorCode,
    InterruptionMessage,
    SessionMessage,
    error_message,
    to_wire,
)
from llmrtc.rtc.store import SessionStore, hash_token
from llmrtc.rtc.tracks import InboundAudio, OutboundAudio
from llmrtc.telemetry.events import ErrorEvent
from llmrtc.telemetry.hooks import Hooks, emit, listeners
from llmrtc.voice.events import Transcript, UserSpeechEnded, UserSpeechStarted
from llmrtc.voice.loop import VoiceLoop

if TYPE_CHECKING:
    from aiortc import RTCPeerConnection, RTCSessionDescription
    from websockets.asyncio.server import ServerConnection

    from llmrtc.agent.handler import TurnHandler
    from llmrtc.voice.speech import Speech

__all__ = ["Session"]

logger = logging.getLogger(__name__)

_SHUTDOWN_ABORT: Final = "shutting_down"
"""The abort reason tools stopped by a shutdown past its grace are given."""
_DRAIN_TIMEOUT: Final = 2.0
"""Seconds the outbox gets to send what is queued when a session ends."""
_CLOSING: Final[dict[str, tuple[ErrorCode | None, int, str]]] = {
    "end": (None, 1000, "session ended"),
    # Told why, so a client does not try to resume what now lives on another connection.
    "replaced": ("session_replaced", 1000, "session resumed on another connection"),
    "vanished": (None, 1000, ""),
    "peer_failed": (None, 1001, "media connection failed"),
    "overflow": (None, 1008, "client reads no messages"),
    "idle_timeout": ("idle_timeout", CLOSE_CODES["idle_timeout"], "idle timeout"),
    "shutting_down": ("shutting_down", CLOSE_CODES["shutting_down"], "server shutting down"),
    "internal": ("internal", CLOSE_CODES["internal"], "internal error"),
}
_REPLACED_TEXT: Final = (
    "This session was resumed on another connection (another tab or window); it goes on "
    "there. Do not resume it from here."
)


class Session:
    """One user's live session (see the module docstring for how it ends).

    Args:
        websocket: The signalling connection the offer came on.
        handler: This session's `TurnHandler` (restored already when resuming).
        speech: The VAD, STT and TTS the voice loop uses.
        config: The server's config (ICE, voice, idle timeout, resume TTL).
        hooks: Observers passed to the voice loop.
        store: Where the state goes when the client vanishes.
        session_id: The session's id (the old one when resuming).
        token: The session's resume token, new on every admission: the one a resume claimed
            with is void from then on.
        resumed: Whether the handler's state came from the store.
        on_end: Called once when the session starts ending (`end`), before its connection
            closes: the server frees the session's live slot there.
        relay: The tool relay of the connection this one resumes, in this process (the
            background calls it still runs report to it); None: a new one.
        approvals: With `config.approvals="client"`, the client approvals of the connection
            this one resumes, in this process (requests still waiting are sent to this
            client); None: a new one.
    """

    def __init__(
        self,
        *,
        websocket: ServerConnection,
        handler: TurnHandler,
        speech: Speech,
        config: ServerConfig,
        hooks: Hooks | None,
        store: SessionStore,
        session_id: str,
        token: str,
        resumed: bool,
        on_end: Callable[[], None] | None = None,
        relay: ToolEventRelay | None = None,
        approvals: ClientApprovals | None = None,
    ) -> None:
        """Prepare the session (`run` starts it)."""
        self.websocket = websocket
        self.handler = handler
        self.session_id = session_id
        self.token = token
        self.resumed = resumed
        self._speech = speech
        self._config = config
        self._hooks = hooks
        self._store = store
        self._on_end = on_end
        self.outbox = Outbox(websocket, on_overflow=lambda: self.end("overflow"))
        self.relay = relay if relay is not None else ToolEventRelay(self.outbox.put)
        """Sends the tool messages; a resume in this process takes the last connection's."""
        self.relay.send_to(self.outbox.put)
        self.approvals: ClientApprovals | None = None
        """Asks this session's client to approve tool calls (`approvals="client"`), else None."""
        if config.approvals == "client":
            if approvals is None:
                approvals = ClientApprovals(self.outbox.put, session_id=session_id)
            self.approvals = approvals
            self.approvals.send_to(self.outbox.put)
        self._ended = anyio.Event()
        self.finished = anyio.Event()
        """Set when `run` has returned (everything closed, the state saved)."""
        self.started = False
        """Whether the answer was delivered (False: refused, failed or gone before it). Only a
        started session saves its state; before that a resumed state is the server's to put
        back, with the token the client still has."""
        self._error_hooks = listeners(hooks, ErrorEvent)
        self.end_reason: str | None = None
        """Why the session ended (a key of the module docstring's table, or an error code)."""
        self._final: tuple[ErrorCode | None, int, str, str | None] | None = None
        self._last_activity = time.monotonic()
        self._pc: RTCPeerConnection | None = None
        self._loop: VoiceLoop | None = None
        self._tools_aborted = False

    # Ending --------------------------------------------------------------------------------

    def end(
        self, reason: str, *, code: ErrorCode | None = None, message: str | None = None
    ) -> None:
        """End the session for `reason` (the first reason given wins); `code`/`message`: the
        closing protocol error to send (by default the reason's own, if any)."""
        if self.end_reason is not None:
            return
        self.end_reason = reason
        error, close_code, close_reason = _CLOSING.get(reason, (None, 1011, ""))
        if code is not None:
            error, close_code, close_reason = code, CLOSE_CODES.get(code, 1008), code
        if reason == "replaced" and message is None:
            message = _REPLACED_TEXT
        self._final = (error, close_code, close_reason, message)
        self._ended.set()
        if self.approvals is not None:
            # Before the loop closes the turn: a call waiting for this client's yes is denied
            # for that reason (the model is told), not just cut.
            self.approvals.deny_all()
        on_end, self._on_end = self._on_end, None
        if on_end is not None:
            try:
                on_end()
            except Exception:
                logger.exception("session %s: its on_end callback failed", self.session_id)

    async def abort_tools(self) -> None:
        """Stop this session's tool calls now, `"finish"` ones too (each gets its one
        `aborted` result, reported and kept in the history): for a shutdown whose grace is
        over. Ending alone lets a started `"finish"` call complete (up to the voice loop's
        close timeout). Call `end` too: this does not end the session."""
        self._tools_aborted = True
        if self._loop is not None:
            await self._loop.abort(_SHUTDOWN_ABORT)

    def token_matches(self, token: str) -> bool:
        """Whether `token` is this session's current resume token (constant time)."""
        return hmac.compare_digest(hash_token(token), hash_token(self.token))

    @property
    def ended(self) -> bool:
        """Whether the session is ending or has ended."""
        return self.end_reason is not None

    # Running -------------------------------------------------------------------------------

    async def run(self, offer: RTCSessionDescription) -> None:
        """Answer `offer` and serve the session until it ends; then close everything and save
        the state (unless the client hung up, or the answer was never delivered). Never
        raises (but for cancellation): a failure is logged, reported to `on_error` hooks,
        and ends this session with `internal`; a failure while closing is logged and the
        rest of the closing (the save included) still happens.

        Args:
            offer: The client's offer (its SDP already checked for form). aiortc refusing it
                (or it having no audio) is a `bad_offer` refusal: the session never starts
                (`started` stays False) and nothing is saved.
        """
        client: ClientInput | None = None
        try:
            loop = self._loop = VoiceLoop(
                self.handler,
                stt=self._speech.stt,
                tts=self._speech.tts,
                vad=self._speech.vad,
                config=self._config.voice,
                hooks=self._hooks,
                session_id=self.session_id,
            )
            pc = self._pc = create_peer(loopback=self._config.ice_loopback)
            client = ClientInput(
                loop=loop,
                pc=pc,
                outbox=self.outbox,
                end=self.end,
                touch=self._touch,
                session_id=self.session_id,
                approvals=self.approvals,
            )
            # The loop's tasks are started inside this block, so every tool batch of every
            # turn reports each call's start and end to the relay as it happens (and, with
            # `approvals="client"`, asks this client to approve the calls that need it).
            with observe_tools(self.relay), self._approving():
                await self._run(offer, loop, pc, client)
        except ConnectionClosed:  # gone while the answer was being sent
            self.end("vanished")
        except Exception as exc:
            if _only_closed(exc):  # the WebSocket closed under a task group: the client left
                self.end("vanished")
            else:
                logger.exception("session %s failed; it is closed", self.session_id)
                with suppress(Exception):
                    await emit(self._error_hooks, _error_event(exc, self.session_id))
                self.end("internal")
                await self._close_websocket()
        finally:
            with anyio.CancelScope(shield=True):
                await self._close(client)

    def _approving(self) -> AbstractContextManager[None]:
        if self.approvals is None:
            return nullcontext()
        return approvals(self.approvals)

    async def _run(
        self,
        offer: RTCSessionDescription,
        loop: VoiceLoop,
        pc: RTCPeerConnection,
        client: ClientInput,
    ) -> None:
        forwarded = anyio.Event()
        drained: anyio.Event | None = None
        async with anyio.create_task_group() as outer:
            async with loop:
                events = loop.events()  # before anything can happen: no event is missed
                outer.start_soon(self._forward_events, events, forwarded)
                # The track exists before the answer is made, so the answer sends audio.
                pc.addTrack(OutboundAudio(loop.audio_out()))
                pc.on("datachannel", client.on_datachannel)
                pc.on("connectionstatechange", self._on_connection_state)
                answer = None
                try:
                    answer = await accept_offer(pc, offer)
                    _check_audio(pc)
                except ValueError as exc:
                    problem = f"the offer cannot be used: {exc}"
                    self.end("bad_offer", code="bad_offer", message=problem)
                if answer is not None and not self.ended:
                    try:
                        await self._send_opening(answer.sdp)
                    except ConnectionClosed:  # gone before the answer (caught here: the
                        self.end("vanished")  # loop's task group would wrap it in a group)
                    else:
                        self.started = True
                        drained = anyio.Event()
                        outer.start_soon(self._run_outbox, drained)
                        await self._serve_inputs(loop, pc, client)
                if self._tools_aborted:  # asked for before the loop was serving
                    await loop.abort(_SHUTDOWN_ABORT)
            # The loop is closed: the turn was aborted and every tool call has its result.
            # Its events (the `tool_call_finished` of calls cut short among them) go out
            # before the outbox closes.
            with anyio.move_on_after(_DRAIN_TIMEOUT):
                await forwarded.wait()
            self.outbox.close()
            if drained is not None:
                with anyio.move_on_after(_DRAIN_TIMEOUT):
                    await drained.wait()
            outer.cancel_scope.cancel()
        await self._close_websocket()

    async def _close(self, client: ClientInput | None) -> None:
        """Close what `run` opened, each step whatever the others did, and save."""
        try:
            if self._pc is not None:
                try:
                    await self._pc.close()
                except Exception:
                    logger.exception("session %s: its peer did not close", self.session_id)
            if client is not None:
                try:
                    client.close()
                except Exception:
                    logger.exception("session %s: its input did not close", self.session_id)
            if self.started:
                await self._save()
        finally:
            self.finished.set()

    async def _send_opening(self, sdp: str) -> None:
        # Straight on the WebSocket, before the outbox runs: `session` then `answer` come
        # before any event, whatever the data channel does.
        opening = SessionMessage(
            session_id=self.session_id,
            resume_token=self.token,
            resumed=self.resumed,
            stage=stage_of(self.handler),
            history=list(transcript_of(self.handler)),
        )
        await self.websocket.send(to_wire(opening))
        await self.websocket.send(to_wire(AnswerMessage(sdp=sdp)))

    async def _run_outbox(self, drained: anyio.Event) -> None:
        try:
            await self.outbox.run()
        finally:
            drained.set()

    async def _serve_inputs(
        self, loop: VoiceLoop, pc: RTCPeerConnection, client: ClientInput
    ) -> None:
        """Read the client until the session ends; then stop reading (the turn is aborted by
        the loop's close, after this)."""
        async with anyio.create_task_group() as readers:
            readers.start_soon(self._guard, self._read_websocket, client)
            readers.start_soon(self._guard, client.read_channel)
            readers.start_soon(self._guard, self._pump_audio, pc, loop)
            readers.start_soon(self._guard, self._watch_idle)
            await self._ended.wait()
            readers.cancel_scope.cancel()

    async def _guard(self, task: Callable[..., Awaitable[None]], *args: Any) -> None:
        try:
            await task(*args)
        except Exception as exc:
            logger.exception("session %s: %s failed", self.session_id, task.__name__)
            with suppress(Exception):
                await emit(self._error_hooks, _error_event(exc, self.session_id))
            self.end("internal")

    async def _close_websocket(self) -> None:
        assert self._final is not None
        error, close_code, close_reason, message = self._final
        shield = anyio.CancelScope(shield=True)
        with shield, anyio.move_on_after(_DRAIN_TIMEOUT), suppress(ConnectionClosed):
            if error is not None:
                await self.websocket.send(to_wire(error_message(error, message)))
            await self.websocket.close(close_code, close_reason)

    async def _save(self) -> None:
        """Keep the state for `resume_ttl` (or forget it, after `end`)."""
        try:
            if self.end_reason == "end":
                await self._store.delete(self.session_id)
                return
            await save_state(
                self._store,
                self.handler,
                session_id=self.session_id,
                token=self.token,
                ttl=self._config.resume_ttl,
            )
        except Exception:
            logger.exception("session %s: its state could not be saved", self.session_id)

    # Tasks ---------------------------------------------------------------------------------

    async def _read_websocket(self, client: ClientInput) -> None:
        try:
            async for raw in self.websocket:
                await client.handle(raw, "websocket")
        except ConnectionClosed:
            pass
        self.end("vanished")

    def _touch(self) -> None:
        self._last_activity = time.monotonic()

    async def _forward_events(self, events: Any, forwarded: anyio.Event) -> None:
        """Send the loop's events until it closes (after the session's inputs stopped, so
        what its close produces is sent too)."""
        try:
            await self._guard(self._forward, events)
        finally:
            forwarded.set()

    async def _forward(self, events: Any) -> None:
        async for event in events:
            if isinstance(event, UserSpeechStarted | UserSpeechEnded | Transcript):
                self._touch()  # the user spoke: not idle
            if self.relay.relay(event):
                continue
            message = wire_event(event)
            if message is not None:
                self.outbox.put(message)
            if isinstance(message, InterruptionMessage) and message.kind == "barge_in":
                # Protocol 1 promised `barge_in` for a cut reply; within a version messages are
                # only added, so it still follows the `interruption` that now says more.
                self.outbox.put(BargeInMessage(heard_text=message.heard_text))

    async def _pump_audio(self, pc: RTCPeerConnection, loop: VoiceLoop) -> None:
        track = remote_audio_track(pc)
        if track is None:  # a client that only listens
            return
        async for frame in InboundAudio(track):
            await loop.push_audio(frame)

    async def _watch_idle(self) -> None:
        timeout = self._config.idle_timeout
        while True:
            left = self._last_activity + timeout - time.monotonic()
            if left <= 0:
                self.end("idle_timeout")
                return
            await anyio.sleep(left)

    def _on_connection_state(self) -> None:
        pc = self._pc
        if pc is not None and pc.connectionState in ("failed", "closed"):
            self.end("peer_failed")


def _check_audio(pc: RTCPeerConnection) -> None:
    if not any(t.kind == "audio" and t.mid is not None for t in pc.getTransceivers()):
        raise ValueError("the offer has no audio section (m=audio): the session is spoken")


def _only_closed(exc: BaseException) -> bool:
    """Whether `exc` is a ConnectionClosed, or a group of nothing else (the client left)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_closed(inner) for inner in exc.exceptions)
    return isinstance(exc, ConnectionClosed)


def _error_event(error: BaseException, session_id: str) -> ErrorEvent:
    return ErrorEvent(error=error, where="rtc.session", session_id=session_id)
