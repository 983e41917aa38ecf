"""The bot a command talks to: a playbook's orchestrator, or a runner with a tools file.

`llmrtc chat` and `llmrtc voice` answer with the same handler, built here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from llmrtc.agent import TurnHandler
    from llmrtc.catalog import Toolkit
    from llmrtc.llm import LLMProvider
    from llmrtc.playbook import Playbook
    from llmrtc.tools import ToolRegistry

__all__ = ["DEFAULT_SYSTEM_PROMPT", "build_handler"]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Use the tools when they help. Answer briefly."
"""The system prompt of `chat` and `voice` without a playbook (`--system` replaces it)."""


def build_handler(
    llm: LLMProvider,
    registry: ToolRegistry | None,
    playbook: Playbook | None,
    *,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    toolkits: Sequence[Toolkit] = (),
) -> TurnHandler:
    """The turn handler of a command: a `PlaybookOrchestrator` for a playbook (its stages
    give the prompts), else a `TurnRunner` with `system_prompt` and the tools (none if
    `registry` is None). `toolkits` are the ones the playbook's stages may name.

    Raises:
        PlaybookError: the playbook names a tool the registry lacks.
    """
    from llmrtc import PlaybookOrchestrator, ToolExecutor, ToolRegistry, TurnRunner

    tools = registry if registry is not None else ToolRegistry()
    if playbook is not None:
        return PlaybookOrchestrator(playbook, llm, tools, toolkits=toolkits)
    return TurnRunner(llm, ToolExecutor(tools), system_prompt=system_prompt)
