"""The test client's side of the wire: its record of server events and `wait_for` over it
(each event matched once, in order of arrival), `ping`/`pong` round trips, and the checks of
its URL and options."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, get_args
from urllib.parse import urlsplit

import anyio
from websockets.exceptions import ConnectionClosed

from llmrtc.rtc.errors import RTCError
from llmrtc.rtc.ice import is_loopback_host
from llmrtc.rtc.messages import ServerMessage

__all__ = [
    "EventLog",
    "Match",
    "Pings",
    "check_options",
    "close_code",
    "require_asyncio",
    "websocket_url",
]

Match = Callable[[dict[str, Any]], bool]
"""A predicate on an event dict, for `wait_for(where=...)`."""
_FIELDS: dict[str, frozenset[str]] = {
    model.model_fields["type"].default: frozenset(model.model_fields)
    for model in get_args(get_args(ServerMessage)[0])
}
"""Each server message type's fields."""


class EventLog:
    """Events in order of arrival; `wait_for` hands each out at most once."""

    def __init__(self) -> None:
        """An empty log, open."""
        self.events: list[dict[str, Any]] = []
        """Every event recorded, in order."""
        self.failure: BaseException | None = None
        """The error that ended the log (a malformed server message), if any."""
        self._taken: set[int] = set()
        self._changed = anyio.Event()
        self._closed: str | None = None

    def add(self, event: dict[str, Any]) -> None:
        """Record `event` and wake the waiters."""
        self.events.append(event)
        self._wake()

    def fail(self, error: BaseException) -> None:
        """Record the first error that makes the events unreliable; waiters raise it."""
        if self.failure is None:
            self.failure = error
        self._wake()

    def close(self, reason: str) -> None:
        """No more events will come (`reason` says why); waiters still unmatched fail."""
        if self._closed is None:
            self._closed = reason
        self._wake()

    @property
    def closed(self) -> bool:
        """Whether `close` was called."""
        return self._closed is not None

    def _wake(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def wait_for(
        self, kind: str, timeout: float, where: Match | None, fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The first untaken event of type `kind` with `fields` and `where`, waiting up to
        `timeout` seconds for it (see `RTCTestClient.wait_for`)."""
        _check_query(kind, fields)
        with anyio.move_on_after(timeout):
            while True:
                for index, event in enumerate(self.events):
                    if index not in self._taken and _matches(event, kind, where, fields):
                        self._taken.add(index)
                        return event
                if self.failure is not None:
                    raise self.failure
                if self._closed is not None:
                    raise RTCError(
                        "connection_closed",
                        f"{self._closed}; no {_describe(kind, where, fields)} came "
                        f"(received: {self._summary()})",
                    )
                await self._changed.wait()
        raise TimeoutError(
            f"no {_describe(kind, where, fields)} within {timeout} s (received: {self._summary()})"
        )

    def _summary(self) -> str:
        counts = Counter(event["type"] for event in self.events)
        return ", ".join(f"{kind} x{count}" for kind, count in counts.items()) or "nothing"


def _matches(
    event: dict[str, Any], kind: str, where: Match | None, fields: Mapping[str, Any]
) -> bool:
    if event["type"] != kind:
        return False
    if any(name not in event or event[name] != value for name, value in fields.items()):
        return False
    return where is None or bool(where(event))


def _describe(kind: str, where: Match | None, fields: Mapping[str, Any]) -> str:
    parts = [f"{name}={value!r}" for name, value in fields.items()]
    if where is not None:
        parts.append(f"where={getattr(where, '__name__', 'predicate')}")
    return f"{kind!r} event" + (f" with {', '.join(parts)}" if parts else "")


def _check_query(kind: str, fields: Mapping[str, Any]) -> None:
    known = _FIELDS.get(kind)
    if known is None:
        raise ValueError(
            f"wait_for: no server message has type {kind!r}; types: {', '.join(_FIELDS)}"
        )
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(
            f"wait_for: a {kind!r} message has no field {', '.join(map(repr, unknown))}; "
            f"its fields: {', '.join(sorted(known - {'type'}))}"
        )


class Pings:
    """`ping`s sent and the `pong`s that answer them, for round-trip times."""

    def __init__(self) -> None:
        """No ping sent yet."""
        self._ids = itertools.count(1)
        self._waiting: dict[str, anyio.Event] = {}
        self._answered: dict[str, float] = {}

    async def measure(self, send: Callable[[str], None], timeout: float) -> float:
        """Send a `ping` with `send` and wait for its `pong`; the round trip in seconds.

        Raises:
            TimeoutError: no `pong` within `timeout`.
            RTCError: `close` came first.
        """
        ping_id = f"p{next(self._ids)}"
        done = self._waiting[ping_id] = anyio.Event()
        started = time.perf_counter()
        try:
            send(json.dumps({"type": "ping", "id": ping_id}))
            with anyio.fail_after(timeout):
                await done.wait()
            if ping_id not in self._answered:
                raise RTCError("connection_closed", "the connection closed before the pong")
            return self._answered[ping_id] - started
        finally:
            self._waiting.pop(ping_id, None)
            self._answered.pop(ping_id, None)

    def answered(self, pong_id: str) -> bool:
        """Take a `pong`; False when it answers no ping of ours (it is then an event)."""
        done = self._waiting.get(pong_id)
        if done is None:
            return False
        self._answered[pong_id] = time.perf_counter()
        done.set()
        return True

    def close(self) -> None:
        """Release every waiting `measure` (they raise `RTCError`)."""
        for done in self._waiting.values():
            done.set()


def close_code(closed: ConnectionClosed) -> str:
    """`close code N` of a closed WebSocket, or what is known of it."""
    frame = closed.rcvd or closed.sent
    return f"close code {frame.code}" if frame is not None else "no close frame"


def websocket_url(url: str) -> tuple[str, bool]:
    """The signalling WebSocket URL (`/ws`) of a server's http(s) `url`, and whether its host
    is a loopback one (the client then uses loopback ICE, as the server does).

    Raises:
        ValueError: `url` is not an http(s) URL with a host.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"RTCTestClient needs the server's http(s) URL, got {url!r}")
    scheme = "wss" if parts.scheme == "https" else "ws"
    return f"{scheme}://{parts.netloc}/ws", is_loopback_host(parts.hostname)


def check_options(resume: object, timeout: object) -> None:
    """Refuse a `resume` that is not `(session_id, token)` and a timeout that is not > 0."""
    if resume is not None and (
        not isinstance(resume, tuple)
        or len(resume) != 2
        or not all(isinstance(part, str) and part for part in resume)
    ):
        raise ValueError(
            f"resume must be (session_id, resume_token), two non-empty strings; got {resume!r}"
        )
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")


def require_asyncio() -> None:
    """Refuse to run outside asyncio (aiortc needs it) with a message that says so."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            "RTCTestClient runs on asyncio only (aiortc does): use anyio's asyncio backend "
            "(the default of its pytest plugin), not trio"
        ) from None
