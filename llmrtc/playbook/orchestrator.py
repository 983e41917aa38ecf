"""`PlaybookOrchestrator`: where the playbook engine meets the turn loop.

It gives each stage its prompt, tools, tool choice and model settings, offers the built-in
`playbook_transition` tool where the model may choose the next stage, checks transitions after
tool batches and after answers (at most one per turn), applies their history effects, reports
them to the hooks, and owns the stage timer the engine deliberately does not have.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from llmrtc.abort import AbortSignal
from llmrtc.agent.events import AgentEvent, StageChanged
from llmrtc.agent.handler import read_handler_state, replace_messages, tool_speech_hints
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.late_results import is_late_result_message
from llmrtc.agent.preemption import Preemption
from llmrtc.agent.runner import BatchDecision, TurnRunner
from llmrtc.agent.settings import DEFAULT_MAX_TOOL_RESULT_CHARS, TurnSettings
from llmrtc.catalog.toolkits import Toolkit
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import SystemMessage, UserMessage
from llmrtc.llm.provider import LLMProvider
from llmrtc.llm.types import AnyMessage
from llmrtc.playbook._reports import report_change, report_initial_entry
from llmrtc.playbook._stage import stage_settings
from llmrtc.playbook.engine import PlaybookEngine, StageChange
from llmrtc.playbook.models import (
    TRANSITION_TOOL,
    KeywordCondition,
    LLMDecisionCondition,
    Playbook,
    Transition,
)
from llmrtc.playbook.validation import PlaybookError, validate_playbook
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools.calls import ToolCall, ToolCallResult
from llmrtc.tools.context import ToolContext
from llmrtc.tools.errors import ToolError
from llmrtc.tools.registry import ToolRegistry

logger = logging.getLogger(__name__)

__all__ = ["PlaybookOrchestrator", "StageChanged"]


class _TurnState:
    """What the orchestrator tracks during one turn."""

    def __init__(self) -> None:
        self.requested: tuple[str, str | None] | None = None  # from playbook_transition
        self.transitioned = False


class PlaybookOrchestrator:
    """Runs a playbook's turns.

    Example:
        playbook = load_playbook("playbooks/support.yaml")
        orchestrator = PlaybookOrchestrator(playbook, llm, load_playbook_tools(playbook))
        async for event in orchestrator.run_turn("Hi, I was charged twice"):
            ...  # everything TurnRunner yields, plus StageChanged

    A `TurnHandler`. The registry given is never modified (one registry may serve every
    session): each stage offers a view of it (the global and the stage's tools, plus this
    orchestrator's own `playbook_transition` where the model may choose the next stage), and
    only what a stage offers may run in it; a call to another stage's tool is refused with a
    result saying it is not available in this stage.

    A terminal stage ends the conversation: the `StageChanged` into it says
    `conversation_ended=True` (and so does `conversation_ended` afterwards). Turns after that
    are still answered, by the terminal stage's prompt (its tools, no transitions), so a user
    who goes on talking gets a polite answer; a front end may also choose to stop there.

    Background calls (`ToolDefinition(background=True)`) work as in `TurnRunner`, whose
    `late_results()`, `run_update_turn()`, `cancel_call()` and `aclose()` this passes through: a
    late result is delivered in whatever stage is current when it lands (a stage's tool list
    applies to new calls only), and the built-in `cancel_tool_call` is offered in every stage
    while a background call runs.
    """

    def __init__(
        self,
        playbook: Playbook,
        llm: LLMProvider,
        registry: ToolRegistry,
        *,
        engine: PlaybookEngine | None = None,
        history: ConversationHistory | None = None,
        hooks: Hooks | None = None,
        max_tool_rounds: int = 5,
        max_tool_result_chars: int | None = DEFAULT_MAX_TOOL_RESULT_CHARS,
        session_id: str | None = None,
        toolkits: Sequence[Toolkit] = (),
        **executor_options: Any,
    ) -> None:
        """Create an orchestrator; pass a restored `engine` and `history` to resume a session.

        Args:
            playbook: The stage machine.
            llm: The model provider.
            registry: Where the playbook's tools are found (never modified).
            engine: A restored engine (`PlaybookEngine.restore`); a new one by default.
            history: A restored history (`ConversationHistory.from_dict`).
            hooks: Observers of stages, transitions, turns, model requests and tools.
            max_tool_rounds: Tool batches per turn (see `TurnRunner`).
            max_tool_result_chars: The most characters of one tool result the model is sent,
                in every stage (see `TurnSettings.max_tool_result_chars`); None: no cap.
            session_id: Passed to tools and hooks.
            toolkits: Toolkits the stages' `tools:` may name by key (each stands for its
                members the registry has).
            **executor_options: `default_policy`, `max_concurrency`, `timeout`,
                `validate_arguments`, `resource_limits`, `approver`, `approval_timeout`,
                `duplicate_window` for this orchestrator's `ToolExecutor`.

        Raises:
            PlaybookError: for error findings of `validate_playbook` against `registry`.
            ValueError: if `registry` has a tool named `playbook_transition` or
                `cancel_tool_call` (both built in), or the engine runs another playbook.
        """
        findings = [
            f
            for f in validate_playbook(playbook, registry, toolkits=toolkits)
            if f.severity == "error"
        ]
        if findings:
            raise PlaybookError(findings, playbook.source_path)
        if registry.has(TRANSITION_TOOL):
            raise ValueError(f"{TRANSITION_TOOL!r} is built in; the registry must not define it")
        if engine is not None and engine.playbook.id != playbook.id:
            raise ValueError(f"engine runs playbook {engine.playbook.id!r}, not {playbook.id!r}")
        self.playbook = playbook
        self.registry = registry
        self._toolkits = tuple(toolkits)
        self.hooks = hooks
        self.session_id = session_id
        # The initial stage is entered (its on_enter run, then announced) at the first turn, not
        # here: a factory-built orchestrator that is then restore()d must have no side effect of
        # a session that starts now. An engine given already entered is never announced again.
        self.engine = engine if engine is not None else PlaybookEngine(playbook, enter=False)
        self.executor = ToolExecutor(registry, hooks=hooks, **executor_options)
        self.runner = TurnRunner(
            llm,
            self.executor,
            settings=TurnSettings(
                system_prompt="",
                tools=(),
                max_tool_rounds=max_tool_rounds,
                max_tool_result_chars=max_tool_result_chars,
            ),
            history=history,
            hooks=hooks,
            session_id=session_id,
            tool_metadata={"playbook": self.engine.control},
        )
        self._turn = _TurnState()
        self._last_activity = time.monotonic()
        self._configure_stage()

    @property
    def history(self) -> ConversationHistory:
        """The conversation history (shared with the turn runner)."""
        return self.runner.history

    @property
    def conversation_ended(self) -> bool:
        """True once a terminal stage was reached (turns are still answered, in that stage)."""
        return self.engine.completed

    # Stage configuration -----------------------------------------------------------------

    def _configure_stage(self) -> None:
        """Give the runner the current stage's prompt, tools, tool choice and model settings,
        in one settings assignment."""
        runner = self.runner
        runner.stage_id = self.engine.current_stage.id  # first: refusals name the stage
        runner.settings = stage_settings(
            self.playbook,
            self.engine,
            runner.executor.registry,
            self._toolkits,
            runner.settings,
            self._request_transition,
        )

    async def warm(self) -> None:
        """Send the current stage's system prompt and tools once with `max_tokens=1`
        (`TurnRunner.warm`), so a local server has them cached before the first real turn:
        `llmrtc serve` warms the first stage when it starts."""
        await self.runner.warm()

    def speech_hints(self) -> list[str]:
        """What the caller is likely to say in the current stage (the `HintingHandler`
        protocol): the words of the stage's tools (`tool_speech_hints`; `playbook_transition`'s
        stage ids are not speech), then the keywords of its keyword transitions on the user's
        words."""
        keywords = [
            keyword
            for transition in self.playbook.transitions_from(self.engine.current_stage.id)
            if isinstance(condition := transition.condition, KeywordCondition)
            and condition.source != "assistant"
            for keyword in condition.keywords
        ]
        tools = [d for d in self.runner.tool_definitions() if d.name != TRANSITION_TOOL]
        return list(dict.fromkeys([*tool_speech_hints(tools), *keywords]))

    async def _request_transition(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, str]:
        state = self._turn
        if state.transitioned or state.requested is not None:
            already = state.requested[0] if state.requested else self.engine.current_stage.id
            raise ToolError(
                f"a stage transition was already made in this turn (to {already!r}); only one "
                "transition per turn"
            )
        target = args["target_stage"]
        if self.engine.llm_decision_transition(target) is None:
            # Only reachable with validate_arguments=False (the schema's enum says the same).
            legal = [
                t.action.target_stage
                for t in self.playbook.llm_decision_targets(self.engine.current_stage.id)
            ]
            raise ToolError(f"target_stage {target!r} is not one of {legal}")
        state.requested = (target, args.get("reason"))
        return {"status": "transition scheduled", "target_stage": args["target_stage"]}

    # Resuming (the ResumableHandler protocol) ---------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """`{"history": ..., "playbook": PlaybookEngine.snapshot()}`: the conversation and
        where it is in the playbook, JSON-safe, for `restore` on a new orchestrator of the
        same playbook (take it between turns); `"background"` as for `TurnRunner.snapshot`."""
        state = self.runner.snapshot()
        state["playbook"] = self.engine.snapshot()
        return state

    def restore(self, state: Mapping[str, Any]) -> None:
        """Bring back a `snapshot()` before this orchestrator's first turn: the history, the
        engine's stage, context, intent and transitions; the stage's prompt and tools are
        configured and its stage timer starts now. The initial stage is not announced to the
        hooks (the session entered it long ago) and no stage callback runs. This orchestrator's
        `max_messages` is kept. Background calls are taken up as `TurnRunner.restore` does
        (adopted in the same process, else `aborted` late results), delivered in the restored
        stage.

        Raises:
            ValueError: the state is malformed, has no playbook snapshot, or is of another
                playbook or a stage this playbook lacks; nothing changes.
            RuntimeError: a turn already ran on this orchestrator.
        """
        if self.runner.turns_started:
            raise RuntimeError("PlaybookOrchestrator.restore() must come before the first turn")
        history, saved, background = read_handler_state(state)
        if saved is None:
            raise ValueError(
                f"handler state has no playbook snapshot; this orchestrator runs playbook "
                f"{self.playbook.id!r}"
            )
        try:
            engine = PlaybookEngine.restore(self.playbook, saved)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            detail = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
            raise ValueError(f"handler state 'playbook' cannot be restored: {detail}") from exc
        if history is not None:
            replace_messages(self.history, history)
        if background is not None:
            self.runner.restore({"background": state["background"]})
        self.engine = engine
        # Tools reach the playbook through the runner's metadata: point it at the new engine.
        self.runner.tool_metadata = {
            **(self.runner.tool_metadata or {}),
            "playbook": engine.control,
        }
        self._turn = _TurnState()
        self._last_activity = time.monotonic()
        self._configure_stage()

    # Turns ---------------------------------------------------------------------------------

    def preempt(self, user_text: str) -> Preemption:
        """The current stage's first request for `user_text`, to start ahead of the turn
        (`TurnRunner.preempt`, the `PreemptingHandler` protocol). A turn that begins with a
        stage change (the stage's timer, a transition decided meanwhile) asks anew."""
        return self.runner.preempt(user_text)

    async def run_turn(
        self,
        user_text: str | None,
        *,
        abort_signal: AbortSignal | None = None,
        turn_id: str | None = None,
        preemption: Preemption | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run one turn in the current stage; yields `TurnRunner`'s events plus `StageChanged`.

        `TurnCompleted` comes last, with the text of both phases; a `StageChanged` decided after
        the answer comes just before it. A model failure ends the turn as `TurnRunner`
        describes (an apology, no stage change); the next turn runs in the same stage.
        `turn_id` names the turn in hooks and spans (None: a fresh id); `preemption` is
        `preempt(user_text)`'s early answer (`TurnRunner.run_turn`).
        """
        run = self._run(user_text, abort_signal, turn_id=turn_id, preemption=preemption)
        async with aclosing(run) as events:
            async for event in events:
                yield event

    def next_deadline(self) -> float | None:
        """When the current stage's `timeout` transition is due (a `time.monotonic()` value),
        or None. The timer restarts with every turn: it measures the user's silence."""
        if self.engine.completed:
            return None
        transition = self.playbook.timeout_transition(self.engine.current_stage.id)
        if transition is None:
            return None
        return self._last_activity + transition.condition.seconds  # type: ignore[union-attr]

    async def run_timeout_turn(
        self, *, abort_signal: AbortSignal | None = None, turn_id: str | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Apply the stage's `timeout` transition and run a turn without a user message in the
        new stage (the agent speaks up). Yields `StageChanged`, then the turn's events; yields
        nothing when the current stage has no timeout transition (`next_deadline()` is None),
        e.g. because the turn before it moved to another stage.
        """
        stage_id = self.engine.current_stage.id
        transition = None if self.engine.completed else self.playbook.timeout_transition(stage_id)
        if transition is None:
            return
        await self._announce()
        self._turn = _TurnState()
        yield await self._apply(transition, reason="timeout", user_text=None)
        self._turn.transitioned = True
        async with aclosing(self._run(None, abort_signal, fresh=False, turn_id=turn_id)) as events:
            async for event in events:
                yield event

    # Background calls ------------------------------------------------------------------------

    def late_results(self) -> AsyncIterator[ToolCallResult]:
        """Each final result of a background call as it lands (see `TurnRunner.late_results`)."""
        return self.runner.late_results()

    @property
    def late_results_waiting(self) -> bool:
        """Whether a late result landed that is not in the history yet (see
        `TurnRunner.late_results_waiting`)."""
        return self.runner.late_results_waiting

    async def run_update_turn(
        self, *, abort_signal: AbortSignal | None = None, turn_id: str | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """A turn in the current stage with no new user message, whose model request carries
        the late results that landed (see `TurnRunner.run_update_turn`). It is a turn of the
        stage like any other (counted, its transitions checked, with no user text); yields
        nothing when no late result is waiting."""
        if not self.runner.late_results_waiting:
            return
        async with aclosing(self._run(None, abort_signal, turn_id=turn_id)) as events:
            async for event in events:
                yield event

    async def cancel_call(self, call_id: str) -> ToolCallResult | None:
        """Stop the running background call `call_id` (see `TurnRunner.cancel_call`)."""
        return await self.runner.cancel_call(call_id)

    async def aclose(self) -> None:
        """End the session for good: stop every running background call, each with its one
        final result (`aborted`), and return once all have landed (see `TurnRunner.aclose`).
        Idempotent."""
        await self.runner.aclose()

    async def _run(
        self,
        user_text: str | None,
        abort_signal: AbortSignal | None,
        *,
        fresh: bool = True,
        turn_id: str | None = None,
        preemption: Preemption | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        await self._announce()
        if fresh:
            self._turn = _TurnState()
        state = self._turn

        async def after_answer(text: str) -> list[StageChanged]:
            # Inside the turn (before its end is reported), so the stage change belongs to it.
            # An interrupted answer never gets here: it is not a turn answered.
            transition = self.engine.after_turn(user_text, text, count_only=state.transitioned)
            if transition is None:
                return []
            return [await self._apply(transition, reason=None, user_text=user_text, answered=True)]

        runner_events = self.runner.run_turn(
            user_text,
            abort_signal=abort_signal,
            after_batch=self._after_batch,
            after_answer=after_answer,
            turn_id=turn_id,
            preemption=preemption,
        )
        try:
            async with aclosing(runner_events) as events:
                async for event in events:
                    yield event
        finally:
            self._last_activity = time.monotonic()

    async def _after_batch(
        self, calls: list[ToolCall], results: list[ToolCallResult]
    ) -> BatchDecision:
        """`llm_decision` and `tool_call` conditions, right after each tool batch."""
        state = self._turn
        if state.transitioned:
            return BatchDecision()
        requested = state.requested
        transition = self.engine.after_tool_batch(
            calls, results, requested[0] if requested else None
        )
        if transition is None:
            return BatchDecision()
        reason = (
            requested[1]
            if requested and isinstance(transition.condition, LLMDecisionCondition)
            else None
        )
        user_text = _last_user_text(self.history)
        changed = await self._apply(transition, reason=reason, user_text=user_text)
        state.transitioned = True
        # Two-phase: the new stage answers once, without tool use; otherwise the loop goes on
        # in the new stage (its prompt and tools) as ordinary rounds.
        return BatchDecision(events=(changed,), final=self.engine.current_stage.two_phase)

    # Applying transitions -------------------------------------------------------------------

    async def _apply(
        self,
        transition: Transition,
        *,
        reason: str | None,
        user_text: str | None,
        answered: bool = False,
    ) -> StageChanged:
        change = self.engine.apply(transition, reason=reason)
        self._turn.transitioned = True
        if change.clear_history:
            self.history.clear(keep=self._kept_on_clear(user_text, answered))
        if change.transition_message:
            self.history.append(SystemMessage(change.transition_message))
        self._configure_stage()
        self._last_activity = time.monotonic()
        await self._report(change)
        return StageChanged(
            change.from_stage,
            change.to_stage,
            change.transition_id,
            reason,
            conversation_ended=self.engine.completed,
        )

    def _kept_on_clear(self, user_text: str | None, answered: bool) -> list[AnyMessage]:
        """What `clear_history` keeps of the turn in progress: before its answer, the user's
        message (the new stage answers it); after it, the whole turn (so the next one does not
        answer it again). A timer-driven turn has no user message to keep."""
        messages = list(self.history.messages)
        users = [i for i, m in enumerate(messages) if isinstance(m, UserMessage)]
        # Late results the turn took and has not answered yet go on to the new stage (a
        # background call's outcome is told once, never lost to a stage change).
        unanswered = (
            []
            if answered
            else [m for m in messages[users[-1] if users else 0 :] if is_late_result_message(m)]
        )
        if user_text is None or not users:
            return unanswered
        return messages[users[-1] :] if answered else [messages[users[-1]], *unanswered]

    async def _report(self, change: StageChange) -> None:
        # Stage changes are applied inside the runner's turn (after a batch or after the
        # answer); a timer-driven one comes before its turn starts and has no turn id.
        await report_change(
            self.hooks, change, session_id=self.session_id, turn_id=self.runner.current_turn_id
        )

    async def _announce(self) -> None:
        """Enter the initial stage (its `on_enter`) and report it, once, before the first turn;
        nothing for an engine that already entered (restored, or given entered)."""
        if self.engine.entered:
            return
        self.engine.enter()
        await report_initial_entry(self.hooks, self.engine, session_id=self.session_id)


def _last_user_text(history: ConversationHistory) -> str | None:
    for message in reversed(history.messages):
        if isinstance(message, UserMessage):
            return message.content
    return None
