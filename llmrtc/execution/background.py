"""`BackgroundCalls`: the calls of one executor that outlive their batch (`ToolDefinition(
background=True)`): started by a batch that answers them at once with a `"running"` result,
they run on under their own abort signal and time limit, and each lands with its one final
result, reported to the hooks like any call and queued for whoever delivers it to the model.

Who owns their tasks: the executor. On asyncio each call is a task the executor keeps and
`aclose()` cancels and awaits; inside `async with executor:` (any anyio backend, trio too)
they run in the task group that block opens instead.

Moving to another executor (a session resumed in the same process): every `BackgroundCalls`
has a `token` (this process's id and a random part) that a saved state names, and
`find_background_calls(token)` finds it again while it lives (a weak registry: nothing is kept
alive by it). `adopt()` moves a running call, or its final result not taken yet, from one to
another: from then on it lands, is cancelled and is closed there, and only there.
"""

from __future__ import annotations

import logging
import os
import secrets
import weakref
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import anyio
from anyio.abc import TaskGroup

from llmrtc.abort import AbortController
from llmrtc.execution.batch import Batch
from llmrtc.execution.call import Call
from llmrtc.execution.duplicates import Duplicates
from llmrtc.tools.calls import RUNNING_NOTE, ToolCall, ToolCallResult, new_result
from llmrtc.tools.errors import ToolError

__all__ = ["BackgroundCalls", "find_background_calls"]

logger = logging.getLogger(__name__)

_LIVE: weakref.WeakValueDictionary[str, BackgroundCalls] = weakref.WeakValueDictionary()
"""Every `BackgroundCalls` of this process by its token (and by the tokens of those it adopted
from), while it lives."""


def find_background_calls(token: str) -> BackgroundCalls | None:
    """The live `BackgroundCalls` of this process that `token` names (its own token, or that of
    one whose calls it adopted); None when it is gone or the token is of another process (a
    forked child inherits the registry, not the calls' tasks)."""
    pid, _, _ = token.partition("-")
    if pid != str(os.getpid()):
        return None
    return _LIVE.get(token)


class _Running:
    """One background call: what runs it, what stops it, when it has landed, and where."""

    __slots__ = ("controller", "item", "landed", "owner", "task")

    def __init__(self, item: Call, controller: AbortController, owner: BackgroundCalls) -> None:
        self.item = item
        self.controller = controller
        self.landed = anyio.Event()
        self.owner = owner
        """The `BackgroundCalls` it lands in (changed by `adopt`)."""
        self.task: Any = None
        """Its asyncio task, when no task group hosts it (kept by the owner: asyncio holds
        only weak references to tasks)."""


class BackgroundCalls:
    """The executor's running background calls and the final results that landed, in the
    order they finished (a queue: each result is taken once)."""

    def __init__(self) -> None:
        self._running: list[_Running] = []
        self._landed: deque[ToolCallResult] = deque()
        self._changed: anyio.Event | None = None
        self._tasks: set[Any] = set()  # asyncio tasks, when no task group hosts the calls
        self.group: TaskGroup | None = None
        """The task group of an `async with executor:` block, when one is open."""
        self.duplicates: Duplicates | None = None
        """The executor's memory of recent calls (`on_duplicate`): it goes along with an
        adopted call (see `adopt`)."""
        self.token = f"{os.getpid()}-{secrets.token_hex(16)}"
        """Names these calls in a saved state (`find_background_calls`)."""
        _LIVE[self.token] = self

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        """The background calls running now, oldest first."""
        return tuple(running.item.call for running in self._running)

    def start(self, item: Call, batch: Batch) -> None:
        """Start `item` (prepared by `batch`) in the background and give it, in `batch`, its
        `"running"` answer. Its run is a copy of the call under a signal of its own: an abort
        of `batch` (a barge-in) does not reach it, its own timeout does."""
        call = item.call
        if self.group is None and batch.loop is None:
            # No asyncio loop and no task group to own the call: it cannot outlive the batch.
            logger.error(
                "tool %r (call %s) runs in the background, which needs asyncio or an open "
                "`async with executor:` block on this event loop; the call was not run",
                call.name,
                call.call_id,
            )
            item.finish(
                "error",
                # A ToolError's words reach the model: ours, with nothing internal in them.
                error=ToolError(f"tool {call.name!r} could not be started; it did not run"),
            )
            return
        controller = AbortController()
        detached = batch.detached(controller.signal)
        runner = item.detached(detached)
        running = _Running(runner, controller, self)
        if self.group is not None:
            self.group.start_soon(self._run, running, detached)
        else:
            task = running.task = batch.loop.create_task(self._run(running, detached))
            self._tasks.add(task)
            # Whoever owns it when it is done lets it go (`adopt` may have moved it).
            task.add_done_callback(lambda done: running.owner._tasks.discard(done))
        self._running.append(running)
        # The provisional answer is no ending: the hooks hear of the call when it ends.
        item.result = new_result(call.call_id, call.name, "running", RUNNING_NOTE, None, 0.0)
        item.reported = True
        if batch.on_result is not None:
            try:
                batch.on_result(item.result)
            except Exception:
                logger.exception("on_result callback raised for call %s; ignored", call.call_id)

    async def _run(self, running: _Running, batch: Batch) -> None:
        item = running.item
        signal = running.controller.signal
        try:
            # Cancelled by `cancel` / `aclose` (the signal) and by its own time limit.
            with signal.cancel_scope():
                await item.run(batch, None)
        finally:
            batch.disarm()
            # Whatever stopped it, it gets its one final result and report, and lands.
            with anyio.CancelScope(shield=True):
                if item.result is None:
                    item.abort(signal)
                try:
                    await item.report(batch)
                finally:
                    # The owner now: an adopted call lands where it was adopted.
                    running.owner._land(running)

    def _land(self, running: _Running) -> None:
        self._running.remove(running)
        self._landed.append(running.item.result)  # type: ignore[arg-type]  # settled above
        running.landed.set()
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def take(self) -> list[ToolCallResult]:
        """The final results that landed and were not taken yet, in the order they landed."""
        taken = list(self._landed)
        self._landed.clear()
        return taken

    async def landing(self) -> None:
        """Return once a background call lands (or a result is adopted) after this call began
        waiting, whoever takes its result; nothing is taken."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    async def results(self) -> AsyncIterator[ToolCallResult]:
        """Yield each final result as it lands (also those that landed before); never ends."""
        while True:
            while self._landed:
                yield self._landed.popleft()
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    async def cancel(self, call_id: str, reason: str) -> ToolCallResult | None:
        """Stop the running background call `call_id` (its handler's signal aborts with
        `reason`) and return its final result once it landed; None if none is running."""
        for running in list(self._running):
            if running.item.call.call_id == call_id:
                running.controller.abort(reason)
                await running.landed.wait()
                return running.item.result
        return None

    def adopt(self, other: BackgroundCalls, call_id: str) -> bool:
        """Take over `other`'s background call `call_id` (same process, same event loop): if it
        still runs, it lands here from now on (and `other`'s `cancel` and `aclose` no longer
        reach it); if it landed and its final result was not taken yet, the result moves to
        this queue. False when `other` has neither (it never had the call, or its result was
        taken already).

        A call hosted by the task group of `other`'s `async with executor:` block keeps running
        in that group: leaving that block waits for it (it is not stopped by it).
        """
        if other is self:
            return any(r.item.call.call_id == call_id for r in self._running)
        if self.duplicates is not None and other.duplicates is not None:
            # The session moves here: so does its memory of recent calls, so a repeat of the
            # adopted call (or of one that ended before) is still recognised.
            self.duplicates.adopt(other.duplicates)
        for running in other._running:
            if running.item.call.call_id == call_id:
                other._running.remove(running)
                running.owner = self
                if running.task is not None:
                    other._tasks.discard(running.task)
                    self._tasks.add(running.task)
                self._running.append(running)
                # A state saved from this one names `other`: a second resume finds them here.
                _LIVE[other.token] = self
                return True
        for result in other._landed:
            if result.call_id == call_id:
                other._landed.remove(result)
                self._landed.append(result)
                self._notify()
                return True
        return False

    async def aclose(self, reason: str) -> None:
        """Stop every running background call and wait until each has landed. The wait can
        be cut (a caller's time limit): each call still lands, reported, in its own task."""
        running = list(self._running)
        for entry in running:
            entry.controller.abort(reason)
        for entry in running:
            await entry.landed.wait()
