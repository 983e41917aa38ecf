"""How `RTCServer` turns a `resume` into claimed state: end this process's live connection of
the session (take-over), then claim the saved state, waiting briefly for a save in flight.

With `llmrtc serve --workers N` the workers share one `SQLiteSessionStore` and the kernel picks
the worker for each connection, so a reconnect may land on a worker where the session is not
live while the old worker is still ending it and saving its state. A resume therefore waits up
to `ServerConfig.resume_wait` seconds for the state to appear before `resume_refused`. A wrong
token cannot be told from "not saved yet", and a refusal must not tell which session ids are
live, so *every* refusal comes after that same wait, whether the id is live here, saved, or
unknown (docs/protocol.md). The wait holds no live slot: the server counts it among the
connections that have no session yet.

The claim removes the saved state, so the token claimed with is void from then on; the
server puts the state back (with that token) if the new session never delivers its answer.

Known limit: the take-over works within one process only. A session whose old connection still
looks alive to another worker (half-open TCP) is not ended by a resume here; that resume is
refused after the wait, and the old connection ends by itself (ICE failure or idle timeout),
after which a later resume succeeds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import anyio

if TYPE_CHECKING:
    from collections.abc import Iterable

    from llmrtc.rtc.protocol import ResumeMessage
    from llmrtc.rtc.session import Session
    from llmrtc.rtc.store import SessionState, SessionStore

RESUME_POLL: Final = 0.1
"""How often the store is asked again while a resume waits."""
TAKE_OVER_TIMEOUT: Final = 40.0
"""How long a take-over waits for the replaced session to end and save."""


async def take_over(sessions: Iterable[Session], resume: ResumeMessage) -> None:
    """End this process's live connection of the resumed session, if any, so its state is
    saved and can be claimed.

    Only a session whose *current* token is the resume's is ended: a wrong (or already used)
    token leaves the live session alone.

    Args:
        sessions: The sessions live in this process.
        resume: The client's `resume` message.
    """
    for session in list(sessions):
        if session.session_id == resume.session_id and session.token_matches(resume.token):
            session.end("replaced")
            with anyio.move_on_after(TAKE_OVER_TIMEOUT):
                await session.finished.wait()
            return


async def claim(
    store: SessionStore,
    resume: ResumeMessage,
    *,
    sessions: Iterable[Session],
    wait: float,
) -> SessionState | None:
    """Take over the session if it is live here, then claim its saved state, asking the store
    again every `RESUME_POLL` seconds; a refusal (None) returns only once `wait` seconds have
    passed since the call, whatever the reason.

    Args:
        store: The session store shared by the workers.
        resume: The client's `resume` message.
        sessions: The sessions live in this process.
        wait: `ServerConfig.resume_wait`.

    Returns:
        The claimed state (now removed from the store), or None: unknown, expired, already
        taken, live elsewhere, or a wrong token.
    """
    deadline = anyio.current_time() + wait
    await take_over(sessions, resume)
    while True:
        # Shielded: a claim that went through must reach the caller (to be used or put
        # back), even when the wait is cancelled meanwhile (an evicted connection).
        with anyio.CancelScope(shield=True):
            claimed = await store.claim(resume.session_id, resume.token)
        if claimed is not None:
            return claimed
        left = deadline - anyio.current_time()
        if left <= 0:
            return None
        await anyio.sleep(min(RESUME_POLL, left))
