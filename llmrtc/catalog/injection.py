"""`ToolInjection`: what a model is offered from a catalog (seed 001's adaptive injection).

Direct mode offers every permitted tool's schema when they fit in a fraction (20 %) of the
context window; discovery mode offers the five meta-tools instead and keeps the real tools in
the registry, hidden, so `execute_tool` and a model that names a real tool directly both run
them through the same executor.

The size is measured, not assumed: `estimate_tokens` counts the tokens of the schemas exactly
as they are sent (one `to_openai()` JSON object per tool), calibrated against the real Qwen2.5
tokenizer (see its docstring). Pass `count_tokens=` to use a real tokenizer instead.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import Literal

from llmrtc.catalog.catalog import ToolCatalog
from llmrtc.catalog.meta_tools import GENERAL_CATEGORY, META_TOOL_NAMES, build_meta_tools
from llmrtc.catalog.toolkits import Toolkit, ToolsConfig
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool

logger = logging.getLogger(__name__)

__all__ = [
    "CHARS_PER_TOKEN",
    "DIRECT_BUDGET",
    "InjectionMode",
    "ToolInjection",
    "estimate_tokens",
    "schema_tokens",
]

InjectionMode = Literal["direct", "discovery"]
"""`"direct"`: every permitted tool is offered; `"discovery"`: the five meta-tools are."""

DIRECT_BUDGET = 0.2
"""Direct mode while the schemas fit in this fraction of the context window (seed 001)."""

PROMPT_CATEGORIES = 12
"""Discovery's prompt names at most this many categories (`list_categories` has them all)."""

NOT_PERMITTED = "not permitted by this agent's tools configuration"

CHARS_PER_TOKEN = 3.6
"""Characters of tool-schema JSON per Qwen2.5 token (calibrated: see `estimate_tokens`)."""


def estimate_tokens(text: str) -> int:
    """Tokens of `text` for the Qwen2.5 tokenizer (and GPT-style BPEs), estimated without one:
    `ceil(len(text) / 3.6)`.

    Calibrated on 203 tool schemas as sent (`to_openai()` JSON): the 200-tool benchmark catalog
    plus three rich schemas (enums, formats, nested objects, patterns), counted by llama.cpp's
    `/tokenize` with the Qwen2.5-Coder-1.5B GGUF: 3.75 characters per token on the whole set.
    With 3.6 (a little conservative, since rich schemas tokenize denser) the error was +4.9 %
    on the whole set, 5.6 % mean and 17.5 % worst per schema, and -5.5 % to 0 % on the rich
    ones. A regex word-piece count was far worse (+35 % to +88 %: BPE merges JSON
    punctuation with its spaces and common words). Pass a real counter through
    `ToolInjection.build(count_tokens=...)` when the exact figure matters.
    """
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def schema_tokens(
    definitions: Sequence[ToolDefinition], count_tokens: Callable[[str], int] = estimate_tokens
) -> int:
    """Tokens the schemas of `definitions` take, as `to_openai()` JSON objects, one a line
    (how chat templates such as Qwen's render the `tools` of a request)."""
    return sum(count_tokens(json.dumps(d.to_openai(), ensure_ascii=False)) + 1 for d in definitions)


class ToolInjection:
    """The tools a model is offered from a catalog, and the registry the executor runs.

    Build it with `await ToolInjection.build(catalog, config=..., context_window=...)`.

    Example:
        injection = await ToolInjection.build(catalog, config=config, context_window=8192)
        executor = ToolExecutor(injection.registry)
        prompt = base_prompt + "\\n\\n" + injection.prompt_section()
        runner = TurnRunner(llm, executor, system_prompt=prompt)
    """

    mode: InjectionMode
    """`"direct"` or `"discovery"`."""
    registry: ToolRegistry
    """What the executor runs: the permitted tools (direct), or the meta-tools plus the
    permitted tools hidden (discovery). Tools the config refuses are `refuse`d in it, so a
    model that names one is told it is not permitted."""
    catalog: ToolCatalog
    """The catalog restricted to what the config permits."""
    tools: list[Tool]
    """The permitted tools, one version each (the highest)."""
    direct_tokens: int
    """Measured tokens of the permitted tools' schemas (what direct mode offers)."""
    offered_tokens: int
    """Measured tokens of the schemas actually offered (meta-tools in discovery mode)."""
    budget_tokens: int
    """The direct-mode budget: `budget` x `context_window`."""
    config: ToolsConfig | None
    """The permissions the injection was built with."""

    def __init__(self) -> None:
        """Use `ToolInjection.build`."""
        self.toolkits: list[Toolkit] = []
        """Toolkits with at least one permitted tool (their policies go in the prompt)."""

    @classmethod
    async def build(
        cls,
        catalog: ToolCatalog,
        *,
        config: ToolsConfig | None = None,
        context_window: int = 8192,
        budget: float = DIRECT_BUDGET,
        mode: InjectionMode | Literal["auto"] = "auto",
        count_tokens: Callable[[str], int] = estimate_tokens,
    ) -> ToolInjection:
        """Choose the mode and build the registry from the catalog as it is now.

        Args:
            catalog: Where the tools come from.
            config: Permissions (toolkits, per-tool switches, allowed / blocked actions).
                None permits every tool of the catalog.
            context_window: The model's context length in tokens.
            budget: Direct mode while the schemas take at most this fraction of
                `context_window`.
            mode: `"auto"` (measure), or force `"direct"` / `"discovery"`.
            count_tokens: Counts the tokens of a text (default: `estimate_tokens`).

        Raises:
            ValueError: for a bad `context_window`, `budget` or `mode`, or when two permitted
                tools (or a tool and a meta-tool) would have one name on the wire.
        """
        if isinstance(context_window, bool) or not isinstance(context_window, int):
            raise ValueError(f"context_window must be a number of tokens, got {context_window!r}")
        if context_window < 1:
            raise ValueError(f"context_window must be >= 1 token, got {context_window}")
        if not 0 < budget <= 1:
            raise ValueError(f"budget must be a fraction in (0, 1], got {budget!r}")
        if mode not in ("auto", "direct", "discovery"):
            raise ValueError(f"mode must be 'auto', 'direct' or 'discovery', got {mode!r}")
        self = cls()
        self.config = config
        self.catalog = catalog if config is None else catalog.restricted(config.permits)
        self.tools = _highest_versions(await self.catalog.list())
        if config is not None:  # e.g. `_reasoningForCall` on every offered schema
            self.tools = [config.offer(tool) for tool in self.tools]
        permitted = {t.definition.name for t in self.tools}
        self.budget_tokens = int(budget * context_window)
        self.direct_tokens = schema_tokens([t.definition for t in self.tools], count_tokens)
        chosen: InjectionMode = "direct"
        try:
            registry = ToolRegistry(self.tools)
            if mode == "discovery" or (mode == "auto" and self.direct_tokens > self.budget_tokens):
                meta = ToolRegistry(build_meta_tools(self.catalog, self.tools))
                # Auto: discovery only when it is cheaper (a tiny window with a tool or two
                # would otherwise pay more for the meta-tools than for the tools themselves).
                if mode == "discovery" or (
                    schema_tokens(meta.definitions(), count_tokens) < self.direct_tokens
                ):
                    registry = meta.register_all(self.tools, hidden=True)
                    chosen = "discovery"
        except ValueError as exc:
            raise ValueError(f"cannot offer the catalog's tools: {exc}") from None
        self.mode = chosen
        if config is not None:
            everything = await catalog.list()
            for tool in everything:
                if tool.definition.name not in permitted:
                    registry.refuse(tool.definition, NOT_PERMITTED)
            self.toolkits = config.toolkits_of(permitted)
            _warn_unknown_keys(config, {t.definition.name for t in everything})
        self.registry = registry
        self.offered_tokens = schema_tokens(registry.definitions(), count_tokens)
        if chosen == "discovery":
            # Embedding the catalog takes seconds on a busy CPU: start now, in the background,
            # so no turn's search_tools waits for it (it answers by keyword meanwhile).
            await self.catalog.start_indexing()
        return self

    def definitions(self) -> list[ToolDefinition]:
        """What the model is offered: the tools (direct) or the meta-tools (discovery)."""
        return self.registry.definitions()

    def prompt_section(self) -> str:
        """System-prompt text: the policies of the toolkits in use and, in discovery mode, how
        to find and run tools through the meta-tools. Empty when there is nothing to say."""
        parts = [f"{kit.title}: {kit.policy}" for kit in self.toolkits if kit.policy]
        if self.mode == "discovery":
            categories = sorted({t.definition.namespace or GENERAL_CATEGORY for t in self.tools})
            named = ", ".join(categories[:PROMPT_CATEGORIES])
            if len(categories) > PROMPT_CATEGORIES:  # the prompt stays small at any size
                named += f" and {len(categories) - PROMPT_CATEGORIES} more"
            parts.append(
                f"You have {len(self.tools)} tools in {len(categories)} categories "
                f"({named}), reached through {len(META_TOOL_NAMES)} tools: "
                "search_tools finds tools by what they do; list_categories and browse_category "
                "list them; get_tool gives one tool's exact parameters; execute_tool runs a "
                "tool with its name and params. To use a tool: search_tools, then get_tool, "
                "then execute_tool. Never guess a tool's name or parameters."
            )
        return "\n\n".join(parts)

    def __repr__(self) -> str:
        return (
            f"ToolInjection(mode={self.mode!r}, tools={len(self.tools)}, "
            f"offered_tokens={self.offered_tokens}, direct_tokens={self.direct_tokens}, "
            f"budget_tokens={self.budget_tokens})"
        )


def _warn_unknown_keys(config: ToolsConfig, names: set[str]) -> None:
    """Log the config keys that name neither a tool of the catalog nor a toolkit: a typo
    there would otherwise silently grant or deny nothing."""
    kits = {kit.key for kit in config.toolkits}
    unknown = [key for key in config.settings if key not in kits and key not in names]
    if unknown:
        logger.warning(
            "tools config keys %s name no tool of the catalog and no toolkit (toolkits: %s); "
            "they change nothing",
            unknown,
            sorted(kits),
        )


def _version_key(tool: Tool) -> tuple[int, ...]:
    return tuple(int(part) for part in tool.definition.version.split("."))


def _highest_versions(tools: Sequence[Tool]) -> list[Tool]:
    """One tool per name, the highest version, in first-seen order."""
    best: dict[str, Tool] = {}
    for tool in tools:
        name = tool.definition.name
        if name not in best or _version_key(tool) > _version_key(best[name]):
            best[name] = tool
    return list(best.values())
