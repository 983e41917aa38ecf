"""What a session needs from its `TurnHandler` beyond turns: making one (a sync or async
factory), its state to save and restore (`ResumableHandler`), and its current stage.

A handler without `snapshot`/`restore` resumes with a fresh state (its session is still
resumable: the client gets its session back, the conversation starts over).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmrtc.rtc.messages import TranscriptEntry
from llmrtc.rtc.store import SessionState, SessionStore, hash_token

if TYPE_CHECKING:
    from llmrtc.agent.handler import TurnHandler

__all__ = [
    "RestoreError",
    "handler_state",
    "make_handler",
    "save_state",
    "stage_of",
    "transcript_of",
]


class RestoreError(Exception):
    """A stored state the new handler refused (malformed, or another playbook's)."""

    def __init__(self, session_id: str, message: str) -> None:
        """Name the session whose state was refused."""
        super().__init__(message)
        self.session_id = session_id


async def make_handler(factory: Callable[[], Any], claimed: SessionState | None) -> TurnHandler:
    """A new handler from `factory` (its awaitable result awaited), restored from `claimed`.

    Raises:
        RestoreError: the handler's `restore` refused the state (ValueError).
    """
    handler = factory()
    if inspect.isawaitable(handler):
        handler = await handler
    if claimed is not None:
        restore = getattr(handler, "restore", None)
        if callable(restore):
            try:
                restore({"history": claimed.history, "playbook": claimed.playbook})
            except ValueError as exc:
                raise RestoreError(claimed.session_id, str(exc)) from exc
    return handler  # type: ignore[no-any-return]  # the factory's contract


def handler_state(handler: object) -> dict[str, Any]:
    """`handler.snapshot()` for a resumable handler, else an empty state (it resumes fresh)."""
    snapshot = getattr(handler, "snapshot", None)
    if not callable(snapshot):
        return {"history": None, "playbook": None}
    state = snapshot()
    if not isinstance(state, dict):
        raise TypeError(f"{type(handler).__name__}.snapshot() must return a dict")
    return state


async def save_state(
    store: SessionStore,
    handler: object,
    *,
    session_id: str,
    token: str,
    ttl: float,
) -> None:
    """Save `handler`'s state under `session_id`, resumable with `token` for `ttl` seconds."""
    state = handler_state(handler)
    await store.save(
        SessionState(
            session_id=session_id,
            token_hash=hash_token(token),
            history=state.get("history"),
            playbook=state.get("playbook"),
        ),
        ttl=ttl,
    )


def stage_of(handler: object) -> str | None:
    """The current stage of a playbook handler (`PlaybookOrchestrator.engine`), else None."""
    stage = getattr(getattr(getattr(handler, "engine", None), "current_stage", None), "id", None)
    return stage if isinstance(stage, str) else None


def transcript_of(handler: object) -> tuple[TranscriptEntry, ...]:
    """The conversation `handler` remembers, as the lines a page shows: each user message, and
    each assistant message with text or cut short (an answer cut before a word was heard is
    kept, empty and `interrupted`), oldest first. System prompts, tool calls and tool results
    are the agent's own business. Empty for a handler that keeps no history."""
    history = handler_state(handler).get("history")
    messages = history.get("messages") if isinstance(history, dict) else None
    if not isinstance(messages, list):
        return ()
    entries: list[TranscriptEntry] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        role, text = message.get("role"), message.get("content")
        if role not in ("user", "assistant") or not isinstance(text, str):
            continue
        interrupted = role == "assistant" and message.get("interrupted") is True
        if not text and not interrupted:  # a message of tool calls only
            continue
        entries.append(TranscriptEntry(role=role, text=text, interrupted=interrupted))
    return tuple(entries)
