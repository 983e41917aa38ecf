"""The built-in tool `cancel_tool_call`: the model stops one of its session's running background
calls (`ToolDefinition(background=True)`).

It is offered only while background calls of the turn's executor are running, with their ids
and tool names in its description (so the model can pick the id); otherwise a request's tools
are exactly what they would be without it, and a call to it is refused like any tool that was
not offered. It is an ordinary tool of the turn's offered view: the executor validates it, runs
it and reports it (hooks, spans, its one result) like any call. Its handler stops the named call
through `ToolExecutor.cancel_call` (the call's handler sees its abort signal; the call ends with
its one final result, `aborted`, which reaches the model as a late result) and tells the model
plainly what happened.

It takes a concurrency slot like any call; running background calls hold none, so a cancel
never waits for the call it stops.
"""

from __future__ import annotations

import logging
from typing import Any

from llmrtc.execution.executor import ToolExecutor
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.context import ToolContext
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.errors import ToolError
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool, define_tool

__all__ = ["CANCEL_REASON", "CANCEL_TOOL", "CancelToolOffer"]

logger = logging.getLogger(__name__)

CANCEL_TOOL = "cancel_tool_call"
"""The name of the built-in cancel tool (a registry must not define a tool of this name)."""

CANCEL_REASON = "cancelled by the model"
"""Why a call the model cancelled was aborted (its handler's `abort_signal.reason`, and the
words its `aborted` result carries)."""


def _listed(calls: tuple[ToolCall, ...]) -> str:
    return ", ".join(f"{call.call_id} ({call.name})" for call in calls)


class CancelToolOffer:
    """`cancel_tool_call` for one executor's background calls, as a runner offers it: `offer`
    adds it to a request's view while calls run. The tool is rebuilt only when the running
    calls change: two requests are equal (a preemptive answer is adopted) only when they carry
    the very same definition objects."""

    def __init__(self, executor: ToolExecutor) -> None:
        """Offer the cancelling of `executor`'s background calls."""
        self._executor = executor
        self._running: tuple[ToolCall, ...] = ()
        self._tool: Tool | None = None

    def tool(self) -> Tool | None:
        """The tool for the background calls running now (their ids and tools in its
        description), or None when none is running."""
        running = self._executor.background_calls
        if running != self._running:
            self._running = running
            self._tool = _cancel_tool(self._executor, running) if running else None
        return self._tool

    def offer(self, view: ToolRegistry, stage_id: str | None) -> ToolRegistry:
        """`view` with `cancel_tool_call` added while background calls run; `view` itself (the
        same object) when none runs, or when `view` already offers a tool of that name (the
        application's own: it wins, and ours is left out).

        Args:
            view: What a model request offers (the runner's `registry.scoped(...)` view).
            stage_id: The playbook stage, named (as the runner's view names it) in the refusal
                of a tool the view does not offer.
        """
        tool = self.tool()
        if tool is None:
            return view
        if view.has(CANCEL_TOOL):
            logger.warning(
                "the offered tools already have a tool named %r: the built-in cancel tool is "
                "not offered",
                CANCEL_TOOL,
            )
            return view
        scope = f"stage {stage_id!r}" if stage_id is not None else None
        return view.scoped(view.names(), extra_tools=[tool], scope=scope)


def _cancel_tool(executor: ToolExecutor, running: tuple[ToolCall, ...]) -> Tool:
    """`cancel_tool_call` naming the `running` calls of `executor` in its description."""
    lines = [
        "Cancel a tool call that is still running in the background, when the user no longer "
        "wants it or it is no longer needed. Running now:"
    ]
    lines.extend(f"- {call.call_id}: {call.name}" for call in running)
    definition = ToolDefinition(
        CANCEL_TOOL,
        "\n".join(lines),
        {
            "type": "object",
            "properties": {
                # An enum of the ids running when the request was sent: an id the user cannot
                # say is no free text a tool router would force (and ground in their words);
                # one that stopped since gets the handler's answer, listing those running.
                "call_id": {
                    "type": "string",
                    "enum": [call.call_id for call in running],
                    "description": "The id of the call to cancel.",
                },
            },
            "required": ["call_id"],
            "additionalProperties": False,
        },
    )

    async def cancel(args: dict[str, Any], ctx: ToolContext) -> str:
        call_id = args["call_id"]
        target = next((c for c in executor.background_calls if c.call_id == call_id), None)
        if target is None:
            still = executor.background_calls
            raise ToolError(
                f"no running background call has id {call_id!r}; "
                + (f"running: {_listed(still)}" if still else "no background call is running now")
            )
        result = await executor.cancel_call(call_id, reason=CANCEL_REASON)
        if result is None:  # it landed between the lookup and the cancel
            return (
                f"call {call_id} ({target.name}) had already finished; its result follows "
                "separately"
            )
        logger.info(
            "the model cancelled background call %s (%s): %s", call_id, target.name, result.status
        )
        if result.status == "aborted":
            return f"cancelled call {call_id} ({target.name})"
        return (
            f"call {call_id} ({target.name}) had already finished (status: {result.status}) "
            "before it could be cancelled; its result follows separately"
        )

    return define_tool(definition, cancel)
