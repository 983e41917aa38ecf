"""What the orchestrator tells the hooks about stages: a transition (stage exit, transition,
stage entry, in that order), the stage callbacks that raised, the initial stage's entry."""

from __future__ import annotations

from collections.abc import Sequence

from llmrtc.playbook.engine import PlaybookEngine, StageChange
from llmrtc.telemetry.events import ErrorEvent, StageEnterEvent, StageExitEvent, TransitionEvent
from llmrtc.telemetry.hooks import Hooks, emit

__all__ = ["report_change", "report_errors", "report_initial_entry"]


async def report_change(
    hooks: Hooks | None, change: StageChange, *, session_id: str | None, turn_id: str | None
) -> None:
    """Report an applied transition, then the errors of its stage callbacks."""
    await emit(
        hooks,
        StageExitEvent(
            stage_id=change.from_stage,
            to_stage=change.to_stage,
            session_id=session_id,
            turn_id=turn_id,
            data=change.data,
        ),
    )
    await emit(
        hooks,
        TransitionEvent(
            from_stage=change.from_stage,
            to_stage=change.to_stage,
            transition_id=change.transition_id,
            session_id=session_id,
            turn_id=turn_id,
            condition=change.condition,
            reason=change.reason,
        ),
    )
    await emit(
        hooks,
        StageEnterEvent(
            stage_id=change.to_stage,
            from_stage=change.from_stage,
            session_id=session_id,
            turn_id=turn_id,
            data=change.data,
        ),
    )
    await report_errors(
        hooks,
        change.errors,
        change.to_stage,
        exited=change.from_stage,
        session_id=session_id,
        turn_id=turn_id,
    )


async def report_errors(
    hooks: Hooks | None,
    errors: Sequence[tuple[str, BaseException]],
    stage_id: str,
    *,
    exited: str | None = None,
    session_id: str | None,
    turn_id: str | None = None,
) -> None:
    """Report stage callbacks that raised (`("stage.on_exit", exc)` pairs) as `on_error`."""
    for where, error in errors:
        # The stage whose callback raised: the one left for on_exit.
        stage = exited if where == "stage.on_exit" and exited is not None else stage_id
        event = ErrorEvent(
            error=error,
            where=where,
            session_id=session_id,
            turn_id=turn_id,
            stage_id=stage,
        )
        await emit(hooks, event)


async def report_initial_entry(
    hooks: Hooks | None, engine: PlaybookEngine, *, session_id: str | None
) -> None:
    """Report the initial stage's entry (and its `on_enter` errors), before the first turn."""
    stage = engine.current_stage
    await emit(
        hooks,
        StageEnterEvent(stage_id=stage.id, session_id=session_id),
    )
    await report_errors(hooks, engine.entry_errors, stage.id, session_id=session_id)
