"""`TurnRunner`: one conversational turn, the model ⇄ tools loop, streamed as it happens."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from llmrtc.abort import AbortSignal
from llmrtc.agent._round import model_request
from llmrtc.agent.cancel_tool import CANCEL_TOOL, CancelToolOffer
from llmrtc.agent.events import AgentEvent
from llmrtc.agent.handler import read_handler_state, replace_messages, tool_speech_hints
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.late_results import LateResults
from llmrtc.agent.preemption import Preemption
from llmrtc.agent.settings import DEFAULT_MAX_TOOL_RESULT_CHARS, TurnSettings
from llmrtc.agent.turn import AfterAnswer, AfterBatch, BatchDecision, Turn
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import UserMessage
from llmrtc.llm.provider import LLMProvider
from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.types import LLMRequest, ToolChoice
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools.calls import ToolCallResult
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.registry import ToolRegistry

# `run_turn`'s callbacks are part of this module's API: they are named here as well as in
# `llmrtc.agent.turn`, where the turn that awaits them lives.
__all__ = ["AfterAnswer", "AfterBatch", "BatchDecision", "TurnRunner"]

logger = logging.getLogger(__name__)


class TurnRunner:
    """Runs turns: the model answers, its tool calls run as batches on the executor, their
    results go back to the model, until it answers without tools or the round limit is hit.

    A `TurnHandler`. What the model is offered is exactly what may run: one
    `registry.scoped(...)` view, built from `settings`, gives the request's tool definitions
    and is the only set of tools each batch may run (any other call gets a refusal result).

    A turn always ends with something said:
      - a model or server failure (`LLMError`, after the provider's own retries) yields
        `TurnFailed`, then `settings.error_reply` as text, and ends with
        `TurnCompleted(stop_reason="error")`; the history stays valid (what was said before the
        failure is kept, marked interrupted, then the apology) and the next turn works;
      - a response that would end the turn with nothing said in it at all (no text in the
        turn, no tool call to run) is asked again once without tools; if that is empty too,
        `settings.empty_reply` is said (None: the turn ends silently).

    Example:
        runner = TurnRunner(llm, ToolExecutor(registry), system_prompt="You are a helpful agent.")
        async for event in runner.run_turn("What's the weather in Tokyo?"):
            if isinstance(event, TextDelta):
                print(event.text, end="")

    Background calls (`ToolDefinition(background=True)`): a turn answers such a call
    `"running"` and goes on; its final result lands later, as a *late result*. Before every
    model request, the late results that landed go into the history (as a system note naming
    the call id and tool: see `llmrtc.agent.late_results`), whether or not anyone listens;
    `late_results()` yields each to the application as it lands, `run_update_turn()` lets the
    agent speak about them at once, and `cancel_call()` stops a running one. While one runs,
    each model request also offers the built-in `cancel_tool_call` (naming the running calls),
    so the model can stop one itself (see `llmrtc.agent.cancel_tool`); `aclose()` stops them all
    when the session ends for good. The runner is the one reader of its executor's background
    results: give each runner its own executor.

    The runner holds no event-loop-bound state between turns: each turn may run under a new
    event loop (as long as the provider allows it); its background calls run on the loop that
    started them.
    """

    def __init__(
        self,
        llm: LLMProvider,
        executor: ToolExecutor,
        *,
        system_prompt: str | None = None,
        tools: Sequence[str] | None = None,
        tool_choice: ToolChoice = "auto",
        max_tool_rounds: int = 5,
        model_settings: ModelSettings | None = None,
        max_tool_result_chars: int | None = DEFAULT_MAX_TOOL_RESULT_CHARS,
        settings: TurnSettings | None = None,
        hooks: Hooks | None = None,
        history: ConversationHistory | None = None,
        session_id: str | None = None,
        tool_metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Create a runner.

        Args:
            llm: The model provider.
            executor: Runs the tool calls (its registry holds the tools).
            system_prompt: Sent first with every request.
            tools: Names of the registry's tools to offer; None offers all of them. Only
                offered tools run: a call to any other gets a refusal result.
            tool_choice: `"auto"`, `"required"`, `"none"` or `{"name": ...}`; a forcing choice
                applies to the first model request of a turn only.
            max_tool_rounds: Tool batches per turn; after the last, one more request without
                tool use ends the turn.
            model_settings: Model name and sampling options for every request.
            max_tool_result_chars: The most characters of one tool result the model is sent
                (a longer one is cut, saying so: see `TurnSettings.max_tool_result_chars`);
                None sends every result whole.
            settings: All of the above in one `TurnSettings` (instead of those arguments),
                with its extra tools and fallback lines.
            hooks: Observers of turns, model requests and (for this runner's batches) tools.
            history: The conversation so far (a new empty one by default).
            session_id: Passed to tools and hooks.
            tool_metadata: Read-only values every tool sees in `ctx.metadata`.

        Raises:
            ValueError: for unknown tool names, a tool_choice that names a tool not offered,
                `max_tool_rounds` below 0, `settings` given together with the arguments
                it replaces, or a registry with a tool named `cancel_tool_call` (built in).
        """
        if executor.registry.has(CANCEL_TOOL):
            raise ValueError(f"{CANCEL_TOOL!r} is built in; the registry must not define it")
        if settings is None:
            if system_prompt is None:
                raise ValueError("TurnRunner needs system_prompt=... (or settings=TurnSettings)")
            settings = TurnSettings(
                system_prompt=system_prompt,
                tools=tuple(tools) if tools is not None else None,
                tool_choice=tool_choice,
                max_tool_rounds=max_tool_rounds,
                model=model_settings or ModelSettings(),
                max_tool_result_chars=max_tool_result_chars,
            )
        elif (
            system_prompt is not None
            or tools is not None
            or tool_choice != "auto"
            or max_tool_rounds != 5
            or model_settings is not None
            or max_tool_result_chars != DEFAULT_MAX_TOOL_RESULT_CHARS
        ):
            raise ValueError(
                "pass either settings=TurnSettings(...) or system_prompt/tools/tool_choice/"
                "max_tool_rounds/model_settings/max_tool_result_chars, not both"
            )
        self.llm = llm
        self.executor = executor
        self.hooks = hooks
        self.history = history if history is not None else ConversationHistory()
        self.session_id = session_id
        self._stage_id: str | None = None
        self.tool_metadata = tool_metadata
        self.turns_started = 0
        """Turns started on this runner (`restore` is only allowed before the first)."""
        self._turn: Turn | None = None  # the turn running now
        self._late = LateResults(executor)
        self._cancel = CancelToolOffer(executor)
        self.settings = settings

    # Settings ------------------------------------------------------------------------------

    @property
    def settings(self) -> TurnSettings:
        """How turns run; assign a new `TurnSettings` to reconfigure (checked at once)."""
        return self._settings

    @settings.setter
    def settings(self, settings: TurnSettings) -> None:
        view = self._view_for(settings)
        # Checks tool_choice against the tools (strict: a mistake in these settings raises now).
        model_request(self.history, settings, view, 0, strict=True)
        self._configure(settings, view)

    def _configure(self, settings: TurnSettings, view: ToolRegistry) -> None:
        self._settings = settings
        self._view = view
        if self._turn is not None:
            # A change during a turn (a playbook transition after a tool batch) applies from
            # the turn's next model request.
            self._turn.reconfigure(settings, view, self._stage_id)

    def _view_for(self, settings: TurnSettings, *, strict: bool = True) -> ToolRegistry:
        """The one set of tools these settings offer, and the only ones a batch may run.

        `strict`: a name the registry lacks is a `ValueError` (when settings are assigned);
        otherwise (at the start of a turn, in a live session) it is left out and logged.
        """
        registry = self.executor.registry
        names = registry.names() if settings.tools is None else settings.tools
        unknown = [name for name in names if not registry.has(name)]
        if unknown:
            if strict:
                raise ValueError(
                    f"unknown tools {unknown}; the executor's registry has {registry.names()}"
                )
            logger.warning("tools %s left the registry: no longer offered", unknown)
            names = [name for name in names if name not in unknown]
        scope = f"stage {self.stage_id!r}" if self.stage_id is not None else None
        return registry.scoped(names, extra_tools=settings.extra_tools, scope=scope)

    @property
    def stage_id(self) -> str | None:
        """The playbook stage turns run in (set by the orchestrator): named in hook events and
        in the refusal of a tool the stage does not offer."""
        return self._stage_id

    @stage_id.setter
    def stage_id(self, stage_id: str | None) -> None:
        self._stage_id = stage_id
        # Only the scope's name changes (its refusals name the stage): the settings were checked
        # when assigned, and a tool that left the registry since is dropped, not an error (the
        # orchestrator sets the stage just before the stage's own settings).
        self._configure(self._settings, self._view_for(self._settings, strict=False))

    @property
    def current_turn_id(self) -> str | None:
        """The id of the turn running now (None between turns)."""
        return self._turn.id if self._turn is not None else None

    @property
    def system_prompt(self) -> str:
        """The system prompt of `settings`."""
        return self._settings.system_prompt

    @property
    def tools(self) -> tuple[str, ...] | None:
        """The offered tool names of `settings` (None: every registered tool)."""
        return self._settings.tools

    def tool_definitions(self) -> list[ToolDefinition]:
        """The tools offered to the model, in a stable order (stable prompts cache better)."""
        return self.executor.offered_definitions(self._view.definitions())

    async def warm(self) -> None:
        """Send the system prompt and tools once with `max_tokens=1`, so a local server has
        the prompt prefix cached before the first real turn."""
        request = model_request(
            self.history, self._settings, self._view, 0, offer=self.executor.offered_definitions
        )
        warm_request = LLMRequest(
            messages=[request.messages[0], UserMessage("Hello")],
            tools=request.tools,
            tool_choice="auto" if request.tools else "none",
            settings=request.settings.merged(ModelSettings(max_tokens=1)),
        )
        await self.llm.complete(warm_request)

    def preempt(self, user_text: str) -> Preemption:
        """The first request a turn on `user_text` would send now, ready to start ahead of the
        turn (preemptive generation, the `PreemptingHandler` protocol): run its `run()` in a
        task, then pass it to `run_turn(user_text, preemption=...)`, which takes its answer if
        nothing changed meanwhile. Nothing runs, and the history does not change, until a
        turn takes it."""
        history = ConversationHistory(self.history.max_messages, self.history.messages)
        history.append(UserMessage(user_text))
        # Exactly what the turn's first request would offer (its cancel tool too).
        view = self._cancel.offer(self._view_for(self._settings, strict=False), self._stage_id)
        request = model_request(
            history, self._settings, view, 0, offer=self.executor.offered_definitions
        )
        return Preemption(self.llm, request, user_text)

    # Resuming (the ResumableHandler protocol) ---------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """`{"history": ..., "playbook": None, "background": ...}`: the conversation, and the
        background calls running with the late results not in the history yet (None when
        there are none), as a JSON-safe dict, for `restore` on a new runner (take it between
        turns). Nothing changes here: the calls run on."""
        return {
            "history": self.history.to_dict(),
            "playbook": None,
            "background": self._late.snapshot(),
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        """Bring back a `snapshot()` before this runner's first turn: its history's messages
        replace this one's (this runner's `max_messages` is kept: the factory's configuration,
        not the saved one, decides it). A state without a history leaves the history as is.

        Background calls: the saved late results are delivered (before the next model request,
        and by `late_results()`); a saved running call is adopted when it still runs in this
        process (its final result lands here, once; the old runner no longer delivers, cancels
        or closes it), and is an `aborted` late result (`MOVED_NOTE`) otherwise.

        Raises:
            ValueError: the state is malformed, or carries a playbook snapshot (this runner has
                no playbook: it was taken from another kind of handler). Nothing changes.
            RuntimeError: a turn already ran on this runner.
        """
        if self.turns_started:
            raise RuntimeError("TurnRunner.restore() must come before the first turn")
        history, playbook, background = read_handler_state(state)
        if playbook is not None:
            raise ValueError(
                f"handler state has a playbook snapshot (playbook "
                f"{playbook.get('playbook_id')!r}) but this TurnRunner runs no playbook"
            )
        if history is not None:
            replace_messages(self.history, history)
        if background is not None:
            self._late.restore(background)

    # The TurnHandler protocol ----------------------------------------------------------------

    def speech_hints(self) -> list[str]:
        """What a user of the offered tools is likely to say (`tool_speech_hints`): their
        names' words, enum values and examples (the `HintingHandler` protocol)."""
        return tool_speech_hints(self.tool_definitions())

    def next_deadline(self) -> float | None:
        """Always None: a plain runner has no timer (a playbook stage's timeout does)."""
        return None

    async def run_timeout_turn(
        self, *, abort_signal: AbortSignal | None = None, turn_id: str | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """Yields nothing: a plain runner has no deadline (`next_deadline()` is None)."""
        return
        yield  # an async generator that is empty

    # Background calls ------------------------------------------------------------------------

    def late_results(self) -> AsyncIterator[ToolCallResult]:
        """Each final `ToolCallResult` of a background call as it lands, in the order they
        finished: a queue, so each is yielded once (by whichever iterator of this runner takes
        it), also one that landed before iteration started. Never ends by itself.

        Listening is optional: a late result goes to the model (before its next request)
        whether or not it was yielded here.

        Example:
            async for result in runner.late_results():
                async for event in runner.run_update_turn():
                    ...
        """
        return self._late.results()

    @property
    def late_results_waiting(self) -> bool:
        """Whether a late result landed that is not in the history yet (what
        `run_update_turn` would tell the model). A turn puts those that landed into the
        history before its first model request, even a turn aborted before that request: the
        next request of any turn then carries them."""
        return self._late.has_unheard()

    async def run_update_turn(
        self, *, abort_signal: AbortSignal | None = None, turn_id: str | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """A turn with no new user message whose model request carries the late results that
        landed (the agent tells the user how a background call ended). Yields the usual events,
        `TurnCompleted` last, and behaves as `run_turn` does (abort, failure, tools).

        Yields nothing at all when no late result is waiting (`late_results_waiting` is False:
        none landed, or an earlier turn already put them into the history, where the next
        model request sees them): there is nothing new to tell.

        Args:
            abort_signal: Aborts the turn (barge-in), as for `run_turn`.
            turn_id: The id hooks and spans carry for this turn; None makes a fresh one.
        """
        if not self._late.has_unheard():
            return
        async with aclosing(self.run_turn(None, abort_signal=abort_signal, turn_id=turn_id)) as e:
            async for event in e:
                yield event

    async def cancel_call(self, call_id: str) -> ToolCallResult | None:
        """Stop the running background call `call_id` (its handler's abort signal aborts and
        it is cancelled). Returns its one final result (status `aborted`, unless it ended
        otherwise first), which also goes to the model as a late result; None when no
        background call with that id runs."""
        return await self.executor.cancel_call(call_id)

    async def aclose(self) -> None:
        """End the session for good: stop every running background call (each gets its one
        final result, `aborted`, reported to the hooks like any) and return once all have
        landed. Idempotent: with none running it returns at once. Not for a session that
        waits for a resume (its calls go on); a turn running now is the caller's to abort."""
        running = self.executor.background_calls
        if running:
            logger.info(
                "session %s ends: stopping background calls %s",
                self.session_id,
                [call.call_id for call in running],
            )
        await self.executor.aclose(reason="session ended")

    # Turns -----------------------------------------------------------------------------------

    async def run_turn(
        self,
        user_text: str | None,
        *,
        abort_signal: AbortSignal | None = None,
        after_batch: AfterBatch | None = None,
        after_answer: AfterAnswer | None = None,
        turn_id: str | None = None,
        preemption: Preemption | None = None,
    ) -> AsyncGenerator[AgentEvent, None]:
        """Run one turn, yielding events as they happen; `TurnCompleted` comes last.

        Args:
            user_text: What the user said; None for a turn without a user message (e.g. a
                stage timeout the agent speaks up after).
            abort_signal: Aborts the turn (barge-in). Once set, no further model request is
                sent; every started call still gets its `ToolCallFinished`, and the turn ends
                with `TurnCompleted(stop_reason="aborted")` instead of raising. Leaving the
                `async for` early aborts the turn the same way.
            after_batch: Called after each tool batch (the playbook orchestrator applies
                transitions here); its `BatchDecision` may add events and end tool use.
            after_answer: Called once the turn is answered, inside the turn (its events come
                just before `TurnCompleted`); the orchestrator checks after-answer
                transitions here. Not called for an aborted or failed turn.
            turn_id: The id hooks and spans carry for this turn (a voice loop passes the id
                its speech hooks already used); None makes a fresh one.
            preemption: `preempt(user_text)`'s early answer: the turn's first request takes
                it when it is exactly that request (nothing changed since), else it is
                discarded and the model is asked as usual.

        A model failure (`LLMError`) does not raise: see the class docstring. Anything else
        raised (a bug, a callback's error) propagates, after the history was left valid.
        """
        # The view follows the registry as it is now: "every registered tool" means the ones
        # registered now, and a named tool unregistered since is no longer offered or run.
        self._view = self._view_for(self._settings, strict=False)
        self.turns_started += 1
        turn = Turn(
            self.llm,
            self.executor,
            self.history,
            settings=self._settings,
            tools=self._view,
            stage_id=self._stage_id,
            hooks=self.hooks,
            session_id=self.session_id,
            tool_metadata=self.tool_metadata,
            abort_signal=abort_signal,
            after_batch=after_batch,
            after_answer=after_answer,
            turn_id=turn_id,
            preemption=preemption,
            late_results=self._late,
            cancel_tool=self._cancel,
        )
        self._turn = turn
        try:
            async with aclosing(turn.run(user_text)) as events:
                async for event in events:
                    yield event
        finally:
            self._turn = None  # before TurnCompleted: the turn is over for whoever sees it
        yield turn.completed()
