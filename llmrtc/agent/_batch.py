"""One tool batch of a turn on the executor, and the calls a turn must settle unrun."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.execution.executor import ToolExecutor
from llmrtc.telemetry.correlation import current_turn_id
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools.calls import ToolCall, ToolCallResult
from llmrtc.tools.registry import ToolRegistry

Record = Callable[[list[ToolCallResult]], None]
"""Stores a batch's results (in request order) in the history and the turn."""


async def run_batch(
    executor: ToolExecutor,
    calls: list[ToolCall],
    record: Record,
    *,
    tools: ToolRegistry,
    signal: AbortSignal,
    turn_id: str,
    session_id: str | None,
    stage_id: str | None,
    hooks: Hooks | None,
    metadata: Mapping[str, Any] | None,
) -> list[ToolCallResult]:
    """Run `calls` as one batch on `tools` (the offered ones: nothing else may run) and
    `record` their results. Returns them in the order the calls finished.

    If the caller is cancelled mid-batch, the results the executor still delivered (every
    call gets one) are recorded before the cancellation propagates: a call that finished stays
    finished instead of being settled again as aborted.
    """
    finished: list[ToolCallResult] = []  # in finish order; complete even if we are cancelled
    token = current_turn_id.set(turn_id)
    results: list[ToolCallResult] | None = None
    try:
        results = await executor.execute(
            calls,
            session_id=session_id,
            turn_id=turn_id,
            stage_id=stage_id,
            abort_signal=signal,
            hooks=hooks,
            metadata=metadata,
            tools=tools,
            on_result=finished.append,
        )
    finally:
        current_turn_id.reset(token)
        if results is None and len(finished) == len(calls):
            record(_in_request_order(calls, finished))
    record(results)
    return finished if len(finished) == len(results) else results


async def settle_unrun(
    executor: ToolExecutor,
    calls: list[ToolCall],
    record: Record,
    *,
    reason: object,
    tools: ToolRegistry,
    turn_id: str,
    session_id: str | None,
    stage_id: str | None,
    hooks: Hooks | None,
) -> None:
    """Give calls stored without results (the consumer left, or something failed between the
    model's answer and the batch) their one `aborted` result each, and their hooks."""
    aborted = AbortController()
    aborted.abort(reason)
    results = await executor.execute(
        calls,
        session_id=session_id,
        turn_id=turn_id,
        stage_id=stage_id,
        abort_signal=aborted.signal,
        hooks=hooks,
        tools=tools,
    )
    record(results)


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
