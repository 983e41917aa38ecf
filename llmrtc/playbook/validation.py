"""Static checks of a playbook: references, reachability, dead transitions."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from llmrtc.playbook.models import (
    CustomCondition,
    LLMDecisionCondition,
    MaxTurnsCondition,
    Playbook,
    TimeoutCondition,
    ToolCallCondition,
    Transition,
)
from llmrtc.tools.registry import ToolRegistry

__all__ = ["Finding", "PlaybookError", "import_callable", "validate_playbook"]

TRANSITION_TOOL = "playbook_transition"
# Conditions checked once after the turn's answer (the others fire after tool batches or on a
# timer, so an always-true one of these cannot shadow them).
_AFTER_ANSWER = ("keyword", "intent", "max_turns", "custom")


@dataclass(frozen=True)
class Finding:
    """One problem found in a playbook."""

    severity: Literal["error", "warning"]
    message: str
    """What is wrong, naming the offending id, and what is allowed."""
    path: str
    """Where, as a key path: `stages[2].tools[0]`."""

    def __str__(self) -> str:
        return f"{self.severity}: {self.path}: {self.message}"


class PlaybookError(ValueError):
    """A playbook with error findings, raised where it is loaded or put to use."""

    def __init__(self, findings: list[Finding], source: str | None = None) -> None:
        self.findings = findings
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  {finding}" for finding in findings)
        super().__init__(f"invalid playbook{where}:\n{lines}")


def import_callable(reference: str) -> Callable[..., Any]:
    """Import `"module:function"` (e.g. `"myapp.rules:is_vip"`).

    Raises:
        ImportError: when the module or the attribute is missing or not callable.
    """
    module_name, _, attribute = reference.partition(":")
    module = importlib.import_module(module_name)
    target = getattr(module, attribute, None)
    if not callable(target):
        raise ImportError(f"{module_name!r} has no callable {attribute!r}")
    return target  # type: ignore[no-any-return]


def validate_playbook(playbook: Playbook, registry: ToolRegistry | None = None) -> list[Finding]:
    """Check a playbook's references and structure; never raises.

    Errors: unknown stage or tool references, duplicate ids, a missing initial stage, callables
    that cannot be imported. Warnings: unreachable stages, non-terminal stages without a way
    out, transitions that can never fire. Tool names are checked only when `registry` is given.
    """
    findings: list[Finding] = []

    def error(path: str, message: str) -> None:
        findings.append(Finding("error", message, path))

    def warning(path: str, message: str) -> None:
        findings.append(Finding("warning", message, path))

    stage_ids = [stage.id for stage in playbook.stages]
    known = set(stage_ids)
    for index, stage_id in enumerate(stage_ids):
        if stage_ids.index(stage_id) != index:
            error(f"stages[{index}].id", f"duplicate stage id {stage_id!r}")
    transition_ids = [t.id for t in playbook.transitions]
    for index, transition_id in enumerate(transition_ids):
        if transition_ids.index(transition_id) != index:
            error(f"transitions[{index}].id", f"duplicate transition id {transition_id!r}")
    if playbook.initial_stage not in known:
        error(
            "initial_stage",
            f"initial stage {playbook.initial_stage!r} is not a stage; stages: {stage_ids}",
        )

    tool_names = set(registry.names()) if registry is not None else None

    def check_tool(path: str, name: str, where: str) -> None:
        if name == TRANSITION_TOOL:
            error(path, f"{TRANSITION_TOOL!r} is built in; do not list it ({where})")
        elif tool_names is not None and name not in tool_names:
            error(path, f"unknown tool {name!r} in {where}; registered: {sorted(tool_names)}")

    for index, name in enumerate(playbook.global_tools):
        check_tool(f"global_tools[{index}]", name, "global_tools")
    for s_index, stage in enumerate(playbook.stages):
        for t_index, name in enumerate(stage.tools):
            check_tool(f"stages[{s_index}].tools[{t_index}]", name, f"stage {stage.id!r}")
        if isinstance(stage.tool_choice, dict):
            forced = stage.tool_choice.get("name")
            if forced not in {*stage.tools, *playbook.global_tools}:
                error(
                    f"stages[{s_index}].tool_choice",
                    f"stage {stage.id!r} forces tool {forced!r}, which it does not offer",
                )
        for hook in ("on_enter", "on_exit"):
            reference = getattr(stage, hook)
            if isinstance(reference, str):
                _check_import(reference, f"stages[{s_index}].{hook}", f"stage {stage.id!r}", error)

    for index, transition in enumerate(playbook.transitions):
        path = f"transitions[{index}]"
        if transition.from_stage != "*" and transition.from_stage not in known:
            error(
                f"{path}.from_stage",
                f"transition {transition.id!r} starts from unknown stage "
                f"{transition.from_stage!r}; stages: {stage_ids} or '*'",
            )
        if transition.action.target_stage not in known:
            error(
                f"{path}.action.target_stage",
                f"transition {transition.id!r} targets unknown "
                f"stage {transition.action.target_stage!r}; stages: {stage_ids}",
            )
        condition = transition.condition
        if isinstance(condition, ToolCallCondition):
            check_tool(
                f"{path}.condition.tool_name", condition.tool_name, f"transition {transition.id!r}"
            )
        if isinstance(condition, CustomCondition) and isinstance(condition.evaluate, str):
            _check_import(
                condition.evaluate,
                f"{path}.condition.evaluate",
                f"transition {transition.id!r}",
                error,
            )

    if any(f.severity == "error" for f in findings):
        return findings  # the structure checks below need valid references
    _check_structure(playbook, warning)
    return findings


def _check_import(reference: str, path: str, where: str, error: Callable[[str, str], None]) -> None:
    try:
        import_callable(reference)
    except Exception as exc:  # ImportError, or whatever the module raised on import
        error(path, f"cannot import {reference!r} ({where}): {exc}")


def candidates_for(playbook: Playbook, stage_id: str) -> list[Transition]:
    """Transitions that may fire from `stage_id`: its own and `"*"` ones, by descending
    priority, ties in file order."""
    own = [t for t in playbook.transitions if t.from_stage in (stage_id, "*")]
    return sorted(own, key=lambda t: -t.priority)  # sorted() is stable: file order on ties


def _check_structure(playbook: Playbook, warning: Callable[[str, str], None]) -> None:
    index_of = {stage.id: i for i, stage in enumerate(playbook.stages)}
    reachable = {playbook.initial_stage}
    frontier = [playbook.initial_stage]
    while frontier:
        stage_id = frontier.pop()
        if playbook.stage(stage_id).terminal:
            continue
        for transition in candidates_for(playbook, stage_id):
            target = transition.action.target_stage
            if target not in reachable:
                reachable.add(target)
                frontier.append(target)
    for stage in playbook.stages:
        path = f"stages[{index_of[stage.id]}]"
        if stage.id not in reachable:
            warning(path, f"stage {stage.id!r} cannot be reached from {playbook.initial_stage!r}")
        ways_out = [
            t for t in candidates_for(playbook, stage.id) if t.action.target_stage != stage.id
        ]
        if stage.terminal:
            own = [t.id for t in playbook.transitions if t.from_stage == stage.id]
            if own:
                warning(path, f"terminal stage {stage.id!r} has transitions {own} that never fire")
        elif not ways_out:
            warning(
                path,
                f"stage {stage.id!r} is not terminal but has no way out; mark it "
                "terminal or add a transition",
            )
        shadowing: Transition | None = None
        for transition in candidates_for(playbook, stage.id):
            condition = transition.condition
            if condition.type not in _AFTER_ANSWER:
                continue
            if shadowing is not None:
                where = f"transitions[{playbook.transitions.index(transition)}]"
                warning(
                    where,
                    f"transition {transition.id!r} can never fire from stage "
                    f"{stage.id!r}: {shadowing.id!r} (priority {shadowing.priority}) fires "
                    "after every turn first",
                )
            elif isinstance(condition, MaxTurnsCondition) and condition.count == 1:
                shadowing = transition


def llm_decision_targets(playbook: Playbook, stage_id: str) -> list[Transition]:
    """The `llm_decision` transitions the model may take from `stage_id` (one per target)."""
    seen: set[str] = set()
    out: list[Transition] = []
    for transition in candidates_for(playbook, stage_id):
        target = transition.action.target_stage
        if isinstance(transition.condition, LLMDecisionCondition) and target not in seen:
            seen.add(target)
            out.append(transition)
    return out


def timeout_transition(playbook: Playbook, stage_id: str) -> Transition | None:
    """The highest-priority `timeout` transition from `stage_id`, if any."""
    for transition in candidates_for(playbook, stage_id):
        if isinstance(transition.condition, TimeoutCondition):
            return transition
    return None
