"""`Turn`: one conversational turn — its rounds (a model request, then the tool batch the model
asked for), recovery from a model that failed for good, and settling (every call answered, the
history left valid, the turn's end reported)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.agent._round import ModelRound, model_request
from llmrtc.agent.cancel_tool import CancelToolOffer
from llmrtc.agent.events import (
    AgentEvent,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnStopReason,
)
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.late_results import LateResults, late_result_message
from llmrtc.agent.preemption import Preemption
from llmrtc.agent.result_cap import cut_tool_result
from llmrtc.agent.settings import TurnSettings
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, ToolMessage, UserMessage
from llmrtc.llm.provider import LLMError, LLMProvider
from llmrtc.llm.types import LLMRequest, Usage
from llmrtc.telemetry.correlation import current_turn_id
from llmrtc.telemetry.events import ErrorEvent, TurnEndEvent, TurnStartEvent
from llmrtc.telemetry.hooks import Hooks, emit
from llmrtc.tools.calls import ToolCall, ToolCallResult
from llmrtc.tools.registry import ToolRegistry

__all__ = ["AfterAnswer", "AfterBatch", "BatchDecision", "Turn"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchDecision:
    """What an `after_batch` callback decides after a tool batch."""

    events: tuple[AgentEvent, ...] = ()
    """Extra events to yield right after the batch's `ToolCallFinished` events."""
    final: bool = False
    """Make the next model request the turn's last, without tool use (a two-phase answer)."""


AfterBatch = Callable[[list[ToolCall], list[ToolCallResult]], Awaitable[BatchDecision]]
"""`after_batch(calls, results)`, awaited after each tool batch of a turn."""

AfterAnswer = Callable[[str], Awaitable[Sequence[AgentEvent]]]
"""`after_answer(turn_text)`, awaited when a turn was answered (not aborted, no model failure),
still inside the turn (before `on_turn_end`); returns events to yield just before
`TurnCompleted`."""


class Turn:
    """One turn: the model answers, its tool calls run as one batch on the executor, their
    results go back to the model, until it answers without tools or the round limit is hit.

    Made by `TurnRunner.run_turn` with everything it needs; `run()` yields its events, and
    `completed()` is its `TurnCompleted` once `run()` ended. Whatever happens (an abort, the
    consumer leaving, a model failure, a callback raising), the turn leaves the history valid
    for chat APIs: every call stored gets its one result, and text cut off is kept marked
    interrupted.

    What the turn may do changes mid-turn only through `reconfigure` (a playbook transition
    after a tool batch): the next round asks in the new configuration.
    """

    def __init__(
        self,
        llm: LLMProvider,
        executor: ToolExecutor,
        history: ConversationHistory,
        *,
        settings: TurnSettings,
        tools: ToolRegistry,
        stage_id: str | None = None,
        hooks: Hooks | None = None,
        session_id: str | None = None,
        tool_metadata: Mapping[str, Any] | None = None,
        abort_signal: AbortSignal | None = None,
        after_batch: AfterBatch | None = None,
        after_answer: AfterAnswer | None = None,
        turn_id: str | None = None,
        preemption: Preemption | None = None,
        late_results: LateResults | None = None,
        cancel_tool: CancelToolOffer | None = None,
    ) -> None:
        """Prepare a turn (nothing happens before `run()`).

        Args:
            llm: The model provider.
            executor: Runs the tool batches.
            history: The conversation the turn reads and writes.
            settings: How the turn runs (prompt, round limit, fallback lines, result cap).
            tools: The offered tools: the request's definitions, and the only tools a batch may
                run (any other call gets a refusal result). While background calls of
                `executor` run, a request also offers the built-in `cancel_tool_call` (see
                `llmrtc.agent.cancel_tool`), and that request's batch may run it.
            stage_id: The playbook stage, named in hook events.
            hooks: Observers of the turn, its model requests and its tools.
            session_id: Passed to tools and hooks.
            tool_metadata: Read-only values every tool sees in `ctx.metadata`.
            abort_signal: Aborts the turn (barge-in); the turn's own signal is its child.
            after_batch: Awaited after each tool batch (see `BatchDecision`).
            after_answer: Awaited once the turn is answered (see `AfterAnswer`).
            turn_id: The id hooks and spans carry; None makes a fresh one.
            preemption: An answer started before the turn (`Preemption`): the first request
                takes it if it is exactly that request; otherwise it is discarded.
            late_results: The background calls' late results: those that landed go into the
                history before each model request of the turn (see `llmrtc.agent.late_results`).
            cancel_tool: How `cancel_tool_call` is offered (the runner's, so that its
                preemptive requests offer the very same tool); None makes one for `executor`.
        """
        self.llm = llm
        self.executor = executor
        self.history = history
        self.hooks = hooks
        self.session_id = session_id
        self.tool_metadata = tool_metadata
        self.after_batch = after_batch
        self.after_answer = after_answer
        self._settings = settings
        self._tools = tools
        self._round_tools = tools  # what the current round's request offered (and may run)
        self._stage_id = stage_id
        self._late = late_results
        self._answers_user = False  # the turn answers the user's words (set by `run`)
        self._cancel = cancel_tool if cancel_tool is not None else CancelToolOffer(executor)
        # The cap is the turn's own: every result of one turn is cut by the same rule, even
        # if a stage change mid-turn brings other settings.
        self._max_tool_result_chars = settings.max_tool_result_chars
        self._controller = AbortController(parent=abort_signal)
        self.id = turn_id or f"turn_{uuid.uuid4().hex[:12]}"
        """The id hooks and spans carry for this turn."""
        self.started = time.perf_counter()
        self.stop_reason: TurnStopReason = "stop"
        """Why the turn ended (final once `run()` ended)."""
        self.results: list[ToolCallResult] = []
        """Every tool result of the turn, in the order the calls were made."""
        self.usage = Usage()
        """Token usage summed over the turn's model requests."""
        self._texts: list[str] = []  # everything yielded as text, in order
        self._partial: list[str] = []  # text of the response being streamed, not yet stored
        self._pending: list[ToolCall] = []  # calls in the history that have no result yet
        self._failure: BaseException | None = None  # a model failure the turn recovered from
        self._preemption = preemption

    @property
    def text(self) -> str:
        """All assistant text yielded so far in the turn, in order."""
        return "".join(self._texts)

    @property
    def stage_id(self) -> str | None:
        """The playbook stage the turn is in now (it may change after a tool batch)."""
        return self._stage_id

    def reconfigure(
        self, settings: TurnSettings, tools: ToolRegistry, stage_id: str | None
    ) -> None:
        """Run the rest of the turn with these settings, offered tools and stage (a playbook
        transition after a tool batch): they apply from the next model request. The result
        cap stays the one the turn started with."""
        self._settings = settings
        self._tools = tools
        self._stage_id = stage_id

    def completed(self) -> TurnCompleted:
        """The turn's last event, once `run()` ended."""
        return TurnCompleted(
            text=self.text,
            tool_results=tuple(self.results),
            usage=self.usage,
            stop_reason=self.stop_reason,
        )

    async def run(self, user_text: str | None) -> AsyncGenerator[AgentEvent, None]:
        """Run the turn, yielding its events as they happen (all but `TurnCompleted`: see
        `completed()`).

        `user_text` (None: a turn without a user message) is stored first. A model failure
        (`LLMError`) does not raise; anything else raised propagates, after the turn settled.
        Leaving the `async for` early aborts the turn.
        """
        if user_text is not None:
            self.history.append(UserMessage(user_text))
        # Late results go after the user's words (before each request: see the loop), so
        # what the model answers is still the user's message (tool routing, its grounding,
        # a playbook's clear_history keep reading those words).
        self._answers_user = user_text is not None
        await emit(
            self.hooks,
            TurnStartEvent(
                turn_id=self.id,
                session_id=self.session_id,
                stage_id=self._stage_id,
                user_text=user_text,
            ),
        )
        error: BaseException | None = None
        try:
            async with aclosing(self._rounds()) as events:
                async for event in events:
                    yield event
            if self.after_answer is not None and self.stop_reason not in ("aborted", "error"):
                for extra in await self.after_answer(self.text):
                    yield extra
        except GeneratorExit:
            self._controller.abort("the consumer left the turn")
            self.stop_reason = "aborted"
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            await self._settle(error)

    # Rounds ----------------------------------------------------------------------------------

    async def _rounds(self) -> AsyncGenerator[AgentEvent, None]:
        """The model ⇄ tools rounds; leaves `stop_reason` set."""
        signal = self._controller.signal
        round_index = 0
        forced_final = False
        retried_empty = False
        while True:
            if signal.aborted:
                self.stop_reason = "aborted"
                return
            at_limit = round_index >= self._settings.max_tool_rounds
            final = at_limit or forced_final
            self._hear_late_results()  # every model request sees the results that landed
            # The calls the model makes in answer to this request may run what it offered.
            self._round_tools = self._cancel.offer(self._tools, self._stage_id)
            request = model_request(
                self.history,
                self._settings,
                self._round_tools,
                round_index,
                final=final,
                without_tools=retried_empty,
                offer=self.executor.offered_definitions,
            )
            model_round = ModelRound(
                self._provider_for(request),
                request,
                hooks=self.hooks,
                session_id=self.session_id,
                turn_id=self.id,
                stage_id=self._stage_id,
            )
            try:
                # aclosing: if the consumer leaves mid-response, the model stream is closed
                # now, in this task, not later by the garbage collector in another one.
                async with aclosing(model_round.stream(signal)) as pieces:
                    async for piece in pieces:
                        deltas = self._say(piece)
                        self._partial.append(piece)
                        for delta in deltas:
                            yield delta
            except LLMError as exc:
                async for event in self._recover(exc):
                    yield event
                return
            self.usage = self.usage + model_round.usage
            if model_round.response is None:  # aborted mid-response: settling stores its text
                self.stop_reason = "aborted"
                return
            done, calls = model_round.response
            dropped = final and bool(calls)
            if final:
                calls = []  # the round limit: these are neither run nor stored
            text = "".join(self._partial)
            self._partial = []
            said = self.text.strip()
            if not said and not calls and not retried_empty:
                # Nothing said yet and nothing to run (e.g. a small model wrote its answer as a
                # call to an undeclared tool, which the provider dropped): ask once more,
                # without tools, so the turn ends with something to say.
                logger.info("the model's answer was empty; asking once more without tools")
                retried_empty = True
                continue
            if text or calls:
                self.history.append(AssistantMessage(text, tuple(calls)))
            if not calls:
                if done.stop_reason == "length":
                    self.stop_reason = "length"
                elif at_limit and (dropped or round_index > 0):
                    self.stop_reason = "max_tool_rounds"  # the limit cut the tool use short
                else:
                    self.stop_reason = "stop"
                empty_reply = self._settings.empty_reply
                if not said and empty_reply is not None:
                    for delta in self._say(empty_reply):
                        yield delta
                    self.history.append(AssistantMessage(empty_reply))
                return
            self._pending = list(calls)
            for call in calls:
                tool = self.executor.registry.get(call.name)
                yield ToolCallStarted(call, tool is not None and tool.definition.background)
            for result in await self._run_batch(signal):
                yield ToolCallFinished(result)
            if self.after_batch is not None:  # also after an abort: what ran has happened
                decision = await self.after_batch(calls, self.results[-len(calls) :])
                for extra in decision.events:
                    yield extra
                forced_final = forced_final or decision.final
            round_index += 1

    def _provider_for(self, request: LLMRequest) -> LLMProvider:
        """Who answers `request`: the preempted answer if it is exactly this request (the
        turn's first), else the model."""
        early, self._preemption = self._preemption, None
        if early is not None:
            adopted = early.adopt(request)
            if adopted is not None:
                logger.debug("turn %s: the preemptive answer is taken", self.id)
                return adopted
            logger.debug("turn %s: the preemptive answer was for another request", self.id)
        return self.llm

    def _hear_late_results(self) -> None:
        """Put the late results that landed into the history (between rounds, where no call
        waits for its tool message), each cut to the turn's cap."""
        if self._late is None:
            return
        for result in self._late.take_unheard():
            logger.info(
                "turn %s: the late result of tool %r (call %s, %s) goes to the model",
                self.id,
                result.tool_name,
                result.call_id,
                result.status,
            )
            self.history.append(
                late_result_message(
                    result, self._max_tool_result_chars, after_user=self._answers_user
                )
            )

    def _say(self, text: str) -> list[TextDelta]:
        """Record `text` as said in this turn; returns the deltas to yield (a space first
        when it would otherwise glue onto the words said before it)."""
        deltas = []
        if not self._partial and _needs_space(self._texts, text):
            # A new response after earlier text: keep the words apart (for speech, and for
            # keyword conditions on the turn's text).
            self._texts.append(" ")
            deltas.append(TextDelta(" "))
        self._texts.append(text)
        deltas.append(TextDelta(text))
        return deltas

    # The tool batch --------------------------------------------------------------------------

    async def _run_batch(self, signal: AbortSignal) -> list[ToolCallResult]:
        """Run the pending calls as one batch on the offered tools (nothing else may run) and
        record their results. Returns them in the order the calls finished.

        If the turn is cancelled mid-batch, the results the executor still delivered (every
        call gets one) are recorded before the cancellation propagates: a call that finished
        stays finished instead of being settled again as aborted.
        """
        calls = self._pending
        finished: list[ToolCallResult] = []  # in finish order; complete even if we are cancelled
        token = current_turn_id.set(self.id)
        results: list[ToolCallResult] | None = None
        try:
            results = await self.executor.execute(
                calls,
                session_id=self.session_id,
                turn_id=self.id,
                stage_id=self._stage_id,
                abort_signal=signal,
                hooks=self.hooks,
                metadata=self.tool_metadata,
                tools=self._round_tools,
                on_result=finished.append,
            )
        finally:
            current_turn_id.reset(token)
            if results is None and len(finished) == len(calls):
                self._record_results(_in_request_order(calls, finished))
        self._record_results(results)
        return finished if len(finished) == len(results) else results

    def _record_results(self, results: list[ToolCallResult]) -> None:
        """Store a batch's results (in request order), each cut to the turn's cap: the pending
        calls are settled."""
        limit = self._max_tool_result_chars
        for result in results:
            content = result.to_content()
            if limit is not None and len(content) > limit:
                cut = cut_tool_result(result, limit)
                logger.info(
                    "the result of tool %r (call %s) was too long for the model "
                    "(max_tool_result_chars=%d): it was shown the first %d of the %d characters "
                    "of %s",
                    result.tool_name,
                    result.call_id,
                    limit,
                    cut.shown_chars,
                    cut.total_chars,
                    cut.what,
                )
                content = cut.content
            self.history.append(ToolMessage(result.call_id, content))
        self.results.extend(results)
        self._pending = []

    # Recovery and settling -------------------------------------------------------------------

    async def _recover(self, exc: LLMError) -> AsyncGenerator[AgentEvent, None]:
        """End the turn after its model request failed for good: report it, apologise, and
        leave a valid history (what was said before the failure, marked interrupted, then the
        apology)."""
        logger.warning("turn %s: the model failed, the agent apologised: %s", self.id, exc)
        self._failure = exc
        self.stop_reason = "error"
        self._store_partial()
        yield TurnFailed(str(exc), type(exc).__name__)
        reply = self._settings.error_reply
        for delta in self._say(reply):
            yield delta
        self.history.append(AssistantMessage(reply))
        await emit(
            self.hooks,
            ErrorEvent(
                error=exc,
                where="llm",
                session_id=self.session_id,
                turn_id=self.id,
                stage_id=self._stage_id,
            ),
        )

    def _store_partial(self) -> None:
        """Keep what the model actually said before it was cut off, marked interrupted."""
        text = "".join(self._partial)
        self._partial = []
        if text:
            self.history.append(AssistantMessage(text, (), True))

    async def _settle(self, error: BaseException | None) -> None:
        """Leave a valid history whatever happened, and report the turn's end."""
        if self._preemption is not None:  # the turn ended before its first request
            self._preemption.discard("the turn ended before its first request")
            self._preemption = None
        self._store_partial()
        if self._pending:
            await self._settle_unrun()
        failure = error if error is not None else self._failure
        await emit(
            self.hooks,
            TurnEndEvent(
                turn_id=self.id,
                stop_reason="error" if failure is not None else self.stop_reason,
                session_id=self.session_id,
                stage_id=self._stage_id,
                text=self.text,
                duration_s=time.perf_counter() - self.started,
                input_tokens=self.usage.input_tokens,
                output_tokens=self.usage.output_tokens,
                tool_calls=len(self.results),
                error_type=type(failure).__qualname__ if failure is not None else None,
            ),
        )

    async def _settle_unrun(self) -> None:
        """Give calls stored without results (the consumer left, or something failed between
        the model's answer and the batch) their one `aborted` result each, and their hooks."""
        aborted = AbortController()
        aborted.abort(self._controller.signal.reason or "the turn ended before the calls ran")
        results = await self.executor.execute(
            self._pending,
            session_id=self.session_id,
            turn_id=self.id,
            stage_id=self._stage_id,
            abort_signal=aborted.signal,
            hooks=self.hooks,
            tools=self._round_tools,
        )
        self._record_results(results)

    def __repr__(self) -> str:
        return f"<Turn {self.id} {self.stop_reason}>"


def _needs_space(texts: Sequence[str], text: str) -> bool:
    return bool(texts) and not texts[-1][-1:].isspace() and not text[:1].isspace()


def _in_request_order(
    calls: Sequence[ToolCall], results: Sequence[ToolCallResult]
) -> list[ToolCallResult]:
    remaining = list(results)
    ordered = []
    for call in calls:
        match = next(r for r in remaining if r.call_id == call.call_id)
        remaining.remove(match)
        ordered.append(match)
    return ordered
