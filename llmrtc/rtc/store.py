"""Where a disconnected session waits to be resumed: `SessionStore`, in memory or in SQLite.

A session's state is saved when its client goes away (and may be saved after each turn); a
client that comes back with `resume {session_id, token}` *claims* it: the token is checked and
the entry removed in one step, so two connections can never take the same session. A store
keeps only a hash of the token.

    session_id, token = new_session_credentials()          # token goes to the client only
    state = SessionState(session_id=session_id, token_hash=hash_token(token),
                         history=history.to_dict(), playbook=engine.snapshot())
    await store.save(state, ttl=120.0)
    ...
    state = await store.claim(session_id, token_from_client)   # None: resume_refused

`InMemorySessionStore` serves one process; `SQLiteSessionStore` is shared by the worker
processes of one machine (`llmrtc serve --workers N`).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

import anyio
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "InMemorySessionStore",
    "SQLiteSessionStore",
    "SessionCredentials",
    "SessionState",
    "SessionStore",
    "hash_token",
    "new_session_credentials",
]


class SessionCredentials(NamedTuple):
    """A new session's public id and its secret resume token (unpacks as a pair)."""

    session_id: str
    """Names the session in `session` and `resume` messages (not a secret)."""
    token: str
    """The resume secret: sent to the client once, stored only as `hash_token(token)`."""


def new_session_credentials() -> SessionCredentials:
    """A fresh session id (128 random bits) and resume token (256 random bits), URL-safe."""
    return SessionCredentials(secrets.token_urlsafe(16), secrets.token_urlsafe(32))


def hash_token(token: str) -> str:
    """The hex SHA-256 of a resume token: what a store keeps instead of the token.

    A plain hash is enough (no salt, no slow KDF): tokens are 256 random bits, not passwords,
    so there is nothing to guess from a leaked hash.
    """
    return hashlib.sha256(token.encode()).hexdigest()


class SessionState(BaseModel):
    """What a session needs to resume on a new connection (JSON-safe, for any store)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    session_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")
    """The session's id (URL-safe characters, as `new_session_credentials` makes them)."""
    token_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    """`hash_token(token)` of the current resume token; the token itself is never stored."""
    history: dict[str, Any] | None = None
    """`ConversationHistory.to_dict()`; None for a session without one."""
    playbook: dict[str, Any] | None = None
    """`PlaybookEngine.snapshot()` when the agent runs a playbook, else None."""
    background: dict[str, Any] | None = None
    """The background tool calls that were running and the late results not in the history
    yet (`LateResults.snapshot()`); None without any. A resume in the same process keeps the
    calls; elsewhere each is an `aborted` late result."""
    created_at: float = Field(default_factory=time.time)
    """When the session started (Unix time)."""
    updated_at: float = Field(default_factory=time.time)
    """When this state was taken (Unix time)."""

    @model_validator(mode="before")
    @classmethod
    def _drop_legacy_fields(cls, data: Any) -> Any:
        # Rows saved by an older server (up to `resume_ttl` old) may carry the retired
        # `previous_token_hash`: they still load, resumable with their current token only.
        if isinstance(data, dict) and "previous_token_hash" in data:
            data = {key: value for key, value in data.items() if key != "previous_token_hash"}
        return data

    def token_matches(self, token: str) -> bool:
        """True when `token` is this session's resume token (compared in constant time)."""
        return hmac.compare_digest(hash_token(token), self.token_hash)


@runtime_checkable
class SessionStore(Protocol):
    """Keeps resumable sessions for a while. Implementations must make `claim` atomic: of two
    concurrent claims with the right token, exactly one gets the state."""

    async def save(self, state: SessionState, *, ttl: float) -> None:
        """Store `state` under `state.session_id` (replacing any entry) for `ttl` seconds."""
        ...

    async def load(self, session_id: str) -> SessionState | None:
        """The stored state, or None if there is none or it expired. Does not remove it."""
        ...

    async def claim(self, session_id: str, token: str) -> SessionState | None:
        """Check `token` and remove the entry in one step; None if missing, expired or the
        token is wrong (a wrong token leaves the entry for its rightful owner)."""
        ...

    async def delete(self, session_id: str) -> None:
        """Forget a session (no error if it is not there)."""
        ...


class InMemorySessionStore:
    """A `SessionStore` in this process's memory, bounded in size.

    Entries expire by the monotonic clock (wall-clock jumps do not extend or cut them) and are
    purged lazily: an expired entry is dropped when it is looked up, and saves drop expired
    entries at the front of the queue. When `max_sessions` entries are stored, a save evicts the
    entry closest to expiry. Every operation runs under a lock with no await inside, so it is
    atomic for tasks and for threads alike. One process only: with several worker processes, a
    reconnecting client may reach another worker; share a `SQLiteSessionStore` between them.

    Example:
        store = InMemorySessionStore(max_sessions=1000)
        await store.save(state, ttl=120.0)
    """

    def __init__(
        self, *, max_sessions: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Create an empty store.

        Args:
            max_sessions: Most entries kept at once (at least 1).
            clock: Seconds from a monotonic clock (a fake one in tests).
        """
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be an int >= 1, got {max_sessions!r}")
        self.max_sessions = max_sessions
        self._clock = clock
        self._lock = threading.Lock()
        # session_id -> (expires_at, state), in save order: with one TTL (the server's
        # resume_ttl) that is expiry order, so purging from the front stops at the first live one.
        self._entries: OrderedDict[str, tuple[float, SessionState]] = OrderedDict()

    def __len__(self) -> int:
        """How many entries are held, expired ones not yet purged included."""
        return len(self._entries)

    async def save(self, state: SessionState, *, ttl: float) -> None:
        """Store `state` for `ttl` seconds, replacing an entry with the same id.

        Raises:
            ValueError: `ttl` is not a finite number of seconds > 0.
        """
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
            raise ValueError(f"ttl must be a finite number of seconds > 0, got {ttl!r}")
        with self._lock:
            now = self._clock()
            self._entries.pop(state.session_id, None)
            self._purge_front(now)
            if len(self._entries) >= self.max_sessions:
                self._purge_all(now)
            while len(self._entries) >= self.max_sessions:
                soonest = min(self._entries, key=lambda key: self._entries[key][0])
                del self._entries[soonest]
            self._entries[state.session_id] = (now + ttl, state)

    async def load(self, session_id: str) -> SessionState | None:
        """The stored state, or None (missing or expired)."""
        with self._lock:
            return self._live(session_id, self._clock())

    async def claim(self, session_id: str, token: str) -> SessionState | None:
        """Take the state if `token` is right: it is removed, so a second claim gets None."""
        with self._lock:
            state = self._live(session_id, self._clock())
            if state is None or not state.token_matches(token):
                return None
            del self._entries[session_id]
            return state

    async def delete(self, session_id: str) -> None:
        """Forget a session (no error if it is not there)."""
        with self._lock:
            self._entries.pop(session_id, None)

    def _live(self, session_id: str, now: float) -> SessionState | None:
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._entries[session_id]
            return None
        return entry[1]

    def _purge_front(self, now: float) -> None:
        while self._entries:
            first = next(iter(self._entries))
            if self._entries[first][0] > now:
                return
            del self._entries[first]

    def _purge_all(self, now: float) -> None:
        for session_id in [key for key, (expires, _) in self._entries.items() if expires <= now]:
            del self._entries[session_id]

    def __repr__(self) -> str:
        return f"InMemorySessionStore({len(self)} entries, max_sessions={self.max_sessions})"


_T = TypeVar("_T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    expires_at REAL NOT NULL,
    state TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_expiry ON sessions (expires_at);
"""


_BUSY_TIMEOUT = 30.0
"""Seconds an SQLite call waits for another process's lock before `database is locked`."""
_OPEN_RETRY = 0.02
"""Seconds between attempts to prepare a file another process is preparing too."""


def _prepare(db: sqlite3.Connection) -> None:
    """Switch the file to WAL and create the table, retrying while another process does the
    same: workers starting together open a new file at once, and switching the journal mode
    takes a lock SQLite's busy handler does not wait for (`database is locked` at once)."""
    deadline = time.monotonic() + _BUSY_TIMEOUT
    while True:
        try:
            (mode,) = db.execute("PRAGMA journal_mode").fetchone()
            if str(mode).lower() != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            return
        except sqlite3.OperationalError as exc:
            text = str(exc).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() > deadline:
                raise
            time.sleep(_OPEN_RETRY)


class SQLiteSessionStore:
    """A `SessionStore` in an SQLite file, shared by the worker processes of one machine.

    `llmrtc serve --workers N` runs N processes on one port; the kernel hands a reconnecting
    client to any of them, so the session it left must be readable from all. Claims run in
    an `IMMEDIATE` transaction (SQLite's write lock), so of concurrent claims from any number
    of processes exactly one gets the state. Expiry uses the wall clock (a monotonic clock is
    not comparable across reboots, and the file may outlive one); expired rows are purged by
    saves. Blocking SQLite calls run in worker threads, one at a time per store (a
    store may be used from several event loops, one per thread).

    Example:
        store = SQLiteSessionStore(Path(run_dir) / "sessions.sqlite3")
        await store.save(state, ttl=120.0)
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_sessions: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Open (or create) the store's file; its folder must exist.

        Args:
            path: The SQLite file, the same for every process that shares the sessions.
            max_sessions: Most entries kept at once (at least 1).
            clock: Unix seconds (a fake one in tests).

        Raises:
            ValueError: `max_sessions` is not an int >= 1.
            sqlite3.Error: the file cannot be opened or is not an SQLite database.
        """
        if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
            raise ValueError(f"max_sessions must be an int >= 1, got {max_sessions!r}")
        self.path = os.fspath(path)
        self.max_sessions = max_sessions
        self._clock = clock
        self._lock = threading.Lock()
        # isolation_level=None: transactions are begun explicitly (BEGIN IMMEDIATE takes the
        # write lock up front, so a claim's check and delete cannot interleave with another's).
        self._db = sqlite3.connect(
            self.path, timeout=_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
        )
        try:
            _prepare(self._db)
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        """Close the file (the store cannot be used after)."""
        with self._lock:
            self._db.close()

    async def save(self, state: SessionState, *, ttl: float) -> None:
        """Store `state` for `ttl` seconds, replacing an entry with the same id.

        Raises:
            ValueError: `ttl` is not a finite number of seconds > 0.
        """
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
            raise ValueError(f"ttl must be a finite number of seconds > 0, got {ttl!r}")
        row = (state.session_id, state.token_hash, state.model_dump_json())

        def save(db: sqlite3.Connection) -> None:
            now = self._clock()
            db.execute(
                "DELETE FROM sessions WHERE expires_at <= ? OR session_id = ?", (now, row[0])
            )
            (count,) = db.execute("SELECT count(*) FROM sessions").fetchone()
            if count >= self.max_sessions:  # evict what would expire soonest
                db.execute(
                    "DELETE FROM sessions WHERE session_id IN (SELECT session_id FROM sessions "
                    "ORDER BY expires_at LIMIT ?)",
                    (count - self.max_sessions + 1,),
                )
            db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)", (*row[:2], now + ttl, row[2]))

        await self._run(save)

    async def load(self, session_id: str) -> SessionState | None:
        """The stored state, or None (missing or expired)."""

        def load(db: sqlite3.Connection) -> str | None:
            found = db.execute(
                "SELECT state FROM sessions WHERE session_id = ? AND expires_at > ?",
                (session_id, self._clock()),
            ).fetchone()
            return None if found is None else str(found[0])

        text = await self._run(load)
        return None if text is None else SessionState.model_validate_json(text)

    async def claim(self, session_id: str, token: str) -> SessionState | None:
        """Take the state if `token` is right: it is removed, so a second claim gets None."""
        wanted = hash_token(token)

        def claim(db: sqlite3.Connection) -> str | None:
            found = db.execute(
                "SELECT token_hash, state FROM sessions WHERE session_id = ? AND expires_at > ?",
                (session_id, self._clock()),
            ).fetchone()
            if found is None or not hmac.compare_digest(str(found[0]), wanted):
                return None
            db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
            return str(found[1])

        text = await self._run(claim)
        return None if text is None else SessionState.model_validate_json(text)

    async def delete(self, session_id: str) -> None:
        """Forget a session (no error if it is not there)."""
        await self._run(
            lambda db: db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
        )

    async def _run(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        def transaction() -> _T:
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    result = work(self._db)
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
                return result

        return await anyio.to_thread.run_sync(transaction)

    def __repr__(self) -> str:
        return f"SQLiteSessionStore({self.path!r}, max_sessions={self.max_sessions})"
