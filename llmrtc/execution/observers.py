"""`observe_tools`: extra hooks for every tool batch run within a block (and its tasks).

A WebRTC session builds its agent with a factory it does not control, yet must tell its client
the moment each tool call starts and ends, not when the turn's batch is over. It opens this
block around the session's voice loop: every `ToolExecutor.execute` run in that task, or in
a task started from it, also reports to the given hooks.

    with observe_tools(session_hooks):
        await loop_task()          # each call's on_tool_start / on_tool_end reach session_hooks
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from llmrtc.telemetry.hooks import Hooks

__all__ = ["observe_tools"]

context_hooks: ContextVar[Hooks | None] = ContextVar("llmrtc_context_tool_hooks", default=None)
"""The hooks `observe_tools` added for the current context (read once per batch)."""


@contextmanager
def observe_tools(hooks: Hooks) -> Iterator[None]:
    """Within this block (this task and the tasks it starts), every tool batch also reports to
    `hooks` (`on_tool_start`, `on_tool_end`, `on_tool_error`), after the executor's and the
    turn's own hooks. Nested blocks replace the outer one's hooks for their duration.

    Hooks are awaited inside the executor: keep them quick (e.g. put an event on a queue).
    """
    token = context_hooks.set(hooks)
    try:
        yield
    finally:
        context_hooks.reset(token)
