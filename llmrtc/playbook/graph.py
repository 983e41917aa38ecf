"""A playbook as a Mermaid state diagram (`llmrtc validate --graph`)."""

from __future__ import annotations

from llmrtc.playbook.models import Playbook

__all__ = ["to_mermaid"]


def _state(stage_id: str) -> str:
    # Mermaid state ids allow letters, digits and underscores only.
    return "".join(c if c.isalnum() or c == "_" else "_" for c in stage_id)


def to_mermaid(playbook: Playbook) -> str:
    """`stateDiagram-v2` text: stages, transitions labelled with their condition, `[*]` for the
    start and for terminal stages. A `"*"` transition is drawn from every other stage."""
    lines = ["stateDiagram-v2", f"    [*] --> {_state(playbook.initial_stage)}"]
    for stage in playbook.stages:
        if stage.name and stage.name != stage.id:
            lines.append(f"    {_state(stage.id)} : {stage.name}")
    for transition in playbook.transitions:
        target = transition.action.target_stage
        label = transition.condition.type
        sources = (
            [s.id for s in playbook.stages if s.id != target and not s.terminal]
            if transition.from_stage == "*"
            else [transition.from_stage]
        )
        for source in sources:
            lines.append(f"    {_state(source)} --> {_state(target)} : {label}")
    for stage in playbook.stages:
        if stage.terminal:
            lines.append(f"    {_state(stage.id)} --> [*]")
    return "\n".join(lines)
