"""`TurnRunner`: one conversational turn, the model ⇄ tools loop, streamed as it happens."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.agent.events import (
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnEvent,
    TurnStopReason,
)
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.settings import TurnSettings
from llmrtc.execution._callbacks import result_from_end_event
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, ToolMessage, UserMessage
from llmrtc.llm.provider import LLMProvider
from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.types import (
    LLMDone,
    LLMRequest,
    LLMTextDelta,
    LLMToolCall,
    ToolChoice,
    Usage,
)
from llmrtc.telemetry.correlation import current_turn_id
from llmrtc.telemetry.hooks import (
    CompositeHooks,
    Hooks,
    LLMEndEvent,
    LLMFirstTokenEvent,
    LLMStartEvent,
    ToolEndEvent,
    TurnEndEvent,
    TurnStartEvent,
    emit,
    hooks_for,
)
from llmrtc.tools.calls import ToolCall, ToolCallResult
from llmrtc.tools.definition import ToolDefinition

__all__ = ["AfterAnswer", "AfterBatch", "BatchDecision", "TurnRunner"]


@dataclass(frozen=True)
class BatchDecision:
    """What an `after_batch` callback decides after a tool batch."""

    events: tuple[Any, ...] = ()
    """Extra events to yield right after the batch's `ToolCallFinished` events."""
    final: bool = False
    """Make the next model request the turn's last, without tool use (a two-phase answer)."""


AfterBatch = Callable[[list[ToolCall], list[ToolCallResult]], Awaitable[BatchDecision]]
"""`after_batch(calls, results)`, awaited after each tool batch of a turn."""

AfterAnswer = Callable[[str], Awaitable[Sequence[Any]]]
"""`after_answer(turn_text)`, awaited when a turn was answered (not aborted), still inside the
turn (before `on_turn_end`); returns events to yield just before `TurnCompleted`."""


class _BatchRecorder(Hooks):
    """Collects a batch's results as each call finishes: their order is the order things
    happened (for `ToolCallFinished`), and they survive the caller being cancelled (the
    executor reports every call to its hooks before the cancellation propagates)."""

    def __init__(self) -> None:
        self.results: list[ToolCallResult] = []

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.results.append(result_from_end_event(event))


class TurnRunner:
    """Runs turns: the model answers, its tool calls run as batches on the executor, their
    results go back to the model, until it answers without tools or the round limit is hit.

    Example:
        runner = TurnRunner(llm, ToolExecutor(registry), system_prompt="You are a helpful agent.")
        async for event in runner.run_turn("What's the weather in Tokyo?"):
            if isinstance(event, TextDelta):
                print(event.text, end="")

    The runner holds no event-loop-bound state between turns: each turn may run under a new
    event loop (as long as the provider allows it).
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
            settings: All of the above in one `TurnSettings` (instead of those arguments).
            hooks: Observers of turns, model requests and (for this runner's batches) tools.
            history: The conversation so far (a new empty one by default).
            session_id: Passed to tools and hooks.
            tool_metadata: Read-only values every tool sees in `ctx.metadata`.

        Raises:
            ValueError: for unknown tool names, a tool_choice that names a tool not offered,
                `max_tool_rounds` below 0, or `settings` given together with the arguments
                it replaces.
        """
        if settings is None:
            if system_prompt is None:
                raise ValueError("TurnRunner needs system_prompt=... (or settings=TurnSettings)")
            settings = TurnSettings(
                system_prompt=system_prompt,
                tools=tuple(tools) if tools is not None else None,
                tool_choice=tool_choice,
                max_tool_rounds=max_tool_rounds,
                model=model_settings or ModelSettings(),
            )
        elif (
            system_prompt is not None
            or tools is not None
            or tool_choice != "auto"
            or max_tool_rounds != 5
            or model_settings is not None
        ):
            raise ValueError(
                "pass either settings=TurnSettings(...) or system_prompt/tools/tool_choice/"
                "max_tool_rounds/model_settings, not both"
            )
        self.llm = llm
        self.executor = executor
        self.hooks = hooks
        self.history = history if history is not None else ConversationHistory()
        self.session_id = session_id
        self.stage_id: str | None = None
        """The playbook stage the turn runs in, for hooks (set by the orchestrator)."""
        self.tool_metadata = tool_metadata
        self.current_turn_id: str | None = None
        """The id of the turn running now (None between turns)."""
        self._turn_hooks = hooks_for([hooks], "on_turn_start"), hooks_for([hooks], "on_turn_end")
        self.settings = settings

    @property
    def settings(self) -> TurnSettings:
        """How turns run; assign a new `TurnSettings` to reconfigure (checked at once)."""
        return self._settings

    @settings.setter
    def settings(self, settings: TurnSettings) -> None:
        if settings.tools is not None:
            unknown = [name for name in settings.tools if not self.executor.registry.has(name)]
            if unknown:
                raise ValueError(
                    f"unknown tools {unknown}; the executor's registry has "
                    f"{self.executor.registry.names()}"
                )
        previous = getattr(self, "_settings", None)
        self._settings = settings
        try:
            self._request(0)  # validates tool_choice against the offered tools now
        except BaseException:
            if previous is not None:
                self._settings = previous
            raise

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
        return self.executor.registry.definitions(self._settings.tools)

    def _request(self, round_index: int, *, final: bool = False) -> LLMRequest:
        settings = self._settings
        choice: ToolChoice = settings.tool_choice
        if final:
            choice = "none"
        elif round_index > 0 and (choice == "required" or isinstance(choice, Mapping)):
            choice = "auto"  # forcing applies to the first round only
        return LLMRequest(
            messages=self.history.for_request(settings.system_prompt),
            tools=self.tool_definitions(),
            tool_choice=choice,
            settings=settings.model,
        )

    async def warm(self) -> None:
        """Send the system prompt and tools once with `max_tokens=1`, so a local server has
        the prompt prefix cached before the first real turn."""
        request = self._request(0)
        warm_request = LLMRequest(
            messages=[request.messages[0], UserMessage("Hello")],
            tools=request.tools,
            tool_choice="auto" if request.tools else "none",
            settings=request.settings.merged(ModelSettings(max_tokens=1)),
        )
        await self.llm.complete(warm_request)

    async def run_turn(
        self,
        user_text: str | None,
        *,
        abort_signal: AbortSignal | None = None,
        after_batch: AfterBatch | None = None,
        after_answer: AfterAnswer | None = None,
    ) -> AsyncGenerator[Any, None]:
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
                transitions here.

        Raises:
            LLMError: when the provider fails for good (the history stays valid).
        """
        controller = AbortController(parent=abort_signal)
        signal = controller.signal
        turn = _Turn(f"turn_{uuid.uuid4().hex[:12]}")
        self.current_turn_id = turn.id
        if user_text is not None:
            self.history.append(UserMessage(user_text))
        await emit(
            self._turn_hooks[0],
            "on_turn_start",
            TurnStartEvent(
                turn_id=turn.id,
                session_id=self.session_id,
                stage_id=self.stage_id,
                user_text=user_text,
            ),
        )
        error: BaseException | None = None
        try:
            round_index = 0
            forced_final = False
            while True:
                if signal.aborted:
                    turn.stop_reason = "aborted"
                    break
                at_limit = round_index >= self._settings.max_tool_rounds
                final = at_limit or forced_final
                request = self._request(round_index, final=final)
                # aclosing: if the consumer leaves mid-response, the model stream is closed now,
                # in this task, not later by the garbage collector in another one.
                async with aclosing(self._model_round(turn, request, signal)) as events:
                    async for event in events:
                        yield event
                if turn.response is None:  # aborted mid-response: its text is already stored
                    turn.stop_reason = "aborted"
                    break
                done, calls = turn.response
                dropped = final and bool(calls)
                if final:
                    calls = []  # the round limit: these are neither run nor stored
                text = "".join(turn.partial)
                turn.partial = []
                if text or calls:
                    self.history.append(AssistantMessage(text, tuple(calls)))
                if not calls:
                    if done.stop_reason == "length":
                        turn.stop_reason = "length"
                    elif at_limit and (dropped or round_index > 0):
                        turn.stop_reason = "max_tool_rounds"  # the limit cut the tool use short
                    else:
                        turn.stop_reason = "stop"
                    break
                turn.pending = list(calls)
                for call in calls:
                    yield ToolCallStarted(call)
                for result in await self._run_batch(turn, signal):
                    yield ToolCallFinished(result)
                if after_batch is not None:  # also after an abort: what ran has happened
                    decision = await after_batch(calls, turn.results[-len(calls) :])
                    for extra in decision.events:
                        yield extra
                    forced_final = forced_final or decision.final
                round_index += 1
            if after_answer is not None and turn.stop_reason != "aborted":
                for extra in await after_answer("".join(turn.texts)):
                    yield extra
        except GeneratorExit:
            controller.abort("the consumer left the turn")
            turn.stop_reason = "aborted"
            raise
        except BaseException as exc:
            error = exc
            raise
        finally:
            await self._settle(turn, controller, error)
            self.current_turn_id = None
        yield TurnCompleted(
            text="".join(turn.texts),
            tool_results=tuple(turn.results),
            usage=turn.usage,
            stop_reason=turn.stop_reason,
        )

    async def _model_round(
        self, turn: _Turn, request: LLMRequest, signal: AbortSignal
    ) -> AsyncGenerator[TurnEvent, None]:
        """Stream one model response; leaves `(done, calls)` in `turn.response`, or None when
        it was aborted (its partial text is then stored, marked interrupted)."""
        request_id = f"req_{uuid.uuid4().hex[:12]}"
        model = request.settings.model or self.llm.model
        hooks = [self.hooks]
        await emit(
            hooks_for(hooks, "on_llm_start"),
            "on_llm_start",
            LLMStartEvent(
                request_id=request_id,
                model=model,
                session_id=self.session_id,
                turn_id=turn.id,
                stage_id=self.stage_id,
                provider=self.llm.provider_name,
                messages=request.messages,
                tool_names=tuple(t.name for t in request.tools),
                temperature=request.settings.temperature,
                max_tokens=request.settings.max_tokens,
            ),
        )
        started = time.perf_counter()
        first = True
        calls: list[ToolCall] = []
        done = LLMDone("stop")
        turn.response = None
        error_type: str | None = None
        try:
            events = self.llm.stream(request, abort_signal=signal)
            async with aclosing(events) as stream:  # type: ignore[type-var]  # providers return generators
                async for event in stream:
                    if first and not isinstance(event, LLMDone):
                        first = False
                        await emit(
                            hooks_for(hooks, "on_llm_first_token"),
                            "on_llm_first_token",
                            LLMFirstTokenEvent(
                                request_id=request_id,
                                model=model,
                                latency_s=time.perf_counter() - started,
                                session_id=self.session_id,
                                turn_id=turn.id,
                            ),
                        )
                    if isinstance(event, LLMTextDelta):
                        if not turn.partial and _needs_space(turn.texts, event.text):
                            # A new response after earlier text: keep the words apart (for
                            # speech, and for keyword conditions on the turn's text).
                            turn.texts.append(" ")
                            yield TextDelta(" ")
                        turn.partial.append(event.text)
                        turn.texts.append(event.text)
                        yield TextDelta(event.text)
                    elif isinstance(event, LLMToolCall):
                        calls.append(event.call)
                    else:
                        done = event
        except BaseException as exc:
            error_type = type(exc).__qualname__
            raise
        finally:
            await emit(
                hooks_for(hooks, "on_llm_end"),
                "on_llm_end",
                LLMEndEvent(
                    request_id=request_id,
                    model=model,
                    session_id=self.session_id,
                    turn_id=turn.id,
                    stage_id=self.stage_id,
                    provider=self.llm.provider_name,
                    response_model=done.model,
                    stop_reason=done.stop_reason,
                    input_tokens=done.usage.input_tokens,
                    output_tokens=done.usage.output_tokens,
                    duration_s=time.perf_counter() - started,
                    output_text="".join(turn.partial),
                    error_type=error_type,
                ),
            )
        turn.usage = turn.usage + done.usage
        if done.stop_reason != "aborted" and not signal.aborted:
            turn.response = (done, calls)
        else:
            self._store_partial(turn)  # calls of an unfinished response are dropped

    async def _run_batch(self, turn: _Turn, signal: AbortSignal) -> list[ToolCallResult]:
        """Run the pending calls as one batch; their tool messages go into the history.
        Returns the results in the order the calls finished."""
        recorder = _BatchRecorder()
        hooks = CompositeHooks([h for h in (self.hooks, recorder) if h is not None])
        token = current_turn_id.set(turn.id)
        results: list[ToolCallResult] | None = None
        try:
            results = await self.executor.execute(
                turn.pending,
                session_id=self.session_id,
                turn_id=turn.id,
                stage_id=self.stage_id,
                abort_signal=signal,
                hooks=hooks,
                metadata=self.tool_metadata,
            )
        finally:
            current_turn_id.reset(token)
            if results is None and len(recorder.results) == len(turn.pending):
                # The caller was cancelled mid-batch: keep the real results (a call that
                # finished stays finished) instead of settling them again as aborted.
                self._record_results(turn, _in_request_order(turn.pending, recorder.results))
        self._record_results(turn, results)
        return recorder.results if len(recorder.results) == len(results) else results

    def _record_results(self, turn: _Turn, results: list[ToolCallResult]) -> None:
        for result in results:
            self.history.append(ToolMessage(result.call_id, result.to_content()))
        turn.results.extend(results)
        turn.pending = []

    def _store_partial(self, turn: _Turn) -> None:
        """Keep what the model actually said before it was cut off, marked interrupted."""
        text = "".join(turn.partial)
        turn.partial = []
        if text:
            self.history.append(AssistantMessage(text, (), True))

    async def _settle(
        self, turn: _Turn, controller: AbortController, error: BaseException | None
    ) -> None:
        """Leave a valid history whatever happened, and report the turn's end."""
        self._store_partial(turn)
        if turn.pending:
            # Calls stored without results (the consumer left, or something failed between
            # the model's answer and the batch): each still gets its one result, and hooks.
            aborted = AbortController()
            aborted.abort(controller.signal.reason or "the turn ended before the calls ran")
            results = await self.executor.execute(
                turn.pending,
                session_id=self.session_id,
                turn_id=turn.id,
                stage_id=self.stage_id,
                abort_signal=aborted.signal,
                hooks=self.hooks,
            )
            self._record_results(turn, results)
        await emit(
            self._turn_hooks[1],
            "on_turn_end",
            TurnEndEvent(
                turn_id=turn.id,
                stop_reason="error" if error is not None else turn.stop_reason,
                session_id=self.session_id,
                stage_id=self.stage_id,
                text="".join(turn.texts),
                duration_s=time.perf_counter() - turn.started,
                input_tokens=turn.usage.input_tokens,
                output_tokens=turn.usage.output_tokens,
                tool_calls=len(turn.results),
                error_type=type(error).__qualname__ if error is not None else None,
            ),
        )


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


class _Turn:
    """The running state of one turn."""

    def __init__(self, turn_id: str) -> None:
        self.id = turn_id
        self.started = time.perf_counter()
        self.texts: list[str] = []  # everything yielded as text, in order
        self.partial: list[str] = []  # text of the response being streamed, not yet stored
        self.pending: list[ToolCall] = []  # calls in the history that have no result yet
        self.results: list[ToolCallResult] = []
        self.usage = Usage()
        self.stop_reason: TurnStopReason = "stop"
        self.response: tuple[LLMDone, list[ToolCall]] | None = None

    def __repr__(self) -> str:
        return f"<turn {self.id} {self.stop_reason}>"
