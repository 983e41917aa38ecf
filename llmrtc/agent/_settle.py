"""The model ⇄ tools rounds of a `TurnRunner` turn, and how a turn ends: recovering from a
model that failed for good, settling unrun calls and reporting the turn's end."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.agent._batch import run_batch, settle_unrun
from llmrtc.agent._round import TurnState, stream_model_round
from llmrtc.agent.events import (
    AgentEvent,
    ToolCallFinished,
    ToolCallStarted,
    TurnError,
)
from llmrtc.llm.messages import AssistantMessage
from llmrtc.llm.provider import LLMError
from llmrtc.telemetry.hooks import (
    ErrorEvent,
    TurnEndEvent,
    emit,
    hooks_for,
)

if TYPE_CHECKING:
    from llmrtc.agent.runner import AfterBatch, TurnRunner

__all__ = ["recover", "rounds", "settle"]

# The runner's logger: these records read as before the split.
logger = logging.getLogger("llmrtc.agent.runner")


async def rounds(
    runner: TurnRunner, turn: TurnState, signal: AbortSignal, after_batch: AfterBatch | None
) -> AsyncGenerator[AgentEvent, None]:
    """The model ⇄ tools rounds of a turn; leaves `turn.stop_reason` set."""
    round_index = 0
    forced_final = False
    retried_empty = False
    while True:
        if signal.aborted:
            turn.stop_reason = "aborted"
            return
        at_limit = round_index >= runner._settings.max_tool_rounds
        final = at_limit or forced_final
        request = runner._request(round_index, final=final, without_tools=retried_empty)
        try:
            # aclosing: if the consumer leaves mid-response, the model stream is closed
            # now, in this task, not later by the garbage collector in another one.
            async with aclosing(
                stream_model_round(
                    runner.llm,
                    request,
                    turn,
                    signal,
                    hooks=runner.hooks,
                    session_id=runner.session_id,
                    stage_id=runner.stage_id,
                )
            ) as deltas:
                async for delta in deltas:
                    yield delta
        except LLMError as exc:
            async for event in recover(runner, turn, exc):
                yield event
            return
        if turn.response is None:  # aborted mid-response: its text is stored by _settle
            turn.stop_reason = "aborted"
            return
        done, calls = turn.response
        dropped = final and bool(calls)
        if final:
            calls = []  # the round limit: these are neither run nor stored
        text = "".join(turn.partial)
        turn.partial = []
        said = "".join(turn.texts).strip()
        if not said and not calls and not retried_empty:
            # Nothing said yet and nothing to run (e.g. a small model wrote its answer as a
            # call to an undeclared tool, which the provider dropped): ask once more,
            # without tools, so the turn ends with something to say.
            logger.info("the model's answer was empty; asking once more without tools")
            retried_empty = True
            continue
        if text or calls:
            runner.history.append(AssistantMessage(text, tuple(calls)))
        if not calls:
            if done.stop_reason == "length":
                turn.stop_reason = "length"
            elif at_limit and (dropped or round_index > 0):
                turn.stop_reason = "max_tool_rounds"  # the limit cut the tool use short
            else:
                turn.stop_reason = "stop"
            if not said and runner._settings.empty_reply is not None:
                for delta in turn.say(runner._settings.empty_reply):
                    yield delta
                runner.history.append(AssistantMessage(runner._settings.empty_reply))
            return
        turn.pending = list(calls)
        for call in calls:
            yield ToolCallStarted(call)
        finished = await run_batch(
            runner.executor,
            turn.pending,
            turn.record_results,
            tools=runner._view,
            signal=signal,
            turn_id=turn.id,
            session_id=runner.session_id,
            stage_id=runner.stage_id,
            hooks=runner.hooks,
            metadata=runner.tool_metadata,
        )
        for result in finished:
            yield ToolCallFinished(result)
        if after_batch is not None:  # also after an abort: what ran has happened
            decision = await after_batch(calls, turn.results[-len(calls) :])
            for extra in decision.events:
                yield extra
            forced_final = forced_final or decision.final
        round_index += 1


async def recover(
    runner: TurnRunner, turn: TurnState, exc: LLMError
) -> AsyncGenerator[AgentEvent, None]:
    """End a turn whose model request failed for good: report it, apologise, and leave a
    valid history (what was said before the failure, marked interrupted, then the apology).
    """
    logger.warning("turn %s: the model failed, the agent apologised: %s", turn.id, exc)
    turn.failure = exc
    turn.stop_reason = "error"
    turn.store_partial()
    yield TurnError(str(exc), type(exc).__name__)
    reply = runner._settings.error_reply
    for delta in turn.say(reply):
        yield delta
    runner.history.append(AssistantMessage(reply))
    await emit(
        hooks_for([runner.hooks], "on_error"),
        "on_error",
        ErrorEvent(
            error=exc,
            where="llm",
            session_id=runner.session_id,
            turn_id=turn.id,
            stage_id=runner.stage_id,
        ),
    )


async def settle(
    runner: TurnRunner, turn: TurnState, controller: AbortController, error: BaseException | None
) -> None:
    """Leave a valid history whatever happened, and report the turn's end."""
    turn.store_partial()
    if turn.pending:
        await settle_unrun(
            runner.executor,
            turn.pending,
            turn.record_results,
            reason=controller.signal.reason or "the turn ended before the calls ran",
            tools=runner._view,
            turn_id=turn.id,
            session_id=runner.session_id,
            stage_id=runner.stage_id,
            hooks=runner.hooks,
        )
    failure = error if error is not None else turn.failure
    await emit(
        runner._turn_hooks[1],
        "on_turn_end",
        TurnEndEvent(
            turn_id=turn.id,
            stop_reason="error" if failure is not None else turn.stop_reason,
            session_id=runner.session_id,
            stage_id=runner.stage_id,
            text="".join(turn.texts),
            duration_s=time.perf_counter() - turn.started,
            input_tokens=turn.usage.input_tokens,
            output_tokens=turn.usage.output_tokens,
            tool_calls=len(turn.results),
            error_type=type(failure).__qualname__ if failure is not None else None,
        ),
    )
