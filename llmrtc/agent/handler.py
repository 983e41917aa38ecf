"""`TurnHandler`: the one protocol a voice loop (or a chat CLI) talks to."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from llmrtc.abort import AbortSignal
from llmrtc.agent.events import AgentEvent
from llmrtc.agent.history import ConversationHistory

__all__ = ["TurnHandler"]


@runtime_checkable
class TurnHandler(Protocol):
    """Something that answers turns: `TurnRunner` (one prompt, one tool set) and
    `PlaybookOrchestrator` (stages) both are.

    Contract of `run_turn` and `run_timeout_turn`:
      - they yield `AgentEvent`s as things happen, and `TurnCompleted` last, once;
      - a model or server failure does not raise: the turn yields `TurnError`, then a short
        spoken-style apology as `TextDelta`, and ends with `TurnCompleted(stop_reason="error")`;
        the history stays valid and the next turn works;
      - an abort (barge-in) or leaving the `async for` early ends the turn with
        `stop_reason="aborted"`; every started tool call still gets its result;
      - a turn that would end with nothing said ends with something to say (see `TurnRunner`).

    Example:
        async def reply(handler: TurnHandler, text: str) -> None:
            async for event in handler.run_turn(text, abort_signal=barge_in.signal):
                if isinstance(event, TextDelta):
                    speak(event.text)
    """

    @property
    def history(self) -> ConversationHistory:
        """The conversation so far (valid for chat APIs between turns)."""
        ...

    def run_turn(
        self, user_text: str | None, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Answer `user_text` (None: a turn without a user message, the agent speaks up)."""
        ...

    def next_deadline(self) -> float | None:
        """When `run_timeout_turn` is due, as a `time.monotonic()` value; None for never. It
        moves with every turn (it measures the user's silence): ask again after each one."""
        ...

    def run_timeout_turn(
        self, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[AgentEvent]:
        """The turn the deadline stands for (e.g. a stage's silence timeout: the agent speaks
        up). Yields nothing at all when no deadline is set (`next_deadline()` is None)."""
        ...
