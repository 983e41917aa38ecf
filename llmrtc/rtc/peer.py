"""The aiortc peer connection: creation (with the loopback ICE option), SDP offer/answer as
JSON-able dicts, trickled remote candidates, and waiting for the connection.

A server and a test client use the same few calls:

    pc = create_peer(loopback=True)               # no STUN, 127.0.0.1 among host candidates
    answer = await accept_offer(pc, description_from_dict(message, expect="offer"))
    send({"type": "answer", "sdp": answer.sdp})    # ValueError above: a bad offer
    await add_candidate(pc, message["candidate"])  # browser shape; None: end of candidates
    await wait_connected(pc, timeout=10.0)          # PeerConnectionError names the ICE state

aiortc puts every local candidate in the SDP it creates (it gathers completely inside
`setLocalDescription`), so a local description needs no trickling; remote candidates may
trickle in (`add_candidate`). The ICE details (loopback gathering, candidate JSON) are in
`llmrtc.rtc.ice`.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from aiortc import (
    InvalidStateError,
    MediaStreamTrack,
    RTCConfiguration,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.sdp import SessionDescription

from llmrtc.errors import LLMRTCError
from llmrtc.rtc.ice import candidate_from_dict, loopback_candidates

logger = logging.getLogger(__name__)

__all__ = [
    "PeerConnectionError",
    "accept_answer",
    "accept_offer",
    "add_candidate",
    "check_sdp",
    "create_offer",
    "create_peer",
    "description_from_dict",
    "description_to_dict",
    "is_loopback",
    "remote_audio_track",
    "wait_connected",
]

_DESCRIPTION_TYPES = ("offer", "answer", "pranswer")


_AIORTC_CONNECT: Callable[[RTCPeerConnection], Awaitable[None]] | None = getattr(
    RTCPeerConnection, "_RTCPeerConnection__connect", None
)
"""aiortc's private connect coroutine (ICE, DTLS, then RTP and SCTP), which aiortc starts with a
bare `asyncio.ensure_future` from `setRemoteDescription` and `setLocalDescription` and never
awaits: an exception in it would be "Task exception was never retrieved", and the connection
would sit in "connecting" with nobody told. `_Peer` runs it under a guard instead."""


_GUARDED_SCTP: weakref.WeakSet[Any] = weakref.WeakSet()
"""The SCTP transports whose sends `_Peer._guard_sctp` already guards."""


class _Peer(RTCPeerConnection):
    """An `RTCPeerConnection` whose background connect never fails unseen, and whose `close`
    never raises (a session closes its peer in a `finally`).

    A connect failure (an aiortc bug or an input it did not expect) is logged once and turns
    `connectionState` to ``"failed"`` with a ``connectionstatechange`` event, as an ICE or
    DTLS failure does: the owner (a session, `wait_connected`) ends on it and closes the peer.
    """

    _connect_error: Exception | None = None
    _close_failed = False

    @property
    def connectionState(self) -> str:
        """aiortc's state, or ``"failed"`` once the connect task failed (until closed)."""
        state: str = super().connectionState
        if self._close_failed:
            return "closed"
        if self._connect_error is not None and state != "closed":
            return "failed"
        return state

    # Not a mangled name: it is the attribute aiortc's `self.__connect()` looks up.
    async def _RTCPeerConnection__connect(self) -> None:
        assert _AIORTC_CONNECT is not None  # else aiortc never calls this
        try:
            await _AIORTC_CONNECT(self)
        except Exception as exc:
            if self._connect_error is not None:
                return  # a later connect attempt of a peer already failed: logged once
            self._connect_error = exc
            logger.warning(
                "a peer connection failed while connecting (%s: %s); it reports 'failed'",
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
            self.emit("connectionstatechange")

    async def setRemoteDescription(self, sessionDescription: RTCSessionDescription) -> None:
        """As aiortc's; the SCTP transport it may create sends without unseen failures."""
        await super().setRemoteDescription(sessionDescription)
        self._guard_sctp()

    async def setLocalDescription(
        self, sessionDescription: RTCSessionDescription | None = None
    ) -> None:
        """As aiortc's; the SCTP transport it may create sends without unseen failures."""
        await super().setLocalDescription(sessionDescription)
        self._guard_sctp()

    def _guard_sctp(self) -> None:
        """aiortc's SCTP transport sends in fire-and-forget tasks (data-channel flushes,
        retransmission timers): once its DTLS transport is down (ICE consent lost under load,
        the other side gone) each fails with "Cannot send encrypted data, not connected" and
        is reported as "Task exception was never retrieved". Nothing can be sent then; the
        connection's own state already says it is failing or closed. So a send on a DTLS
        transport that is down is dropped, and logged once at debug level."""
        sctp = self.sctp
        if sctp is None or sctp in _GUARDED_SCTP:
            return
        _GUARDED_SCTP.add(sctp)
        send_chunk = sctp._send_chunk
        dropped = False

        async def guarded_send_chunk(chunk: Any) -> None:
            nonlocal dropped
            try:
                await send_chunk(chunk)
            except ConnectionError:
                if not dropped:
                    dropped = True
                    logger.debug("SCTP data dropped: the DTLS transport is not connected")

        sctp._send_chunk = guarded_send_chunk  # type: ignore[method-assign]

    async def close(self) -> None:
        """Close the connection, as `RTCPeerConnection.close`; an error of aiortc's while
        stopping its transports is logged, not raised (the connection counts as closed)."""
        try:
            await super().close()
        except Exception:
            logger.warning("aiortc failed while closing a peer connection", exc_info=True)
            await self._finish_close()

    async def _finish_close(self) -> None:
        """What aiortc's `close` did not get to after its error: stop every transport (their
        sockets), report "closed", drop the listeners, and let later `close` calls return
        (they wait on aiortc's closed future)."""
        for name in ("_RTCPeerConnection__dtlsTransports", "_RTCPeerConnection__iceTransports"):
            for transport in list(getattr(self, name, ())):
                try:
                    await transport.stop()
                except Exception:
                    logger.debug("stopping %r failed", transport, exc_info=True)
        self._close_failed = True
        self.emit("connectionstatechange")
        self.remove_all_listeners()
        closed = getattr(self, "_RTCPeerConnection__isClosed", None)
        if isinstance(closed, asyncio.Future) and not closed.done():
            closed.set_result(True)


class _LoopbackPeerConnection(_Peer):
    """An `RTCPeerConnection` that gathers 127.0.0.1 as a host candidate."""

    async def setLocalDescription(
        self, sessionDescription: RTCSessionDescription | None = None
    ) -> None:
        # aiortc gathers every candidate inside setLocalDescription (in tasks that inherit
        # this context), so the block covers exactly this connection's gathering.
        with loopback_candidates():
            await super().setLocalDescription(sessionDescription)


def create_peer(*, loopback: bool = False) -> RTCPeerConnection:
    """A new aiortc peer connection.

    Args:
        loopback: Make ICE work where the peers reach each other only over 127.0.0.1 with no
            STUN server (a loopback-only host, a test, a server started with
            `--host 127.0.0.1`): no ICE servers, and 127.0.0.1 offered as a host candidate
            beside the machine's other addresses. Both sides of a loopback connection need
            it (a browser needs `--allow-loopback-in-peer-connection`). Without it, aiortc's
            defaults apply (a public STUN server, no loopback candidate).

    Returns:
        The connection; close it with `await pc.close()`.
    """
    if loopback:
        return _LoopbackPeerConnection(RTCConfiguration(iceServers=[]))
    return _Peer()


def is_loopback(pc: RTCPeerConnection) -> bool:
    """Whether `pc` was made by `create_peer(loopback=True)`."""
    return isinstance(pc, _LoopbackPeerConnection)


# Session descriptions --------------------------------------------------------------------------


def description_to_dict(description: RTCSessionDescription) -> dict[str, str]:
    """`{"type": ..., "sdp": ...}`, the shape of a browser's `RTCSessionDescription` JSON."""
    return {"type": description.type, "sdp": description.sdp}


def description_from_dict(
    data: Mapping[str, Any], *, expect: str | None = None, require_audio: bool = False
) -> RTCSessionDescription:
    """A session description from `{"type": "offer"|"answer"|"pranswer", "sdp": str}`.

    The SDP is checked here, because aiortc takes almost any text as a description with no
    media (answering it with nothing): it must be SDP (starting with ``v=0``), parse, and
    describe at least one media section.

    Args:
        data: The JSON object.
        expect: The type required (e.g. "offer"); `data` may then omit `type`.
        require_audio: Refuse an SDP without an audio section (m=audio): a voice session's
            offer (`check_sdp`).

    Raises:
        ValueError: not a mapping, a missing or wrong `type`, or a missing, empty or malformed
            `sdp` (the message says which).
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"a session description is an object, got {type(data).__name__}")
    kind = data.get("type", expect)
    if kind not in _DESCRIPTION_TYPES:
        raise ValueError(
            f"session description type must be one of {', '.join(_DESCRIPTION_TYPES)}, got {kind!r}"
        )
    if expect is not None and kind != expect:
        raise ValueError(f"expected an SDP {expect}, got an SDP {kind}")
    sdp = data.get("sdp")
    check_sdp(sdp, require_audio=require_audio)
    assert isinstance(sdp, str)
    return RTCSessionDescription(sdp=sdp, type=kind)


def check_sdp(sdp: object, *, require_audio: bool = False) -> None:
    """Raise ValueError unless `sdp` is SDP text aiortc parses, with at least one m= section.

    Args:
        sdp: The SDP text.
        require_audio: Also require an audio section (m=audio), as an `RTCServer` session
            does: aiortc fails deep inside its answer to an offer without one when the answering
            side has an audio track of its own.
    """
    if not isinstance(sdp, str) or not sdp.strip():
        raise ValueError(f"sdp must be a non-empty string, got {_short(sdp)}")
    if not sdp.lstrip().startswith("v=0"):
        raise ValueError(f"malformed SDP: it must start with 'v=0', got {_short(sdp)}")
    try:
        parsed = SessionDescription.parse(sdp)
    except Exception as exc:  # aiortc's parser asserts and indexes: any error means bad text
        raise ValueError(f"malformed SDP: {_why(exc)}") from exc
    if not parsed.media:
        raise ValueError("malformed SDP: no media section (m= line)")
    if require_audio and not any(media.kind == "audio" for media in parsed.media):
        kinds = ", ".join(sorted({_clip(str(media.kind)) for media in parsed.media}))
        raise ValueError(
            f"the SDP has no audio section (m=audio), only {kinds}: a session is spoken, so "
            "offer an audio track (a microphone, or a recvonly audio transceiver)"
        )
    _check_mids(parsed)


def _check_mids(parsed: SessionDescription) -> None:
    """Refuse mids aiortc would trip on: it bundles onto the transport of the first mid of a
    BUNDLE group without checking that a media section has it (then fails inside
    `createAnswer` and in its connect and close), and it takes duplicate mids as one."""
    mids = [media.rtp.muxId for media in parsed.media]
    named = [mid for mid in mids if mid]  # a section without a=mid: aiortc handles it
    seen: set[str] = set()
    for mid in named:
        if mid in seen:
            raise ValueError(
                f"malformed SDP: two media sections have a=mid:{_clip(mid)}; each media "
                "section needs its own mid"
            )
        seen.add(mid)
    have = ", ".join(_clip(mid) for mid in named) or "none"
    for group in parsed.group:
        for item in group.items:
            if item not in seen:
                mid, semantic = _clip(str(item)), _clip(str(group.semantic))
                raise ValueError(
                    f"malformed SDP: a=group:{semantic} names mid {mid!r}, but no media "
                    f"section has a=mid:{mid} (the media mids: {have})"
                )


async def create_offer(pc: RTCPeerConnection) -> RTCSessionDescription:
    """Create an offer, set it as the local description (gathering every candidate), and
    return it with its candidates (what to send to the other side)."""
    await pc.setLocalDescription(await pc.createOffer())
    return _local(pc)


async def accept_offer(
    pc: RTCPeerConnection, offer: RTCSessionDescription
) -> RTCSessionDescription:
    """Apply the remote `offer`, create the answer, set it locally, and return it (with every
    local candidate in its SDP).

    Raises:
        ValueError: `offer` is not an offer, or its SDP is malformed or refused by aiortc
            (no ICE credentials, no RTCP mux, no common codec...). aiortc may have applied
            part of it: close the connection.
        aiortc.InvalidStateError: `pc` is closed or is not in a state to take an offer.
    """
    if offer.type != "offer":
        raise ValueError(f"expected an SDP offer, got an SDP {offer.type}")
    await _set_remote(pc, offer)
    try:
        await pc.setLocalDescription(await pc.createAnswer())
    except InvalidStateError:
        _raise_connect_error(pc)
        raise  # closed by its owner meanwhile: the caller's state, not the offer
    except Exception as exc:
        # aiortc applied the offer but cannot answer it (an input our checks let through).
        # The client's input, which any client can send at will: INFO, no traceback.
        logger.info("aiortc could not answer an offer it accepted: %s", _why(exc))
        raise ValueError(f"SDP offer cannot be answered: {_why(exc)}") from exc
    _raise_connect_error(pc)
    return _local(pc)


def _raise_connect_error(pc: RTCPeerConnection) -> None:
    error = getattr(pc, "_connect_error", None)  # set by `_Peer`'s guarded connect
    if error is not None:
        raise ValueError(f"the connection for this SDP could not start: {_why(error)}")


async def accept_answer(pc: RTCPeerConnection, answer: RTCSessionDescription) -> None:
    """Apply the remote `answer` to the offer `pc` made.

    Raises:
        ValueError: `answer` is not an answer, or its SDP is malformed or refused (close the
            connection).
        aiortc.InvalidStateError: `pc` is closed or has no offer of its own pending.
    """
    if answer.type not in ("answer", "pranswer"):
        raise ValueError(f"expected an SDP answer, got an SDP {answer.type}")
    await _set_remote(pc, answer)


async def _set_remote(pc: RTCPeerConnection, description: RTCSessionDescription) -> None:
    check_sdp(description.sdp)
    try:
        await pc.setRemoteDescription(description)
    except InvalidStateError:
        raise  # the connection is closed or not expecting this: the caller's state, not the SDP
    except Exception as exc:
        # aiortc refuses with ValueError, InvalidAccessError, InvalidStateError or a bare
        # assertion depending on what is wrong: one type for the caller to map to a code.
        raise ValueError(f"SDP {description.type} refused: {_why(exc)}") from exc


def _local(pc: RTCPeerConnection) -> RTCSessionDescription:
    description = pc.localDescription
    assert description is not None  # set just before
    return description


def remote_audio_track(pc: RTCPeerConnection) -> MediaStreamTrack | None:
    """The track of the first audio the remote side sends, once its description is applied
    (after `accept_offer` / `accept_answer`); None if it sends no audio.

    The same track the ``"track"`` event reports, for code that would rather read it after
    negotiation than register a callback before it (e.g. to start `InboundAudio` in a task
    group it owns).
    """
    for transceiver in pc.getTransceivers():
        track = transceiver.receiver.track
        if transceiver.kind == "audio" and track is not None:
            return track
    return None


async def add_candidate(pc: RTCPeerConnection, data: Mapping[str, Any] | None) -> None:
    """Add a trickled remote candidate (browser JSON; None or empty: end of candidates).

    Raises:
        ValueError: a malformed candidate (see `candidate_from_dict`), or one aiortc refuses.
    """
    candidate = candidate_from_dict(data)
    try:
        await pc.addIceCandidate(candidate)
    except Exception:
        # aiortc's text is internal (it may name its own code): log it, tell the client less.
        logger.warning("an ICE candidate was refused by aiortc", exc_info=True)
        raise ValueError(
            "ICE candidate refused: its sdpMid/sdpMLineIndex may name no media of this "
            "session; it was ignored"
        ) from None


# Connection ------------------------------------------------------------------------------------


class PeerConnectionError(LLMRTCError, RuntimeError):
    """A peer connection did not connect: it failed, closed, or timed out.

    Attributes:
        connection_state: `pc.connectionState` when it was given up on.
        ice_state: `pc.iceConnectionState` then (``new``/``checking`` on a timeout usually
            means no candidate pair works: a loopback-only host without `loopback=True`,
            an unreachable STUN server, or candidates that never arrived).
    """

    def __init__(self, message: str, *, connection_state: str, ice_state: str) -> None:
        """Record the states beside the message."""
        super().__init__(message)
        self.connection_state = connection_state
        self.ice_state = ice_state


async def wait_connected(pc: RTCPeerConnection, timeout: float) -> None:
    """Wait until `pc` is connected (ICE and DTLS done).

    Args:
        pc: The connection, after both descriptions are set.
        timeout: Seconds to wait at most.

    Raises:
        PeerConnectionError: the connection failed or closed, or did not connect within
            `timeout` (the message names its connection, ICE and ICE gathering states).
    """
    changed = anyio.Event()

    def on_change() -> None:
        changed.set()

    pc.on("connectionstatechange", on_change)
    try:
        with anyio.move_on_after(timeout):
            while True:
                state = pc.connectionState
                if state == "connected":
                    return
                if state in ("failed", "closed"):
                    raise _not_connected(pc, f"the peer connection {state}")
                await changed.wait()
                changed = anyio.Event()
        raise _not_connected(pc, f"the peer connection did not connect within {timeout} s")
    finally:
        # close() removes every listener itself; remove ours only if still registered.
        if on_change in pc.listeners("connectionstatechange"):
            pc.remove_listener("connectionstatechange", on_change)


def _not_connected(pc: RTCPeerConnection, what: str) -> PeerConnectionError:
    hint = ""
    if pc.iceConnectionState in ("new", "checking") and is_loopback(pc):
        hint = (
            " (no working candidate pair over 127.0.0.1: does the other peer use the loopback "
            "option too, and is the loopback interface up? A fresh network namespace, such as "
            "`unshare -n`, starts with lo down: `ip link set lo up`)"
        )
    elif pc.iceConnectionState in ("new", "checking"):
        hint = (
            " (no working candidate pair: on a loopback-only host both peers need "
            "loopback=True; otherwise check STUN reachability and that candidates arrive)"
        )
    return PeerConnectionError(
        f"{what}: connection state {pc.connectionState!r}, ICE connection state "
        f"{pc.iceConnectionState!r}, ICE gathering state {pc.iceGatheringState!r}{hint}",
        connection_state=pc.connectionState,
        ice_state=pc.iceConnectionState,
    )


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
