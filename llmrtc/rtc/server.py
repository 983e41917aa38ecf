"""`RTCServer`: one port for the web client (HTTP) and signalling (WebSocket at `/ws`), with
admission, resume and graceful shutdown.

    async with RTCServer(make_agent, speech=speech, config=ServerConfig(port=0)) as server:
        print("open", server.url)
        await anyio.sleep_forever()

Each WebSocket connection is one would-be session. Until it is admitted it holds no session
slot; such connections are capped per client (`max_pending_per_address`; an IPv6 client counts
by its /64) and in all (`4 * max_sessions`: one more closes the oldest one of the client that
has the most, with `server_full`), and one that sends nothing within `first_message_timeout`
is closed. Before its `offer` it may send `resume` (once) and `ping`; anything
needing a session gets `not_ready`. The offer is then checked (`bad_offer`); a resume ends this
process's live connection of the session if it has the session's current token, and claims the
saved state (`_resume`: every refusal, `resume_refused`, comes after the same
`resume_wait`). Then the session is admitted against `max_sessions` in one step with no await
between the check and the count (`server_full`, `shutting_down`), and the `Session` runs in the
connection's task until it ends; it frees its slot as soon as it starts ending, but while
`2 * max_sessions` sessions are admitted and not yet done (ending ones finish their "finish"
tools and save) new ones get `server_full`. A claimed state
whose session never delivered its answer is put back with the token it was claimed with.

Background tool calls outlive the connection, not the session: when a session ends for good
(`end`: the client hung up) its handler is closed at once (`handler.aclose()`, when it has
one: its background calls stop, each with its one `aborted` result). When it ends resumably
(its state saved, or put back) the handler waits, calls running, for `resume_ttl`: a resume in
this process adopts them meanwhile (`TurnRunner.restore`); when the time is up the handler is
closed (what was adopted is no longer its own to stop), and leaving the server closes every
waiting handler.
Refusals send `error {code, message}` and close with `CLOSE_CODES[code]`.

Asyncio only (aiortc and websockets' server are). One event loop keeps about 10 full-duplex
sessions on time (ARCHITECTURE.md): `reuse_port` lets several processes share the port.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import time
from contextlib import AsyncExitStack, suppress
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import anyio
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from llmrtc.rtc import _resume
from llmrtc.rtc._approvals import ClientApprovals
from llmrtc.rtc._handlers import RestoreError, make_handler
from llmrtc.rtc._http import StaticFiles
from llmrtc.rtc._signalling import read_opening, refuse
from llmrtc.rtc._tool_events import ToolEventRelay
from llmrtc.rtc.config import ServerConfig
from llmrtc.rtc.protocol import (
    CLOSE_CODES,
    MAX_FRAME_BYTES,
    error_message,
    to_wire,
)
from llmrtc.rtc.session import Session
from llmrtc.rtc.store import InMemorySessionStore, SessionState, SessionStore
from llmrtc.rtc.store import new_session_credentials as _new_credentials
from llmrtc.telemetry.events import ErrorEvent, SessionEndEvent, SessionStartEvent
from llmrtc.telemetry.hooks import Hooks, emit, listeners

if TYPE_CHECKING:
    from collections.abc import Callable

    from aiortc import RTCSessionDescription

    from llmrtc.voice.speech import Speech

__all__ = ["RTCServer"]

logger = logging.getLogger(__name__)

_FINAL_CLOSE_TIMEOUT: Final = 10.0
"""After the grace, sessions told to close get this long to save their state."""
_OPENING_PER_SESSION: Final = 4
"""Connections still opening (no offer yet) allowed per `max_sessions`; one more evicts the
oldest of the address that has the most."""
_HANDLER_CLOSE_TIMEOUT: Final = 10.0
"""How long closing a session's handler (stopping its background calls) may take."""
_ADMITTED_PER_SESSION: Final = 2
"""Sessions admitted and not yet done (live, or ending: closing, finishing tools, saving)
allowed per `max_sessions`; at that count a new one gets `server_full`."""


class RTCServer:
    """A WebRTC voice-agent server: the static web client at `/`, signalling at `/ws`, one
    `VoiceLoop` per admitted session around a handler from `agent_factory`.

    Example:
        async with open_default_speech() as speech:
            server = RTCServer(lambda: make_runner(), speech=speech,
                               config=ServerConfig(host="127.0.0.1", port=8080))
            async with server:
                print(server.url)
                await anyio.sleep_forever()

    Leaving `async with` is a graceful shutdown: no new sessions (`shutting_down`), live ones
    get `config.shutdown_grace` seconds to end, the rest are closed (and stay resumable) with
    their tool calls aborted, `"finish"` ones too, so leaving is bounded.
    """

    def __init__(
        self,
        agent_factory: Callable[[], Any],
        *,
        speech: Speech | None = None,
        config: ServerConfig | None = None,
        hooks: Hooks | None = None,
        store: SessionStore | None = None,
    ) -> None:
        """Create the server (it listens on `async with`).

        Args:
            agent_factory: `() -> TurnHandler`, called once per session (an awaitable result
                is awaited): a fresh `TurnRunner` or `PlaybookOrchestrator` each time.
            speech: The VAD, STT and TTS shared by the sessions (`open_default_speech()`);
                None opens the default ones while the server runs.
            config: Where to listen and how to treat sessions (`ServerConfig()` by default).
            hooks: Observers of every session (speech, barge-ins, session start and end,
                recovered errors), passed to each session's voice loop.
            store: Where vanished sessions wait to be resumed (default: a new
                `InMemorySessionStore`; share a `SQLiteSessionStore` between workers).

        Raises:
            TypeError: `agent_factory` is not callable, `speech` lacks a VAD, STT or TTS, or
                `store` is not a `SessionStore`.
        """
        if not callable(agent_factory):
            raise TypeError(
                f"RTCServer needs agent_factory: a callable returning a TurnHandler, got "
                f"{type(agent_factory).__name__}"
            )
        if speech is not None:
            missing = [name for name in ("vad", "stt", "tts") if not hasattr(speech, name)]
            if missing:
                raise TypeError(
                    f"RTCServer(speech=...) needs .vad, .stt and .tts (a `Speech`, e.g. from "
                    f"open_default_speech()); {type(speech).__name__} lacks {', '.join(missing)}"
                )
        if store is not None and not isinstance(store, SessionStore):
            raise TypeError(
                f"RTCServer(store=...) must be a SessionStore (save, load, claim, delete), got "
                f"{type(store).__name__}"
            )
        self._factory = agent_factory
        self._speech = speech
        self.config = config if config is not None else ServerConfig()
        self.hooks = hooks
        self.store: SessionStore = store if store is not None else InMemorySessionStore()
        self._session_hooks = {
            kind: listeners(hooks, kind)
            for kind in (SessionStartEvent, SessionEndEvent, ErrorEvent)
        }
        self._sessions: set[Session] = set()
        self._admitted = 0  # live slots held (freed when a session starts ending)
        self._busy = 0  # admitted connections not yet done (closing, saving, putting back)
        self._openings = _Openings()  # connections with no session yet
        self._idle = anyio.Event()
        self._idle.set()
        self._admitting = False
        self._server: Server | None = None
        # Handlers waiting for a resume, until the TTL: asyncio tasks, not a task group, as a
        # group opened in `__aenter__` would span the caller's `async with` body.
        self._waits: set[asyncio.Task[None]] = set()
        self._relays: dict[str, tuple[ToolEventRelay, object]] = {}
        """The tool relays of sessions waiting for a resume (see `Session(relay=...)`), each
        with the token of the wait that left it there."""
        self._approvals: dict[str, ClientApprovals] = {}
        """The client approvals of those sessions (`approvals="client"`; see
        `Session(approvals=...)`): kept and dropped with their relay."""
        self._stack: AsyncExitStack | None = None
        self._port: int | None = None

    # Public state --------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port listened on (the real one when `config.port` was 0).

        Raises:
            RuntimeError: the server is not running.
        """
        if self._port is None:
            raise RuntimeError("RTCServer.port: the server is not running (use `async with`)")
        return self._port

    @property
    def url(self) -> str:
        """The page's address, e.g. `http://127.0.0.1:8080/` (a wildcard host shows as the
        loopback address)."""
        host = self.config.host
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"

    @property
    def active_sessions(self) -> int:
        """Sessions admitted and not yet ending (the count `max_sessions` limits): a session
        frees its slot as soon as it starts ending, before its connection closes."""
        return self._admitted

    @property
    def admitting(self) -> bool:
        """Whether new sessions are admitted (False after `stop_admitting`)."""
        return self._admitting

    def stop_admitting(self) -> None:
        """Refuse new sessions from now on (`shutting_down`); live ones go on (SIGTERM)."""
        self._admitting = False

    async def wait_idle(self) -> None:
        """Return once no admitted session is left, ending ones included: each has closed
        and saved its state (at once if there is none)."""
        while self._busy:
            await self._idle.wait()

    # Lifetime ------------------------------------------------------------------------------

    async def __aenter__(self) -> RTCServer:
        if self._stack is not None:
            raise RuntimeError("this RTCServer is already running")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise RuntimeError(
                "RTCServer runs on asyncio only (aiortc and websockets' server do): run it "
                "with asyncio.run, anyio.run(..., backend='asyncio') or anyio's asyncio "
                "pytest backend, not trio"
            ) from None
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            if self._speech is None:
                from llmrtc.voice.speech import open_default_speech

                self._speech = await stack.enter_async_context(open_default_speech())
                stack.callback(setattr, self, "_speech", None)
            # Leaving ends the waits for a resume (each closes its handler), before the speech
            # stack closes.
            stack.push_async_callback(self._end_waits)
            self._server = await serve(
                self._connection,
                self.config.host,
                self.config.port,
                process_request=StaticFiles(),
                max_size=MAX_FRAME_BYTES,
                reuse_port=self.config.reuse_port or None,
                logger=logging.getLogger(f"{__name__}.websocket"),
            )
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        self._port = self._server.sockets[0].getsockname()[1]
        self._admitting = True
        logger.info("RTCServer listening on %s", self.url)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._stack is not None and self._server is not None
        with anyio.CancelScope(shield=True):
            try:
                self.stop_admitting()
                with anyio.move_on_after(self.config.shutdown_grace):
                    await self.wait_idle()
                # The grace is over: "finish" tools are aborted too, so this is bounded.
                for session in list(self._sessions):
                    session.end("shutting_down")
                    await session.abort_tools()
                with anyio.move_on_after(_FINAL_CLOSE_TIMEOUT):
                    await self.wait_idle()
                if self._busy:
                    logger.warning("%d session(s) did not end after shutdown", self._busy)
                self._server.close()
                await self._server.wait_closed()
            finally:
                self._server = None
                self._port = None
                stack, self._stack = self._stack, None
                await stack.aclose()

    # Connections ---------------------------------------------------------------------------

    async def _connection(self, websocket: ServerConnection) -> None:
        """One WebSocket: everything in it is contained here (one failure, one session)."""
        try:
            await self._signalling(websocket)
        except ConnectionClosed:
            pass
        except Exception as exc:
            logger.exception("a signalling connection failed; it is closed")
            await emit(
                self._session_hooks[ErrorEvent],
                ErrorEvent(error=exc, where="signalling"),
            )
            with suppress(Exception):
                await websocket.send(to_wire(error_message("internal")))
                await websocket.close(CLOSE_CODES["internal"], "internal error")

    async def _signalling(self, websocket: ServerConnection) -> None:
        # Connections without a session yet (not offered, or a resume waiting for its state)
        # cost little each but are unlimited otherwise: capped per address, and in all by
        # evicting the oldest one of the address that has the most, so a few addresses holding
        # idle sockets cannot lock everyone else out. They hold no live slot.
        address = client_key(websocket.remote_address)
        if self._openings.of(address) >= self.config.max_pending_per_address:
            await refuse(
                websocket,
                "server_full",
                f"Too many connections from your address are opening at once (at most "
                f"{self.config.max_pending_per_address}); try again once they are answered.",
            )
            return
        if self._openings.total >= _OPENING_PER_SESSION * self.config.max_sessions:
            self._openings.evict()
        claimed: SessionState | None = None
        consumed = False  # whether a claimed state went to a session that answered
        opening = self._openings.add(address)
        try:
            try:
                opened = None
                with opening.scope:
                    opened = await self._opening(websocket)
                if opened is None:
                    if opening.scope.cancelled_caught:  # evicted
                        await refuse(
                            websocket,
                            "server_full",
                            "Too many connections are opening; this one, the oldest of the "
                            "address with the most, was closed to make room. Try again.",
                        )
                    return
                offer, claimed = opened
            finally:
                self._openings.remove(opening)
            # Admission: the checks and the count with no await between them (atomic on one
            # loop).
            if not self._admitting:
                await refuse(websocket, "shutting_down")
                return
            if self._admitted >= self.config.max_sessions:
                await refuse(
                    websocket,
                    "server_full",
                    f"The server is at its limit of {self.config.max_sessions} sessions; "
                    "try again later.",
                )
                return
            if self._busy >= _ADMITTED_PER_SESSION * self.config.max_sessions:
                # Ending sessions freed their live slots but still hold their peers and
                # "finish" tools: bounded, so clients that leave mid-tool cannot pile them up.
                await refuse(
                    websocket,
                    "server_full",
                    f"The server is still closing {self._busy - self._admitted} earlier "
                    "sessions; try again in a few seconds.",
                )
                return
            release = self._take_slot()
            self._busy += 1
            if self._busy == 1:
                self._idle = anyio.Event()  # the old one stays set for whoever saw it
            try:
                consumed = await self._admitted_session(websocket, offer, claimed, release)
            finally:
                release()
                if claimed is not None and not consumed:
                    await self._put_back(claimed)
                    claimed = None
                self._busy -= 1
                if not self._busy:
                    self._idle.set()
        finally:
            if claimed is not None and not consumed:  # refused after the claim
                await self._put_back(claimed)

    async def _opening(
        self, websocket: ServerConnection
    ) -> tuple[RTCSessionDescription, SessionState | None] | None:
        """Read the opening and claim a resumed state: the offer and the claimed state, or
        None once the connection was refused or closed."""
        opening = await read_opening(
            websocket,
            self.config.offer_timeout,
            first_message_timeout=self.config.first_message_timeout,
        )
        if opening is None:
            return None
        offer_message, resume = opening
        from llmrtc.rtc.peer import description_from_dict

        try:
            offer = description_from_dict(
                {"type": "offer", "sdp": offer_message.sdp}, require_audio=True
            )
        except ValueError as exc:
            await refuse(websocket, "bad_offer", f"the offer cannot be used: {exc}")
            return None
        # Refused during the shutdown grace before any take-over: a refused resume must not
        # end the live session it names.
        if not self._admitting:
            await refuse(websocket, "shutting_down")
            return None
        claimed: SessionState | None = None
        if resume is not None:
            claimed = await _resume.claim(
                self.store, resume, sessions=self._sessions, wait=self.config.resume_wait
            )
            if claimed is None:
                await refuse(websocket, "resume_refused")
                return None
        return offer, claimed

    def _take_slot(self) -> Callable[[], None]:
        """Count one live session; the returned callable frees its slot (once)."""
        self._admitted += 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self._admitted -= 1

        return release

    async def _put_back(self, claimed: SessionState) -> None:
        """Save a claimed state again, as it was (same token): its resume never delivered an
        answer, so the client may try again with the token it has."""
        with anyio.CancelScope(shield=True):
            try:
                await self.store.save(claimed, ttl=self.config.resume_ttl)
            except Exception:
                logger.exception("session %s: its state could not be put back", claimed.session_id)

    async def _admitted_session(
        self,
        websocket: ServerConnection,
        offer: RTCSessionDescription,
        claimed: SessionState | None,
        release: Callable[[], None],
    ) -> bool:
        """Run the admitted session; whether `claimed` was used up (its session answered, or
        the handler refused the state for good) rather than to be put back."""
        assert self._speech is not None
        try:
            handler = await make_handler(self._factory, claimed)
        except RestoreError as exc:
            # The state is unusable: putting it back would fail every retry the same way.
            logger.warning("session %s: its saved state was not restored: %s", exc.session_id, exc)
            await refuse(websocket, "resume_refused", "The saved session could not be restored.")
            return True
        session_id, token = _new_credentials()
        relay: ToolEventRelay | None = None
        approvals: ClientApprovals | None = None
        if claimed is not None:
            session_id = claimed.session_id  # same session, new (single-use) token
            relay = self._relays.pop(session_id, (None, None))[0]
            approvals = self._approvals.pop(session_id, None)
        session = Session(
            websocket=websocket,
            handler=handler,
            speech=self._speech,
            config=self.config,
            hooks=self.hooks,
            store=self.store,
            session_id=session_id,
            token=token,
            resumed=claimed is not None,
            on_end=release,
            # The background calls this resume adopted report to the relay of the
            # connection they were started on: it now sends to this one.
            relay=relay,
            # Likewise the approvals they may ask for (sent to this client from now on).
            approvals=approvals,
        )

        self._sessions.add(session)
        started = time.monotonic()
        try:
            await self._serve_session(session, offer, started)
        finally:
            # Saved (or to be put back): resumable, its calls run on until the TTL; else (or
            # when the server is leaving) they stop now.
            resumable = session.end_reason != "end" if session.started else claimed is not None
            kept = (session.relay, session.approvals)
            if not (resumable and self._wait_for_resume(handler, session_id, *kept)):
                with anyio.CancelScope(shield=True):
                    await _close_handler(handler, session_id)
        return session.started

    def _wait_for_resume(
        self,
        handler: object,
        session_id: str,
        relay: ToolEventRelay,
        approvals: ClientApprovals | None = None,
    ) -> bool:
        """Keep `handler` (its background calls running) until `resume_ttl` passes, then close
        it; False when the server is leaving (close it now)."""
        if self._stack is None or not callable(getattr(handler, "aclose", None)):
            return False  # leaving, or nothing to close
        # A resume in this process takes the relay its adopted calls report to.
        # The relay goes from connection to connection: only this wait's entry is its to drop.
        wait = object()
        self._relays[session_id] = (relay, wait)
        if approvals is not None:
            self._approvals[session_id] = approvals
        else:
            self._approvals.pop(session_id, None)
        task = asyncio.get_running_loop().create_task(self._close_later(handler, session_id, wait))
        self._waits.add(task)
        task.add_done_callback(self._waits.discard)
        return True

    async def _close_later(self, handler: object, session_id: str, wait: object) -> None:
        try:
            await anyio.sleep(self.config.resume_ttl)
        finally:  # the TTL passed, or the server is leaving
            if self._relays.get(session_id, (None, None))[1] is wait:  # not taken by a resume
                del self._relays[session_id]
                self._approvals.pop(session_id, None)
            with anyio.CancelScope(shield=True):
                await _close_handler(handler, session_id)

    async def _end_waits(self) -> None:
        """Stop every wait for a resume now: each closes its handler (the server is leaving)."""
        waits = list(self._waits)
        for task in waits:
            task.cancel()
        if waits:
            await asyncio.wait(waits)

    async def _serve_session(
        self, session: Session, offer: RTCSessionDescription, started: float
    ) -> None:
        session_id = session.session_id
        try:
            await emit(
                self._session_hooks[SessionStartEvent],
                SessionStartEvent(session_id=session_id, transport="webrtc"),
            )
            await session.run(offer)
        finally:
            self._sessions.discard(session)
            with anyio.CancelScope(shield=True):
                await emit(
                    self._session_hooks[SessionEndEvent],
                    SessionEndEvent(
                        session_id=session_id,
                        duration_s=time.monotonic() - started,
                        reason=session.end_reason,
                    ),
                )


async def _close_handler(handler: object, session_id: str) -> None:
    """`await handler.aclose()` when it has one (it stops the handler's background calls), in
    bounded time; a failure is logged."""
    close = getattr(handler, "aclose", None)
    if not callable(close):
        return
    try:
        with anyio.move_on_after(_HANDLER_CLOSE_TIMEOUT) as scope:
            await close()
        if scope.cancelled_caught:
            logger.warning("session %s: its handler did not close in time", session_id)
    except Exception:
        logger.exception("session %s: its handler did not close", session_id)


class _Opening:
    """One connection that has no session yet."""

    __slots__ = ("address", "scope")

    def __init__(self, address: str) -> None:
        self.address = address
        self.scope = anyio.CancelScope()  # cancelled when evicted


class _Openings:
    """Connections that have no session yet, oldest first, in all and per client address."""

    def __init__(self) -> None:
        self._by_address: dict[str, list[_Opening]] = {}
        self.total = 0

    def of(self, address: str) -> int:
        return len(self._by_address.get(address, ()))

    def add(self, address: str) -> _Opening:
        opening = _Opening(address)
        self._by_address.setdefault(address, []).append(opening)
        self.total += 1
        return opening

    def remove(self, opening: _Opening) -> None:
        """Forget `opening` (again is nothing)."""
        held = self._by_address.get(opening.address)
        if held is None or opening not in held:
            return
        held.remove(opening)
        self.total -= 1
        if not held:
            del self._by_address[opening.address]

    def evict(self) -> None:
        """Stop the oldest opening of the address that has the most (the oldest such one on a
        tie): it is refused with `server_full` by its own task."""
        if not self._by_address:
            return
        order = {id(o): n for n, o in enumerate(o for h in self._by_address.values() for o in h)}
        busiest = max(self._by_address.values(), key=lambda held: (len(held), -order[id(held[0])]))
        victim = busiest[0]
        victim.scope.cancel()
        self.remove(victim)


def client_key(peer: object) -> str:
    """Who a connection counts as for the per-address limit: its IPv4 address (an
    IPv4-mapped IPv6 one, `::ffff:a.b.c.d`, included), or the /64 network of an IPv6 address
    (one host commonly holds a whole /64); anything else as text.

    Args:
        peer: The socket's remote address, as `websocket.remote_address` gives it.
    """
    host = peer[0] if isinstance(peer, tuple) and peer else peer
    text = str(host or "")
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])  # a scope id is no part of it
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
