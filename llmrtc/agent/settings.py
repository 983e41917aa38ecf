"""`TurnSettings`: everything that shapes a turn, so a stage is configured in one assignment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.types import ToolChoice
from llmrtc.tools.tool import Tool

__all__ = [
    "DEFAULT_EMPTY_REPLY",
    "DEFAULT_ERROR_REPLY",
    "DEFAULT_MAX_TOOL_RESULT_CHARS",
    "MIN_TOOL_RESULT_CHARS",
    "TurnSettings",
]

DEFAULT_ERROR_REPLY = "Sorry, I had a problem answering that. Could you say it again?"
"""What the agent says when the model or its server failed for good during a turn."""

DEFAULT_EMPTY_REPLY = "Sorry, I don't have an answer to that. Could you put it another way?"
"""What the agent says when the model had nothing to say, even when asked again without tools."""

DEFAULT_MAX_TOOL_RESULT_CHARS = 16_000
"""A tool message sent to the model holds at most this many characters by default (about 4k
tokens): a tool that returns a whole file or a base64 blob must not fill the model's context."""

MIN_TOOL_RESULT_CHARS = 500
"""The smallest `max_tool_result_chars`: room for the cut notice and some of the result."""


@dataclass(frozen=True)
class TurnSettings:
    """How a `TurnRunner` runs its turns: prompt, offered tools, tool choice, round limit,
    model settings and the agent's own fallback lines. Frozen: change a runner's configuration
    by assigning a new one (`runner.settings = replace(runner.settings, tools=("lookup",))`),
    which is checked against the executor's registry at once.
    """

    system_prompt: str
    """Sent first with every request."""
    tools: tuple[str, ...] | None = None
    """Names of the registry's tools offered to the model (and the only ones that may run);
    None offers every registered tool."""
    extra_tools: tuple[Tool, ...] = ()
    """Tools that exist only for these settings (not in the executor's registry), offered and
    runnable besides `tools`; e.g. a playbook stage's `playbook_transition`."""
    tool_choice: ToolChoice = "auto"
    """`"auto"`, `"required"`, `"none"` or `{"name": ...}`; a forcing choice applies to the
    first model request of a turn only."""
    max_tool_rounds: int = 5
    """Tool batches per turn; after the last, one more request without tool use ends it."""
    model: ModelSettings = field(default_factory=ModelSettings)
    """Model name and sampling options for every request (None fields: provider defaults)."""
    error_reply: str = DEFAULT_ERROR_REPLY
    """Said (as `TextDelta`) after a `TurnFailed`: the model or its server failed for good."""
    empty_reply: str | None = DEFAULT_EMPTY_REPLY
    """Said when a turn would end with nothing said, even after one retry without tools;
    None ends such a turn silently."""
    max_tool_result_chars: int | None = DEFAULT_MAX_TOOL_RESULT_CHARS
    """The most characters of one tool message the model is sent (whatever the tool: local
    handler, MCP server, LLM-backed tool; at least `MIN_TOOL_RESULT_CHARS`); None sends every
    result whole. A longer successful result is replaced by a JSON object the model can read,
    itself within the limit: `{"truncated": true, "shown_chars": K, "total_chars": M, "note":
    "...", "partial_result": ...}`, where `partial_result` is the first K of the M characters
    of the string itself when the tool returned a string, else of the result's JSON text (a
    prefix that is not valid JSON). A longer failed result keeps its `status` and the start of
    its `error` text. The caller's `ToolCallResult` (and hooks) keep the whole result."""

    def __post_init__(self) -> None:
        if isinstance(self.tools, str) or (
            self.tools is not None and not isinstance(self.tools, tuple)
        ):
            if isinstance(self.tools, str) or not isinstance(self.tools, Sequence):
                raise TypeError(f"tools must be a sequence of names or None, got {self.tools!r}")
            object.__setattr__(self, "tools", tuple(self.tools))
        if not isinstance(self.extra_tools, tuple):
            object.__setattr__(self, "extra_tools", tuple(self.extra_tools))
        for extra in self.extra_tools:
            if not isinstance(extra, Tool):
                raise TypeError(
                    f"extra_tools takes Tool objects (from define_tool or @tool), got {extra!r}"
                )
        if isinstance(self.max_tool_rounds, bool) or not isinstance(self.max_tool_rounds, int):
            raise TypeError(f"max_tool_rounds must be an integer, got {self.max_tool_rounds!r}")
        if self.max_tool_rounds < 0:
            raise ValueError(f"max_tool_rounds must be >= 0, got {self.max_tool_rounds}")
        limit = self.max_tool_result_chars
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise TypeError(f"max_tool_result_chars must be an integer or None, got {limit!r}")
            if limit < MIN_TOOL_RESULT_CHARS:
                raise ValueError(
                    f"max_tool_result_chars must be >= {MIN_TOOL_RESULT_CHARS} (room for the "
                    f"cut notice) or None for no limit, got {limit}"
                )
        if not self.error_reply.strip():
            raise ValueError("error_reply must say something (the user hears it)")
        if self.empty_reply is not None and not self.empty_reply.strip():
            raise ValueError("empty_reply must say something, or be None to stay silent")
