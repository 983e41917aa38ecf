"""`TurnSettings`: everything that shapes a turn, so a stage is configured in one assignment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.types import ToolChoice

__all__ = ["TurnSettings"]


@dataclass(frozen=True)
class TurnSettings:
    """How a `TurnRunner` runs its turns: prompt, offered tools, tool choice, round limit and
    model settings. Frozen: change a runner's configuration by assigning a new one
    (`runner.settings = replace(runner.settings, tools=("lookup",))`), which is checked against
    the executor's registry at once.
    """

    system_prompt: str
    """Sent first with every request."""
    tools: tuple[str, ...] | None = None
    """Names of the registry's tools offered to the model (and the only ones that may run);
    None offers every registered tool."""
    tool_choice: ToolChoice = "auto"
    """`"auto"`, `"required"`, `"none"` or `{"name": ...}`; a forcing choice applies to the
    first model request of a turn only."""
    max_tool_rounds: int = 5
    """Tool batches per turn; after the last, one more request without tool use ends it."""
    model: ModelSettings = field(default_factory=ModelSettings)
    """Model name and sampling options for every request (None fields: provider defaults)."""

    def __post_init__(self) -> None:
        if isinstance(self.tools, str) or (
            self.tools is not None and not isinstance(self.tools, tuple)
        ):
            if isinstance(self.tools, str) or not isinstance(self.tools, Sequence):
                raise TypeError(f"tools must be a sequence of names or None, got {self.tools!r}")
            object.__setattr__(self, "tools", tuple(self.tools))
        if isinstance(self.max_tool_rounds, bool) or not isinstance(self.max_tool_rounds, int):
            raise TypeError(f"max_tool_rounds must be an integer, got {self.max_tool_rounds!r}")
        if self.max_tool_rounds < 0:
            raise ValueError(f"max_tool_rounds must be >= 0, got {self.max_tool_rounds}")
