"""`ToolEventRelay`: each tool call's `tool_call_started` / `tool_call_finished`, exactly once,
the moment the call starts and ends.

Two sources report the same calls: the executor's hooks (through `observe_tools`, as each call
starts and ends) and the agent's own `ToolCallStarted` / `ToolCallFinished` events (the
finished ones only after the whole batch). Whichever reports a call first sends its message;
the other is then skipped. A call id can repeat across batches (scripted and small models reuse
`call_1`), so each source's reports are counted per call id: the n-th start (or end) of an id is
sent once, by the first source to reach n. A call refused before it ran has no start hook: its
`started` goes out right before its `finished`.

A background call (`ToolDefinition(background=True)`) starts like any call, with `background`
true on its `tool_call_started`. The agent's `ToolCallFinished` for it carries the provisional
`running` answer: that is no end, so it sends nothing (it only counts as the agent's report of
that execution). Its `tool_call_finished` goes out when the executor reports the final result
(`on_tool_end`, perhaps long after the turn). Progress (`on_tool_progress`, any call) is sent
as `tool_call_progress` as it comes: `ToolContext.progress` already limits its rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from llmrtc.agent.events import ToolCallFinished, ToolCallStarted
from llmrtc.rtc.events import tool_call_finished
from llmrtc.rtc.messages import ServerMessage, ToolCallProgressMessage, ToolCallStartedMessage
from llmrtc.telemetry.events import ToolEndEvent, ToolProgressEvent, ToolStartEvent
from llmrtc.telemetry.hooks import Hooks

__all__ = ["ToolEventRelay"]


@dataclass
class _Counts:
    name: str
    sent_started: int = 0
    sent_finished: int = 0
    hook_started: int = 0
    hook_finished: int = 0
    agent_started: int = 0
    agent_finished: int = 0
    agent_running: int = 0
    """`running` answers (not counted in `agent_finished`: see `ToolEventRelay.relay`)."""


class ToolEventRelay(Hooks):
    """Hooks for `observe_tools` plus a filter for the agent's tool events (module docstring).

    Args:
        send: Called with each message to send (must not block).
    """

    def __init__(self, send: Callable[[ServerMessage], None]) -> None:
        """Send the tool messages through `send`."""
        self._send = send
        self._calls: dict[str, _Counts] = {}

    def send_to(self, send: Callable[[ServerMessage], None]) -> None:
        """Send from now on through `send`: a resumed session takes over its predecessor's
        relay, to which the background calls it adopted still report (their batch captured
        it), so their progress and final results reach the new connection."""
        self._send = send

    # Executor hooks (as each call starts and ends) ------------------------------------------

    def on_tool_start(self, event: ToolStartEvent) -> None:
        """A call started running: send its `tool_call_started` unless already sent."""
        counts = self._counts(event.call_id, event.tool_name)
        counts.hook_started += 1
        self._started(event.call_id, counts, counts.hook_started, event.background)

    def on_tool_end(self, event: ToolEndEvent) -> None:
        """A call got its final result: send its `tool_call_finished` (and `started` if none
        was). For a background call this is the late final result."""
        counts = self._counts(event.call_id, event.tool_name)
        if not event.started:  # refused or aborted before running: no start hook came
            counts.hook_started += 1
        counts.hook_finished += 1
        self._finished(
            event.call_id,
            counts,
            counts.hook_finished,
            event.status,
            event.duration_s * 1000,
            event.background,
            event.reused_from,
        )
        self._forget_if_done(event.call_id, counts)

    def on_tool_progress(self, event: ToolProgressEvent) -> None:
        """A running call reported progress: send its `tool_call_progress`."""
        self._send(
            ToolCallProgressMessage(
                call_id=event.call_id, name=event.tool_name, message=event.message
            )
        )

    # The agent's events (the finished ones after the batch) ---------------------------------

    def relay(self, event: object) -> bool:
        """Handle an agent tool event: True when `event` is one (sent now or already sent),
        False for any other event (the caller sends it as usual)."""
        if isinstance(event, ToolCallStarted):
            counts = self._counts(event.call.call_id, event.call.name)
            counts.agent_started += 1
            self._started(event.call.call_id, counts, counts.agent_started, event.background)
            return True
        if isinstance(event, ToolCallFinished):
            result = event.result
            counts = self._counts(result.call_id, result.tool_name)
            if result.status == "running":
                # A background call's provisional answer: its final result comes from the
                # hook, whenever it lands. It takes no place in the agent's order of ends: a
                # later plain call reusing the id (scripted models do) ends before it, and
                # must not send this call's `tool_call_finished` early with its own status.
                counts.agent_running += 1
            else:
                counts.agent_finished += 1
                self._finished(
                    result.call_id,
                    counts,
                    counts.agent_finished,
                    result.status,
                    result.duration_ms,
                    False,
                    result.reused_from,
                )
            counts.agent_started = max(
                counts.agent_started, counts.agent_finished + counts.agent_running
            )
            self._forget_if_done(result.call_id, counts)
            return True
        return False

    def _forget_if_done(self, call_id: str, counts: _Counts) -> None:
        # Both sources reported every execution of this id: nothing more can come for it (a
        # later batch reusing the id starts again from zero), so a long session keeps no
        # record per call. Without hooks (a handler that runs no `ToolExecutor`), entries
        # stay: one small record per call id.
        # A call still running (a background one, or another of the same id) keeps it.
        agent = counts.agent_finished + counts.agent_running
        if counts.sent_started == counts.sent_finished == counts.hook_finished == agent:
            del self._calls[call_id]

    # Sending --------------------------------------------------------------------------------

    def _counts(self, call_id: str, name: str) -> _Counts:
        counts = self._calls.get(call_id)
        if counts is None:
            counts = self._calls[call_id] = _Counts(name)
        elif counts.sent_finished == counts.sent_started:
            counts.name = name  # a reused id for a new call (perhaps of another tool)
        return counts

    def _started(self, call_id: str, counts: _Counts, nth: int, background: bool) -> None:
        while counts.sent_started < nth:
            counts.sent_started += 1
            self._send(
                ToolCallStartedMessage(call_id=call_id, name=counts.name, background=background)
            )

    def _finished(
        self,
        call_id: str,
        counts: _Counts,
        nth: int,
        status: str,
        duration_ms: float,
        background: bool,
        reused_from: str | None,
    ) -> None:
        self._started(call_id, counts, nth, background)
        while counts.sent_finished < nth:
            counts.sent_finished += 1
            message = tool_call_finished(call_id, counts.name, status, duration_ms, reused_from)
            if message is not None:  # never None here: `running` is not sent to this method
                self._send(message)
