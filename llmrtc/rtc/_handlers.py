"""What a session needs from its `TurnHandler` beyond turns: making one (a sync or async
factory), its state to save and restore (`ResumableHandler`), and its current stage.

A handler without `snapshot`/`restore` resumes with a fresh state (its session is still
resumable: the client gets its session back, the conversation starts over).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast, get_args

from llmrtc.agent.history import ConversationHistory
from llmrtc.errors import LLMRTCError
from llmrtc.llm.messages import AssistantMessage, ToolMessage, UserMessage
from llmrtc.rtc.messages import TranscriptEntry, TranscriptLine, TranscriptTool
from llmrtc.rtc.store import SessionState, SessionStore, hash_token
from llmrtc.tools.calls import ToolCallStatus

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


class RestoreError(LLMRTCError):
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
                restore(
                    {
                        "history": claimed.history,
                        "playbook": claimed.playbook,
                        "background": claimed.background,
                    }
                )
            except ValueError as exc:
                raise RestoreError(claimed.session_id, str(exc)) from exc
    return handler  # type: ignore[no-any-return]  # the factory's contract


def handler_state(handler: object) -> dict[str, Any]:
    """`handler.snapshot()` for a resumable handler, else an empty state (it resumes fresh)."""
    snapshot = getattr(handler, "snapshot", None)
    if not callable(snapshot):
        return {"history": None, "playbook": None, "background": None}
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
            background=state.get("background"),
        ),
        ttl=ttl,
    )


def stage_of(handler: object) -> str | None:
    """The current stage of a playbook handler (`PlaybookOrchestrator.engine`), else None."""
    stage = getattr(getattr(getattr(handler, "engine", None), "current_stage", None), "id", None)
    return stage if isinstance(stage, str) else None


def transcript_of(handler: object) -> tuple[TranscriptEntry, ...]:
    """The conversation `handler` remembers (its `.history`, a `ConversationHistory`), as the
    page shows it, oldest first. Per turn: the user's line; one agent line joining the turn's
    assistant texts (a lead-in, then the answer after a tool call: one bubble live, one line
    here), `interrupted` if any part was cut (an answer cut before a word was heard is kept,
    empty and `interrupted`); and the turn's tool calls in order, each with its status. System
    prompts, arguments and results are the agent's own business. Empty for a handler that keeps
    no history."""
    history = getattr(handler, "history", None)
    if not isinstance(history, ConversationHistory):
        return ()
    entries: list[TranscriptEntry] = []
    names: dict[str, str] = {}  # call_id -> tool name, from the assistant message that called
    # The turn being read: its user line, its agent line (growing), its tool calls.
    user: TranscriptLine | None = None
    reply: TranscriptLine | None = None
    tools: list[TranscriptTool] = []

    def flush() -> None:
        entries.extend(entry for entry in (user, reply) if entry is not None)
        entries.extend(tools)

    turn_over = True  # the last assistant message called no tool: the next one starts a turn
    for message in history.messages:
        if isinstance(message, UserMessage) or (
            isinstance(message, AssistantMessage) and turn_over and (reply or tools)
        ):  # a new turn: the user's, or one the agent began itself (a stage timeout's nudge)
            flush()
            user, reply, tools = None, None, []
        if isinstance(message, UserMessage):
            user, turn_over = TranscriptLine(role="user", text=message.content), False
        elif isinstance(message, AssistantMessage):
            names.update((call.call_id, call.name) for call in message.tool_calls)
            if message.content or message.interrupted:
                reply = TranscriptLine(
                    role="assistant",
                    text=(reply.text if reply else "") + message.content,
                    interrupted=(reply is not None and reply.interrupted) or message.interrupted,
                )
            turn_over = not message.tool_calls
        elif isinstance(message, ToolMessage):
            name = names.get(message.call_id, "")
            tools.append(TranscriptTool(name=name, status=_result_status(message.content)))
    flush()
    return tuple(entries)


_STATUSES: frozenset[str] = frozenset(get_args(ToolCallStatus))


def _result_status(content: str) -> ToolCallStatus:
    """A tool message's status: a failure's content is `{"error": ..., "status": ...}`
    (`ToolCallResult.to_content()`); anything else is a result, `ok`."""
    try:
        data = json.loads(content)
    except ValueError:
        return "ok"
    if isinstance(data, dict) and set(data) == {"error", "status"}:
        status = data["status"]
        if status in _STATUSES and status != "ok":
            return cast(ToolCallStatus, status)
    return "ok"
