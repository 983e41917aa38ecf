"""`ConversationHistory`: the messages of a conversation, kept valid for chat APIs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import TypeAdapter

from llmrtc.llm.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from llmrtc.llm.types import AnyMessage

__all__ = ["ConversationHistory"]

_MESSAGES = TypeAdapter(list[Message])


class ConversationHistory:
    """Messages after the system prompt, bounded to `max_messages`.

    Trimming drops the oldest messages, and only ever cuts right before a user (or system)
    message, so an assistant tool-call message is never separated from its tool messages and
    the kept window never starts with an orphaned tool result. A single turn longer than the
    limit is kept whole until the next turn starts.

    Example:
        history = ConversationHistory(max_messages=50)
        runner = TurnRunner(llm, executor, system_prompt="...", history=history)
        saved = history.to_dict()          # e.g. to resume the session elsewhere
        history = ConversationHistory.from_dict(saved)
    """

    def __init__(self, max_messages: int = 50, messages: Iterable[AnyMessage] = ()) -> None:
        """Create a history, optionally with `messages` already in it."""
        if max_messages < 2:
            raise ValueError(f"max_messages must be at least 2, got {max_messages}")
        self.max_messages = max_messages
        self._messages: list[AnyMessage] = []
        self.extend(messages)

    @property
    def messages(self) -> tuple[AnyMessage, ...]:
        """The stored messages, oldest first (the system prompt is not among them)."""
        return tuple(self._messages)

    def __len__(self) -> int:
        return len(self._messages)

    def append(self, message: AnyMessage) -> None:
        """Add a message, then trim if over the limit."""
        if isinstance(message, SystemMessage | UserMessage | AssistantMessage | ToolMessage):
            self._messages.append(message)
        else:
            raise TypeError(f"expected a chat message, got {type(message).__name__}")
        self._trim()

    def extend(self, messages: Iterable[AnyMessage]) -> None:
        """Add several messages in order."""
        for message in messages:
            self.append(message)

    def for_request(self, system_prompt: str) -> list[AnyMessage]:
        """The messages to send: the system prompt first, then the history."""
        return [SystemMessage(system_prompt), *self._messages]

    def clear(self, *, keep: Sequence[AnyMessage] = ()) -> None:
        """Forget the conversation, keeping only `keep` (e.g. the current user message)."""
        self._messages = list(keep)

    def replace(self, old: AnyMessage, new: AnyMessage | None) -> None:
        """Put `new` where `old` is (the very object, not an equal one), or remove `old` when
        `new` is None. A voice loop uses it after a barge-in to leave in the turn's assistant
        messages only what the user heard; keeping the history valid is the caller's part.

        Raises:
            ValueError: `old` is not in the history.
            TypeError: `new` is not a chat message.
        """
        index = next((i for i, m in enumerate(self._messages) if m is old), None)
        if index is None:
            raise ValueError(f"replace: {old!r} is not in the history")
        if new is None:
            del self._messages[index]
        elif isinstance(new, SystemMessage | UserMessage | AssistantMessage | ToolMessage):
            self._messages[index] = new
        else:
            raise TypeError(f"expected a chat message, got {type(new).__name__}")

    def _trim(self) -> None:
        excess = len(self._messages) - self.max_messages
        if excess <= 0:
            return
        # Never cut past the latest user message: the turn in progress stays whole (a system
        # message a playbook adds mid-turn is no place to cut it).
        last_user = max(
            (i for i, m in enumerate(self._messages) if isinstance(m, UserMessage)), default=-1
        )
        for cut in range(excess, len(self._messages)):
            if cut > last_user >= 0:
                return
            if isinstance(self._messages[cut], UserMessage | SystemMessage):
                del self._messages[:cut]
                return

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe snapshot (round-trips through `from_dict`)."""
        return {
            "max_messages": self.max_messages,
            "messages": _MESSAGES.dump_python(self._messages, mode="json"),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConversationHistory:
        """Rebuild a history saved with `to_dict`."""
        return cls(data.get("max_messages", 50), _MESSAGES.validate_python(data["messages"]))

    def __repr__(self) -> str:
        return f"ConversationHistory({len(self)} messages, max_messages={self.max_messages})"
