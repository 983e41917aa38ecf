"""The aiortc peer connection: creation (with the loopback ICE option), SDP offer/answer and
trickle ICE candidates as JSON-able dicts, and waiting for the connection.

A server and a test client use the same few calls:

    pc = create_peer(loopback=True)               # no STUN, 127.0.0.1 among host candidates
    answer = await accept_offer(pc, description_from_dict(message))   # ValueError if bad
    send({"type": "answer", "sdp": answer.sdp})
    await add_candidate(pc, message["candidate"])  # browser shape; None: end of candidates
    await wait_connected(pc, timeout=10.0)          # PeerConnectionError names the ICE state

Loopback: aiortc's default ICE server is a public STUN host, unreachable on an offline or
loopback-only machine, and aioice never offers 127.0.0.1 as a host candidate. With either
left as is, a peer connection on such a host stays in state ``new`` forever, with no error.
`create_peer(loopback=True)` fixes both: an empty ICE server list, and 127.0.0.1 added to the
host addresses aioice gathers (`loopback_candidates`). aiortc puts every local candidate in
the SDP it creates (it gathers completely in `setLocalDescription`), so a local description
needs no trickling; remote candidates may trickle in (`add_candidate`).
"""

from __future__ import annotations

import contextvars
import ipaddress
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import aioice.ice
import anyio
from aiortc import (
    InvalidStateError,
    RTCConfiguration,
    RTCIceCandidate,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.sdp import SessionDescription, candidate_from_sdp, candidate_to_sdp

__all__ = [
    "LOOPBACK_ADDRESS",
    "PeerConnectionError",
    "accept_answer",
    "accept_offer",
    "add_candidate",
    "candidate_from_dict",
    "candidate_to_dict",
    "check_sdp",
    "create_offer",
    "create_peer",
    "description_from_dict",
    "description_to_dict",
    "is_loopback",
    "is_loopback_host",
    "loopback_candidates",
    "wait_connected",
]

logger = logging.getLogger(__name__)

LOOPBACK_ADDRESS = "127.0.0.1"
"""The host candidate address `loopback_candidates` adds."""

_CANDIDATE_TYPES = frozenset({"host", "srflx", "prflx", "relay"})
_DESCRIPTION_TYPES = ("offer", "answer", "pranswer")


# Loopback host candidates ----------------------------------------------------------------------

_with_loopback: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "llmrtc_rtc_loopback_candidates", default=False
)
_patch_lock = threading.Lock()
_patch_users = 0
_original: Callable[..., list[str]] | None = None


def _host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    """aioice's `get_host_addresses`, plus 127.0.0.1 inside `loopback_candidates()`."""
    assert _original is not None
    addresses = _original(use_ipv4=use_ipv4, use_ipv6=use_ipv6)
    if _with_loopback.get() and use_ipv4 and LOOPBACK_ADDRESS not in addresses:
        addresses = [*addresses, LOOPBACK_ADDRESS]
    return addresses


@contextmanager
def loopback_candidates() -> Iterator[None]:
    """Within this block (this task and the tasks it starts), aioice gathers 127.0.0.1 as a
    host candidate too.

    aioice reads its host addresses from the module function `aioice.ice.get_host_addresses`,
    which skips 127.0.0.1 and offers no option to keep it. While at least one block is open
    anywhere in the process, that function is replaced by a wrapper (installed and restored
    under a lock, counted, so nested and concurrent blocks are safe); the wrapper adds the
    address only when a context variable set by the block is true. Peer connections gathering
    at the same time in other tasks, outside any block, get aioice's usual addresses.

    Peers from `create_peer(loopback=True)` open this block around their own gathering
    (`setLocalDescription`); use it directly only for a connection you build yourself.

    Example:
        with loopback_candidates():
            await pc.setLocalDescription(await pc.createOffer())
    """
    global _patch_users, _original
    with _patch_lock:
        if _patch_users == 0:
            _original = aioice.ice.get_host_addresses
            aioice.ice.get_host_addresses = _host_addresses
        _patch_users += 1
    token = _with_loopback.set(True)
    try:
        yield
    finally:
        _with_loopback.reset(token)
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                # Restore only our own wrapper: someone who patched after us keeps theirs.
                if aioice.ice.get_host_addresses is _host_addresses:
                    assert _original is not None
                    aioice.ice.get_host_addresses = _original
                _original = None


class _LoopbackPeerConnection(RTCPeerConnection):
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
    return RTCPeerConnection()


def is_loopback_host(host: str) -> bool:
    """Whether `host` (a name or address, as in a URL or `--host`) means this machine's
    loopback interface: ``localhost``, 127.0.0.0/8 or ``::1``. A server bound there, or a
    client of such a URL, needs `create_peer(loopback=True)`."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_loopback(pc: RTCPeerConnection) -> bool:
    """Whether `pc` was made by `create_peer(loopback=True)`."""
    return isinstance(pc, _LoopbackPeerConnection)


# Session descriptions --------------------------------------------------------------------------


def description_to_dict(description: RTCSessionDescription) -> dict[str, str]:
    """`{"type": ..., "sdp": ...}`, the shape of a browser's `RTCSessionDescription` JSON."""
    return {"type": description.type, "sdp": description.sdp}


def description_from_dict(
    data: Mapping[str, Any], *, expect: str | None = None
) -> RTCSessionDescription:
    """A session description from `{"type": "offer"|"answer"|"pranswer", "sdp": str}`.

    The SDP is checked here, because aiortc takes almost any text as a description with no
    media (answering it with nothing): it must be SDP (starting with ``v=0``), parse, and
    describe at least one media section.

    Args:
        data: The JSON object.
        expect: The type required (e.g. "offer"); `data` may then omit `type`.

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
    check_sdp(sdp)
    assert isinstance(sdp, str)
    return RTCSessionDescription(sdp=sdp, type=kind)


def check_sdp(sdp: object) -> None:
    """Raise ValueError unless `sdp` is SDP text aiortc parses, with at least one m= section."""
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
    await pc.setLocalDescription(await pc.createAnswer())
    return _local(pc)


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


# ICE candidates --------------------------------------------------------------------------------


def candidate_to_dict(candidate: RTCIceCandidate) -> dict[str, Any]:
    """The browser's `RTCIceCandidateInit` JSON: `{candidate, sdpMid, sdpMLineIndex}`, the
    candidate line with its ``candidate:`` prefix."""
    return {
        "candidate": f"candidate:{candidate_to_sdp(candidate)}",
        "sdpMid": candidate.sdpMid,
        "sdpMLineIndex": candidate.sdpMLineIndex,
    }


def candidate_from_dict(data: Mapping[str, Any] | None) -> RTCIceCandidate | None:
    """An aiortc candidate from the browser's `{candidate, sdpMid, sdpMLineIndex}` JSON.

    `None`, or an empty `candidate` string (what a browser sends when gathering ends), means
    end of candidates and returns None. Extra fields (`usernameFragment`) are ignored.

    Raises:
        ValueError: not an object, no `sdpMid` or `sdpMLineIndex`, or a candidate line that is
            not ``candidate:<foundation> <component> <udp|tcp> <priority> <address> <port>
            typ <host|srflx|prflx|relay> ...`` (the message says which part is wrong).
    """
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ValueError(f"an ICE candidate is an object, got {type(data).__name__}")
    line = data.get("candidate")
    if not isinstance(line, str):
        raise ValueError(f"ICE candidate: 'candidate' must be a string, got {_short(line)}")
    mid = data.get("sdpMid")
    index = data.get("sdpMLineIndex")
    if mid is not None and not isinstance(mid, str):
        raise ValueError(f"ICE candidate: sdpMid must be a string or null, got {mid!r}")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        raise ValueError(f"ICE candidate: sdpMLineIndex must be an int >= 0 or null, got {index!r}")
    line = line.strip()
    if not line:
        return None
    if mid is None and index is None:
        raise ValueError("ICE candidate: needs sdpMid or sdpMLineIndex to name its media")
    candidate = _parse_candidate(line.removeprefix("a=").removeprefix("candidate:"))
    candidate.sdpMid = mid
    candidate.sdpMLineIndex = index
    return candidate


def _parse_candidate(line: str) -> RTCIceCandidate:
    bits = line.split()
    where = f"ICE candidate {_short(line)}"
    if len(bits) < 8 or bits[6] != "typ":
        raise ValueError(
            f"{where}: expected '<foundation> <component> <protocol> <priority> <address> "
            "<port> typ <type> ...'"
        )
    try:
        candidate = candidate_from_sdp(line)
    except Exception as exc:
        raise ValueError(f"{where}: {_why(exc)}") from exc
    if not 1 <= candidate.component <= 256:
        raise ValueError(f"{where}: component must be 1-256, got {candidate.component}")
    if not 0 <= candidate.port <= 65535:
        raise ValueError(f"{where}: port must be 0-65535, got {candidate.port}")
    if candidate.protocol.lower() not in ("udp", "tcp"):
        raise ValueError(f"{where}: protocol must be udp or tcp, got {candidate.protocol!r}")
    if candidate.type not in _CANDIDATE_TYPES:
        allowed = ", ".join(sorted(_CANDIDATE_TYPES))
        raise ValueError(f"{where}: type must be one of {allowed}, got {candidate.type!r}")
    return candidate


async def add_candidate(pc: RTCPeerConnection, data: Mapping[str, Any] | None) -> None:
    """Add a trickled remote candidate (browser JSON; None or empty: end of candidates).

    Raises:
        ValueError: a malformed candidate (see `candidate_from_dict`), or one aiortc refuses.
    """
    candidate = candidate_from_dict(data)
    try:
        await pc.addIceCandidate(candidate)
    except Exception as exc:
        raise ValueError(f"ICE candidate refused: {_why(exc)}") from exc


# Connection ------------------------------------------------------------------------------------


class PeerConnectionError(RuntimeError):
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
    if pc.iceConnectionState in ("new", "checking"):
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


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
