"""Static checks of a playbook: references, reachability, dead transitions, all in one pass."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from llmrtc.catalog.toolkits import Toolkit
from llmrtc.errors import LLMRTCError
from llmrtc.playbook.callables import import_callable
from llmrtc.playbook.models import (
    TRANSITION_TOOL,
    CustomCondition,
    MaxTurnsCondition,
    Playbook,
    ToolCallCondition,
    Transition,
)
from llmrtc.tools.registry import ToolRegistry

__all__ = ["Finding", "PlaybookError", "stage_policies", "stage_tool_names", "validate_playbook"]

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


class PlaybookError(LLMRTCError, ValueError):
    """A playbook with error findings, raised where it is loaded or put to use."""

    def __init__(self, findings: list[Finding], source: str | None = None) -> None:
        self.findings = findings
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  {finding}" for finding in findings)
        super().__init__(f"invalid playbook{where}:\n{lines}")


def stage_tool_names(
    names: Iterable[str], registry: ToolRegistry, toolkits: Sequence[Toolkit] = ()
) -> list[str]:
    """The registry names a stage's (or `global_tools`') `tools:` entries stand for, in order.

    An entry is a tool name, a wire name, a catalog id (`crm:lookup@1.2.0` or `crm:lookup`) or
    a toolkit key; a toolkit stands for its members the registry has (a member the tools
    configuration did not permit is simply not offered). Unknown entries are left out
    (`validate_playbook` reports them).
    """
    kits = {kit.key: kit for kit in toolkits}
    out: list[str] = []
    for name in names:
        kit = kits.get(name)
        for member in kit.tools if kit is not None else (name,):
            tool = registry.get(member)
            if tool is not None:
                out.append(tool.name)
    return list(dict.fromkeys(out))


def stage_policies(
    names: Iterable[str], registry: ToolRegistry, toolkits: Sequence[Toolkit] = ()
) -> list[str]:
    """The policy sections (`"Title: policy"`, as `ToolInjection.prompt_section` writes
    them) of the toolkits named in `names` that have a member in `registry`, in order."""
    kits = {kit.key: kit for kit in toolkits}
    out = []
    for name in dict.fromkeys(names):
        kit = kits.get(name)
        if kit is not None and kit.policy and any(registry.has(m) for m in kit.tools):
            out.append(f"{kit.title}: {kit.policy}")
    return out


def validate_playbook(
    playbook: Playbook,
    registry: ToolRegistry | None = None,
    *,
    toolkits: Sequence[Toolkit] = (),
) -> list[Finding]:
    """Check a playbook's references and structure; never raises. Every finding is reported
    in one pass: the structure checks work around broken references instead of waiting for
    them to be fixed.

    Errors: unknown stage or tool references, duplicate ids (toolkit keys too), a missing
    initial stage, callables that cannot be imported. Warnings: unreachable stages,
    non-terminal stages without a way out, transitions that can never fire. Tool names are
    checked only when `registry` is given.

    Args:
        playbook: The playbook.
        registry: The tools its `tools:` lists may name (by name, wire name or catalog id).
        toolkits: Toolkits whose keys `tools:` lists may name too (a toolkit is not one tool:
            a `tool_choice` or a `tool_call` condition must name a tool).
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

    kits: dict[str, Toolkit] = {}
    for index, kit in enumerate(toolkits):
        first = kits.setdefault(kit.key, kit)
        if first is not kit:
            # Which one a stage got would depend on each consumer's order.
            error(
                f"toolkits[{index}]",
                f"two toolkits have the key {kit.key!r} (tools {list(first.tools)}, policy "
                f"{first.policy!r}; and tools {list(kit.tools)}, policy {kit.policy!r}); "
                "toolkit keys must be unique: rename one",
            )

    def check_tool(path: str, name: str, where: str, *, kit_ok: bool = False) -> None:
        if name == TRANSITION_TOOL:
            error(path, f"{TRANSITION_TOOL!r} is built in; do not list it ({where})")
        elif name in kits and not kit_ok:
            error(path, f"{name!r} in {where} is a toolkit; name one of its tools")
        elif name not in kits and registry is not None and not registry.has(name):
            refusal = registry.refusal(name)
            if refusal is not None:
                # A permission switched off (ToolsConfig) must not break the whole playbook:
                # the stage simply goes without the tool.
                warning(path, f"{refusal} ({where}): not permitted; not offered")
                return
            known = f"registered: {sorted([*registry.names(), *registry.hidden_names()])}"
            if kits:
                known += f"; toolkits: {sorted(kits)}"
            error(path, f"unknown tool {name!r} in {where}; {known}")

    for index, name in enumerate(playbook.global_tools):
        check_tool(f"global_tools[{index}]", name, "global_tools", kit_ok=True)
    for s_index, stage in enumerate(playbook.stages):
        for t_index, name in enumerate(stage.tools):
            path = f"stages[{s_index}].tools[{t_index}]"
            check_tool(path, name, f"stage {stage.id!r}", kit_ok=True)
        if isinstance(stage.tool_choice, dict):
            forced = stage.tool_choice.get("name")
            offered = {*stage.tools, *playbook.global_tools}
            if registry is not None:
                offered.update(stage_tool_names(offered, registry, toolkits))
            else:
                offered.update(m for k in offered if k in kits for m in kits[k].tools)
            if forced in kits:
                error(
                    f"stages[{s_index}].tool_choice",
                    f"stage {stage.id!r} forces tool {forced!r}, which is a toolkit; name one "
                    f"of its tools: {list(kits[forced].tools)}",
                )
            elif forced not in offered:
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

    _check_structure(playbook, warning)
    return findings


def _check_import(reference: str, path: str, where: str, error: Callable[[str, str], None]) -> None:
    try:
        import_callable(reference)
    except Exception as exc:  # ImportError, or whatever the module raised on import
        error(path, f"cannot import {reference!r} ({where}): {exc}")


def _check_structure(playbook: Playbook, warning: Callable[[str, str], None]) -> None:
    """Reachability, dead ends and shadowed transitions, safe with broken references: unknown
    stages are skipped, a duplicate stage id is checked once (at its first definition), and
    reachability is left out when the initial stage itself is unknown (every stage would be
    "unreachable" from nowhere, which says nothing the error does not)."""
    first_index: dict[str, int] = {}
    for index, stage in enumerate(playbook.stages):
        first_index.setdefault(stage.id, index)
    position = {id(t): i for i, t in enumerate(playbook.transitions)}
    reachable: set[str] | None = None
    if playbook.initial_stage in first_index:
        reachable = {playbook.initial_stage}
        frontier = [playbook.initial_stage]
        while frontier:
            stage_id = frontier.pop()
            if playbook.stage(stage_id).terminal:
                continue
            for transition in playbook.transitions_from(stage_id):
                target = transition.action.target_stage
                if target in first_index and target not in reachable:
                    reachable.add(target)
                    frontier.append(target)
    for stage_id, index in first_index.items():
        stage = playbook.stages[index]
        path = f"stages[{index}]"
        if reachable is not None and stage_id not in reachable:
            warning(path, f"stage {stage_id!r} cannot be reached from {playbook.initial_stage!r}")
        candidates = playbook.transitions_from(stage_id)
        # A transition to an unknown stage still counts as a way out: its target is the error.
        ways_out = [t for t in candidates if t.action.target_stage != stage_id]
        if stage.terminal:
            own = [t.id for t in playbook.transitions if t.from_stage == stage_id]
            if own:
                warning(path, f"terminal stage {stage_id!r} has transitions {own} that never fire")
        elif not ways_out:
            warning(
                path,
                f"stage {stage_id!r} is not terminal but has no way out; mark it "
                "terminal or add a transition",
            )
        shadowing: Transition | None = None
        for transition in candidates:
            condition = transition.condition
            if condition.type not in _AFTER_ANSWER:
                continue
            if shadowing is not None:
                warning(
                    f"transitions[{position[id(transition)]}]",
                    f"transition {transition.id!r} can never fire from stage "
                    f"{stage_id!r}: {shadowing.id!r} (priority {shadowing.priority}) fires "
                    "after every turn first",
                )
            elif isinstance(condition, MaxTurnsCondition) and condition.count == 1:
                shadowing = transition
