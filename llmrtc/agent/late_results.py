"""Late results: the final results of background calls (`ToolDefinition(background=True)`),
which land after their turn answered them `"running"`. `LateResults` takes them from the
executor once and hands each to both of its readers: the history (rendered by
`late_result_message` before the next model request) and whoever iterates `results()`.

How a late result is rendered, in every tool-call format: the call already has its one tool
message (the `"running"` answer), and a chat API accepts no second tool message for it (nor a
tool message anywhere but right after its assistant call), so the outcome goes into the history
as a `SystemMessage` naming the call id and the tool, with the result as JSON (the same text a
tool message would carry, cut to the turn's `max_tool_result_chars`). Natively (OpenAI chat
API) it is a `system` message after the call's tool messages, as a playbook's transition note
is; in the text and composed formats it is that same system message (the local model's chat
template renders a system message anywhere in the conversation). A system note, not a user
one: nothing that reads the user's words (tool routing and its grounding, a playbook's
keyword conditions, the history's trimming) mistakes it for something the user said.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing

from llmrtc.agent.result_cap import cut_tool_result
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import SystemMessage
from llmrtc.tools.calls import ToolCallResult

__all__ = ["LATE_RESULT_NOTE", "LateResults", "late_result_message"]

logger = logging.getLogger(__name__)

LATE_RESULT_NOTE = (
    "The background tool call {call_id} ({tool}), answered earlier as still running, has "
    "finished (status: {status}). Its result: {content}\n"
    "Tell the user the outcome; do not call the tool again for it."
)
"""The text of a late result's message: `call_id`, `tool`, `status` and `content` (the
result as a tool message would carry it) are filled in."""


def late_result_message(result: ToolCallResult, max_chars: int | None) -> SystemMessage:
    """The history message that tells the model the final result of a background call.

    Args:
        result: The call's final result (not `"running"`).
        max_chars: The most characters of the result shown (`TurnSettings.
            max_tool_result_chars`); None shows it whole.
    """
    content = result.to_content()
    if max_chars is not None and len(content) > max_chars:
        content = cut_tool_result(result, max_chars).content
    return SystemMessage(
        LATE_RESULT_NOTE.format(
            call_id=result.call_id, tool=result.tool_name, status=result.status, content=content
        )
    )


class LateResults:
    """The late results of one executor's background calls, each taken from the executor once
    and kept for two readers: `take_unheard()` (what the history has not got yet: the turn
    renders those before each model request, whether or not anyone iterates) and `results()`
    (a queue for the application: each result yielded once, in the order they landed)."""

    def __init__(self, executor: ToolExecutor) -> None:
        """Read the background results of `executor` (the only reader of its queue)."""
        self._executor = executor
        self._unheard: list[ToolCallResult] = []
        self._unyielded: deque[ToolCallResult] = deque()

    def _add(self, result: ToolCallResult) -> None:
        self._unheard.append(result)
        self._unyielded.append(result)

    def _pull(self) -> None:
        for result in self._executor.take_background_results():
            self._add(result)

    def take_unheard(self) -> list[ToolCallResult]:
        """The results that landed and are not in the history yet (in the order they landed);
        taking them means the caller puts them there now."""
        self._pull()
        taken, self._unheard = self._unheard, []
        return taken

    def has_unheard(self) -> bool:
        """Whether a result landed that the history has not got yet."""
        self._pull()
        return bool(self._unheard)

    async def results(self) -> AsyncGenerator[ToolCallResult, None]:
        """Yield each late result as it lands (also those that landed before); never ends."""
        while True:
            self._pull()
            while self._unyielded:
                yield self._unyielded.popleft()
            # Wait for the next one to land; nothing is taken from the executor but the one
            # result this iteration adds (the wait can be cancelled without losing any).
            async with aclosing(self._executor.background_results()) as landed:  # type: ignore[type-var]
                async for result in landed:
                    self._add(result)
                    break
