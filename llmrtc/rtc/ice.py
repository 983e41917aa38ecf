"""ICE for llmrtc peers: 127.0.0.1 as a host candidate (`loopback_candidates`,
`is_loopback_host`), and trickled candidates to and from the browser's JSON shape.

aiortc's default ICE server is a public STUN host, unreachable on an offline or loopback-only
machine, and aioice never offers 127.0.0.1 as a host candidate: with either left as is, a peer
connection on such a host stays in state ``new`` forever, with no error.
`llmrtc.rtc.peer.create_peer(loopback=True)` fixes both, with `loopback_candidates` for the
second.
"""

from __future__ import annotations

import contextvars
import ipaddress
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import aioice.ice
from aiortc import RTCIceCandidate
from aiortc.sdp import candidate_from_sdp, candidate_to_sdp

__all__ = [
    "LOOPBACK_ADDRESS",
    "candidate_from_dict",
    "candidate_to_dict",
    "is_loopback_host",
    "loopback_candidates",
]

LOOPBACK_ADDRESS = "127.0.0.1"
"""The host candidate address `loopback_candidates` adds."""
_CANDIDATE_TYPES = frozenset({"host", "srflx", "prflx", "relay"})


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

    Peers from `llmrtc.rtc.peer.create_peer(loopback=True)` open this block around their own
    gathering (`setLocalDescription`); use it directly only for a connection you build
    yourself.

    Example:
        with loopback_candidates():
            await pc.setLocalDescription(await pc.createOffer())
    """
    global _patch_users, _original
    with _patch_lock:
        if _patch_users == 0 and aioice.ice.get_host_addresses is not _host_addresses:
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
            # Restore only over our own wrapper: a patch made after ours stays (and may still
            # call ours, which keeps `_original` for it).
            if _patch_users == 0 and aioice.ice.get_host_addresses is _host_addresses:
                assert _original is not None
                aioice.ice.get_host_addresses = _original


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
    # Our own words, never the parser's: its text (`invalid literal for int()...`) would
    # reach the client.
    if not all(bit.isdigit() for bit in (bits[1], bits[3], bits[5])):
        raise ValueError(f"{where}: component, priority and port must be whole numbers")
    try:
        candidate = candidate_from_sdp(line)
    except Exception:
        raise ValueError(f"{where}: the candidate line could not be parsed") from None
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


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
