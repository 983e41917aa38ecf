"""What a playbook stage gives the turn runner: its prompt, offered tools (with the built-in
`playbook_transition` where the model may choose the next stage), tool choice and model
settings, as one `TurnSettings`."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from llmrtc.agent.settings import TurnSettings
from llmrtc.catalog.toolkits import Toolkit
from llmrtc.llm.settings import ModelSettings
from llmrtc.playbook.engine import PlaybookEngine
from llmrtc.playbook.models import (
    TRANSITION_TOOL,
    LLMDecisionCondition,
    Playbook,
    Stage,
    Transition,
)
from llmrtc.playbook.validation import stage_policies, stage_tool_names
from llmrtc.tools.context import ToolContext
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool, define_tool

__all__ = ["TransitionRequest", "stage_settings"]

logger = logging.getLogger(__name__)

TransitionRequest = Callable[[dict[str, Any], ToolContext], Awaitable[dict[str, str]]]
"""The handler of `playbook_transition` (the orchestrator schedules the transition)."""


def stage_settings(
    playbook: Playbook,
    engine: PlaybookEngine,
    registry: ToolRegistry,
    toolkits: Sequence[Toolkit],
    base: TurnSettings,
    request_transition: TransitionRequest,
) -> TurnSettings:
    """`base` with the current stage's prompt, offered tools (which are exactly the runnable
    ones), tool choice and model settings."""
    stage = engine.current_stage
    entries = list(dict.fromkeys([*playbook.global_tools, *stage.tools]))
    # Entries are tool names, wire names, catalog ids or toolkit keys. The playbook was
    # checked against the registry when the orchestrator was built; a tool the application
    # unregistered since (a permission switched off) is dropped here, in a live session,
    # instead of failing the stage change half-way.
    kits = {kit.key for kit in toolkits}
    gone = [e for e in entries if e not in kits and not registry.has(e)]
    refused = [e for e in gone if registry.refusal(e) is not None]
    if refused:
        logger.warning("stage %r: tools %s not permitted; not offered", stage.id, refused)
    if gone := [e for e in gone if e not in refused]:
        logger.warning("stage %r: tools %s left the registry; not offered", stage.id, gone)
    names = tuple(stage_tool_names(entries, registry, toolkits))
    targets = [] if engine.completed else playbook.llm_decision_targets(stage.id)
    extra_tools = (transition_tool(playbook, targets, request_transition),) if targets else ()
    choice = stage.tool_choice
    offered = {*names, *(t.definition.name for t in extra_tools)}
    if (isinstance(choice, Mapping) and choice.get("name") not in offered) or (
        choice == "required" and not offered
    ):
        choice = "auto" if offered else "none"
    # The policy of each toolkit the stage names (and uses): the code-owned rules that
    # come with its tools.
    policies = stage_policies(entries, registry, toolkits)
    prompts = [playbook.global_system_prompt, stage.system_prompt, *policies]
    return replace(
        base,
        system_prompt="\n\n".join(p.strip() for p in prompts if p.strip()),
        tools=names,
        extra_tools=extra_tools,
        tool_choice=choice,
        model=model_settings(playbook, stage),
    )


def model_settings(playbook: Playbook, stage: Stage) -> ModelSettings:
    """The playbook's default model settings with the stage's on top."""
    default, own = playbook.default_llm_config, stage.llm_config
    base = default.to_settings() if default is not None else ModelSettings()
    return base.merged(own.to_settings() if own is not None else None)


def transition_tool(
    playbook: Playbook, targets: list[Transition], request_transition: TransitionRequest
) -> Tool:
    """`playbook_transition`, offering exactly the legal targets of this stage (an inline
    enum, no `$ref`, so small models see them), each with its description."""
    lines = ["Move the conversation to another stage when the user's need calls for it."]
    for transition in targets:
        stage = playbook.stage(transition.action.target_stage)
        what = stage.description or stage.name or stage.id
        condition = transition.condition
        when = (
            f" Use when: {condition.description}"
            if isinstance(condition, LLMDecisionCondition) and condition.description
            else ""
        )
        lines.append(f"- {stage.id}: {what}.{when}")
    definition = ToolDefinition(
        TRANSITION_TOOL,
        "\n".join(lines),
        {
            "type": "object",
            "properties": {
                "target_stage": {
                    "type": "string",
                    "enum": [t.action.target_stage for t in targets],
                    "description": "The stage to move to.",
                },
                "reason": {"type": "string", "description": "Why, in a few words."},
            },
            "required": ["target_stage"],
            "additionalProperties": False,
        },
        # A barrier in request order: the model's other calls of the response run first,
        # and two transition calls in one response are decided in order.
        execution_policy="sequential",
    )
    return define_tool(definition, request_transition)
