"""`PlaybookEngine`: the pure state machine of a playbook (no I/O, no model, no timers).

The orchestrator feeds it facts (tool results, a turn's texts) and asks which transition fires;
the engine applies it, runs the stage callbacks, and snapshots its state as JSON to resume.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from llmrtc.playbook._conditions import has_word, matches
from llmrtc.playbook.callables import import_callable
from llmrtc.playbook.models import (
    CustomCondition,
    IntentCondition,
    KeywordCondition,
    LLMDecisionCondition,
    MaxTurnsCondition,
    Playbook,
    Stage,
    ToolCallCondition,
    Transition,
)
from llmrtc.playbook.validation import PlaybookError, validate_playbook
from llmrtc.tools.calls import ToolCall, ToolCallResult

__all__ = ["PlaybookControl", "PlaybookEngine", "StageChange", "StageHookEvent", "TurnFacts"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageHookEvent:
    """What a stage's `on_enter` / `on_exit` callback receives."""

    stage_id: str
    """The stage entered (on_enter) or left (on_exit)."""
    other_stage_id: str | None
    """The stage left (on_enter; None for the initial stage) or entered (on_exit)."""
    data: Mapping[str, Any]
    """The firing transition's `data`."""
    context: Mapping[str, Any]
    """The playbook context (read-only)."""


@dataclass(frozen=True)
class TurnFacts:
    """What a `custom` condition's `evaluate` receives after a turn's answer."""

    stage_id: str
    turns_in_stage: int
    user_text: str | None
    assistant_text: str
    context: Mapping[str, Any]
    intent: str | None
    intent_confidence: float


@dataclass(frozen=True)
class StageChange:
    """A transition the engine applied."""

    from_stage: str
    to_stage: str
    transition_id: str
    condition: str
    reason: str | None
    transition_message: str | None
    clear_history: bool
    data: Mapping[str, Any]
    errors: tuple[tuple[str, BaseException], ...] = field(default=())
    """Stage callbacks that raised (`("stage.on_exit", exc)`): isolated, never fatal."""


class PlaybookControl:
    """What tools see as `ctx.metadata["playbook"]`: they may set the intent and the context."""

    def __init__(self, engine: PlaybookEngine) -> None:
        self._engine = engine

    @property
    def stage_id(self) -> str:
        """The current stage's id."""
        return self._engine.current_stage.id

    def set_intent(self, intent: str, confidence: float = 1.0) -> None:
        """Report the user's intent (checked by `intent` conditions after the turn)."""
        self._engine.set_intent(intent, confidence)

    def update_context(self, **values: Any) -> None:
        """Store values in the playbook context."""
        self._engine.update_context(**values)


class PlaybookEngine:
    """The state of one conversation through a playbook.

    Example:
        engine = PlaybookEngine(playbook)
        engine.current_stage.id        # "greeting"
        saved = engine.snapshot()      # JSON-safe
        engine = PlaybookEngine.restore(playbook, saved)
        later = PlaybookEngine(playbook, enter=False)  # on_enter runs at later.enter()
    """

    def __init__(
        self, playbook: Playbook, *, clock: Callable[[], float] = time.time, enter: bool = True
    ) -> None:
        """Start the playbook in its initial stage.

        Args:
            playbook: The stage machine (validated here).
            clock: Wall-clock time source for `stage_entered_at` and transition records.
            enter: Run the initial stage's `on_enter` now (the default). With False the
                engine is in the initial stage but has not entered it: call `enter()` when
                the conversation really starts (a resumed session never does).

        Raises:
            PlaybookError: if `validate_playbook` finds errors.
        """
        errors = [f for f in validate_playbook(playbook) if f.severity == "error"]
        if errors:
            raise PlaybookError(errors, playbook.source_path)
        self.playbook = playbook
        self._clock = clock
        self._stage = playbook.stage(playbook.initial_stage)
        self.turns_in_stage = 0
        """Turns answered in the current stage."""
        self.stage_entered_at = clock()
        """Wall-clock epoch seconds when the current stage was entered."""
        self._context: dict[str, Any] = {}
        self._intent: tuple[str, float] | None = None
        self.transitions: list[dict[str, Any]] = []
        """Every transition applied: `from_stage`, `to_stage`, `transition_id`, `reason`, `at`."""
        self.control = PlaybookControl(self)
        """The object tools get as `ctx.metadata["playbook"]`."""
        self.entry_errors: tuple[tuple[str, BaseException], ...] = ()
        """Errors of the initial stage's `on_enter` (isolated; the orchestrator reports them)."""
        self._entered = False
        if enter:
            self._enter_initial()

    def enter(self) -> tuple[tuple[str, BaseException], ...]:
        """Enter the initial stage: run its `on_enter` once (errors isolated and kept in
        `entry_errors`, which this also returns).

        Raises:
            RuntimeError: if the engine already entered (at construction, by an earlier
                `enter()`, or because it was restored).
        """
        if self._entered:
            raise RuntimeError(
                f"PlaybookEngine of playbook {self.playbook.id!r} already entered stage "
                f"{self._stage.id!r}; enter() runs once, on an engine built with enter=False"
            )
        self.stage_entered_at = self._clock()  # entered now, not when built
        return self._enter_initial()

    def _enter_initial(self) -> tuple[tuple[str, BaseException], ...]:
        self._entered = True
        self.entry_errors = self._call_hook(self._stage, "on_enter", None, {})
        return self.entry_errors

    # State ---------------------------------------------------------------------------------

    @property
    def current_stage(self) -> Stage:
        """The stage the conversation is in."""
        return self._stage

    @property
    def entered(self) -> bool:
        """True once the conversation entered its stage: by `enter()` (or at construction),
        by a transition, or because the engine was restored."""
        return self._entered

    @property
    def context(self) -> Mapping[str, Any]:
        """The playbook context (read-only; see `update_context`)."""
        return MappingProxyType(self._context)

    @property
    def completed(self) -> bool:
        """True in a terminal stage: no transition fires any more."""
        return self._stage.terminal

    @property
    def intent(self) -> tuple[str, float] | None:
        """The last intent set in this stage and its confidence."""
        return self._intent

    def update_context(self, **values: Any) -> None:
        """Store values in the context (they must be JSON-serialisable for snapshots)."""
        self._context.update(values)

    def set_intent(self, intent: str, confidence: float = 1.0) -> None:
        """Report the user's intent; `intent` conditions check it after the turn's answer."""
        if not 0 <= confidence <= 1:
            raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
        self._intent = (intent, confidence)

    # Conditions ----------------------------------------------------------------------------

    def candidates(self) -> list[Transition]:
        """Transitions that may fire now (none in a terminal stage), in the order checked."""
        if self.completed:
            return []
        return self.playbook.transitions_from(self._stage.id)

    def llm_decision_transition(self, target_stage: str) -> Transition | None:
        """The `llm_decision` transition to `target_stage` from here, if there is one."""
        for transition in self.candidates():
            if (
                isinstance(transition.condition, LLMDecisionCondition)
                and transition.action.target_stage == target_stage
            ):
                return transition
        return None

    def after_tool_batch(
        self,
        calls: Sequence[ToolCall],
        results: Sequence[ToolCallResult],
        requested_target: str | None = None,
    ) -> Transition | None:
        """The transition fired by a tool batch: `llm_decision` (the model asked for
        `requested_target`) or `tool_call` (a matching call ended `ok`), in priority order."""
        ok_calls = [c for c, r in zip(calls, results, strict=True) if r.status == "ok"]
        for transition in self.candidates():
            condition = transition.condition
            if isinstance(condition, LLMDecisionCondition):
                if requested_target == transition.action.target_stage:
                    return transition
                continue
            if isinstance(condition, ToolCallCondition) and any(
                matches(condition, call) for call in ok_calls
            ):
                return transition
        return None

    def after_turn(
        self, user_text: str | None, assistant_text: str, *, count_only: bool = False
    ) -> Transition | None:
        """Count the answered turn, then return the transition fired by `keyword`, `intent`,
        `max_turns` or `custom` conditions (the first that holds, in priority order).

        With `count_only` (a transition already fired this turn) nothing is evaluated.
        """
        self.turns_in_stage += 1
        if count_only:
            return None
        facts = TurnFacts(
            stage_id=self._stage.id,
            turns_in_stage=self.turns_in_stage,
            user_text=user_text,
            assistant_text=assistant_text,
            context=self.context,
            intent=self._intent[0] if self._intent else None,
            intent_confidence=self._intent[1] if self._intent else 0.0,
        )
        for transition in self.candidates():
            if self._holds(transition, facts):
                return transition
        return None

    def _holds(self, transition: Transition, facts: TurnFacts) -> bool:
        condition = transition.condition
        if isinstance(condition, KeywordCondition):
            texts = {
                "user": [facts.user_text or ""],
                "assistant": [facts.assistant_text],
                "any": [facts.user_text or "", facts.assistant_text],
            }[condition.source]
            return any(has_word(text, keyword) for text in texts for keyword in condition.keywords)
        if isinstance(condition, IntentCondition):
            return (
                facts.intent == condition.intent
                and facts.intent_confidence >= condition.min_confidence
            )
        if isinstance(condition, MaxTurnsCondition):
            return facts.turns_in_stage >= condition.count
        if isinstance(condition, CustomCondition):
            evaluate = condition.evaluate
            try:
                function = import_callable(evaluate) if isinstance(evaluate, str) else evaluate
                return bool(function(facts))
            except Exception:
                logger.exception("custom condition of transition %r raised", transition.id)
                return False
        return False  # llm_decision, tool_call and timeout are checked elsewhere

    # Applying ---------------------------------------------------------------------------------

    def apply(self, transition: Transition, *, reason: str | None = None) -> StageChange:
        """Move along `transition`: exit callbacks, context data, entry callbacks."""
        action = transition.action
        old = self._stage
        new = self.playbook.stage(action.target_stage)
        self._entered = True
        errors = self._call_hook(old, "on_exit", new.id, action.data)
        self._context.update(action.data)
        self._stage = new
        self.turns_in_stage = 0
        self._intent = None
        self.stage_entered_at = self._clock()
        self.transitions.append(
            {
                "from_stage": old.id,
                "to_stage": new.id,
                "transition_id": transition.id,
                "reason": reason,
                "at": self.stage_entered_at,
            }
        )
        errors += self._call_hook(new, "on_enter", old.id, action.data)
        return StageChange(
            from_stage=old.id,
            to_stage=new.id,
            transition_id=transition.id,
            condition=transition.condition.type,
            reason=reason,
            transition_message=action.transition_message,
            clear_history=action.clear_history,
            data=MappingProxyType(dict(action.data)),
            errors=errors,
        )

    def _call_hook(
        self, stage: Stage, hook: str, other: str | None, data: Mapping[str, Any]
    ) -> tuple[tuple[str, BaseException], ...]:
        reference = getattr(stage, hook)
        if reference is None:
            return ()
        event = StageHookEvent(stage.id, other, MappingProxyType(dict(data)), self.context)
        try:
            function = import_callable(reference) if isinstance(reference, str) else reference
            function(event)
        except Exception as exc:
            logger.exception("stage %r %s callback raised", stage.id, hook)
            return ((f"stage.{hook}", exc),)
        return ()

    # Snapshots ----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The whole state as a JSON-safe dict; it changes only when the state does."""
        snapshot: dict[str, Any] = json.loads(
            json.dumps(
                {
                    "playbook_id": self.playbook.id,
                    "playbook_version": self.playbook.version,
                    "current_stage": self._stage.id,
                    "turns_in_stage": self.turns_in_stage,
                    "stage_entered_at": self.stage_entered_at,
                    "context": self._context,
                    "intent": list(self._intent) if self._intent else None,
                    "transitions": self.transitions,
                    "completed": self.completed,
                    "entered": self._entered,
                },
                default=str,
            )
        )
        return snapshot

    @classmethod
    def restore(
        cls,
        playbook: Playbook,
        snapshot: Mapping[str, Any],
        *,
        clock: Callable[[], float] = time.time,
    ) -> PlaybookEngine:
        """Resume from `snapshot()` output (no stage callbacks run; a snapshot taken before
        `enter()` gives an engine that has not entered either).

        Raises:
            ValueError: if the snapshot is of another playbook or names an unknown stage.
        """
        if snapshot.get("playbook_id") != playbook.id:
            raise ValueError(
                f"snapshot is of playbook {snapshot.get('playbook_id')!r}, not {playbook.id!r}"
            )
        engine = cls(playbook, clock=clock, enter=False)
        # A resumed session entered long ago (so did one saved before the key existed).
        engine._entered = bool(snapshot.get("entered", True))
        engine._stage = playbook.stage(snapshot["current_stage"])
        engine.turns_in_stage = int(snapshot["turns_in_stage"])
        engine.stage_entered_at = float(snapshot["stage_entered_at"])
        engine._context = dict(snapshot.get("context", {}))
        intent = snapshot.get("intent")
        engine._intent = (str(intent[0]), float(intent[1])) if intent else None
        engine.transitions = [dict(t) for t in snapshot.get("transitions", [])]
        return engine
