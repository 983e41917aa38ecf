"""How `RTCServer` turns a `resume` into claimed state: end this process's live connection of
the session (take-over), then claim the saved state, waiting briefly for a save in flight.

With `llmrtc serve --workers N` the workers share one `SQLiteSessionStore` and the kernel picks
the worker for each connection, so a reconnect may land on a worker where the session is not
live while the old worker is still ending it and saving its state. Such a resume waits up to
`RESUME_WAIT` seconds for the state to appear before `resume_refused`. A wrong token cannot be
told from "not saved yet", so it is refused only after the same wait (docs/protocol.md).

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

RESUME_WAIT: Final = 3.0
"""How long a resume of a session not live in this process waits for its state to be saved
(by another worker still ending it) before `resume_refused`."""
RESUME_POLL: Final = 0.1
"""How often the store is asked again during that wait."""
TAKE_OVER_TIMEOUT: Final = 40.0
"""How long a take-over waits for the replaced session to end and save."""


async def take_over(sessions: Iterable[Session], resume: ResumeMessage) -> bool:
    """End this process's live connection of the resumed session, if any, so its state is
    saved and can be claimed.

    Only a session with the resume's current token is ended: a wrong token leaves the live
    session alone.

    Args:
        sessions: The sessions live in this process.
        resume: The client's `resume` message.

    Returns:
        Whether the session named is live in this process (with any token): then its state is
        saved here or not at all, and there is nothing to wait for elsewhere.
    """
    live = False
    for session in list(sessions):
        if session.session_id != resume.session_id:
            continue
        live = True
        if session.token_matches(resume.token):
            session.end("replaced")
            with anyio.move_on_after(TAKE_OVER_TIMEOUT):
                await session.finished.wait()
            return True
    return live


async def claim(
    store: SessionStore,
    resume: ResumeMessage,
    *,
    wait: bool,
) -> SessionState | None:
    """Claim the resumed session's saved state, asking the store again every `RESUME_POLL`
    seconds for up to `RESUME_WAIT` seconds when `wait` (another worker may still be saving it).

    Args:
        store: The session store shared by the workers.
        resume: The client's `resume` message.
        wait: Whether to wait for a save in flight (the session is not live in this process).

    Returns:
        The claimed state (now removed from the store), or None: unknown, expired, already
        taken or a wrong token.
    """
    claimed = await store.claim(resume.session_id, resume.token)
    if claimed is not None or not wait:
        return claimed
    deadline = anyio.current_time() + RESUME_WAIT
    while anyio.current_time() < deadline:
        await anyio.sleep(RESUME_POLL)
        claimed = await store.claim(resume.session_id, resume.token)
        if claimed is not None:
            return claimed
    return None
