"""Running a parallel group: each call in a task of its own, each finished call handed back to
the caller's task, which reports it at once (so hooks and `on_result` run in the caller's task,
in finish order)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import anyio

from llmrtc.execution._reporting import report
from llmrtc.execution._state import Batch, CallState


class Finished:
    """Calls whose tasks ended, waiting for the caller's task to take them.

    On asyncio the caller waits on a bare loop future: cheaper than an anyio `Event`, and a
    cancellation of the caller cancels only that future, never the tasks running the calls
    (awaiting a task directly would cancel it natively, past any shield its handler holds).
    """

    __slots__ = ("_loop", "_need", "_waiter", "items")

    def __init__(self, loop: Any) -> None:
        self.items: deque[CallState] = deque()
        self._loop = loop
        self._waiter: Any = None
        self._need = 1

    def put(self, item: CallState) -> None:
        """Called by a call's task as it ends (also when cancelled)."""
        self.items.append(item)
        waiter = self._waiter
        if waiter is not None and len(self.items) >= self._need:
            self._waiter = None
            if self._loop is None:
                waiter.set()
            elif not waiter.done():
                waiter.set_result(None)

    async def wait(self, need: int) -> None:
        """Return once at least `need` calls are waiting to be taken."""
        if len(self.items) >= need:
            return
        self._need = need
        try:
            if self._loop is None:
                event = self._waiter = anyio.Event()
                await event.wait()
            else:
                self._waiter = self._loop.create_future()
                await self._waiter
        finally:
            self._waiter = None


RunCall = Callable[[Batch, CallState, Finished | None], Coroutine[Any, Any, None]]


async def run_group(batch: Batch, items: list[CallState], run_call: RunCall) -> None:
    """Run `items` concurrently with `run_call`, reporting each as it ends; return when all
    ended. Cancelling the caller cancels every call (through its own cancel scope) and waits
    for them before the cancellation propagates."""
    finished = Finished(batch.loop)
    remaining = len(items)

    async def take_finished() -> None:
        nonlocal remaining
        while remaining:
            # Without reporting there is nothing to do per call: wake once, when all ended.
            await finished.wait(1 if batch.reporting else remaining)
            while finished.items:
                item = finished.items.popleft()
                remaining -= 1
                if batch.reporting:
                    await report(batch, item)

    loop = batch.loop
    if loop is None:  # trio (or any backend but asyncio): an anyio task group
        async with anyio.create_task_group() as group:
            for item in items:
                group.start_soon(run_call, batch, item, finished)
            await take_finished()
        return
    # asyncio: bare tasks cost a fifth of task-group tasks. Each call still runs inside its
    # own anyio cancel scope (see `ToolExecutor._run_call`), so timeouts, aborts and the
    # caller's cancellation reach it as anyio cancellations that respect its shields. Every
    # call gets a task (none runs in the caller's), so an abort or a cancellation of the
    # caller reaches the caller at once, and it cancels every call's scope together.
    # Each call is handed back by its task's done callback, not by `run_call` itself: a task
    # cancelled natively before its first step (say, an app cancelling every task) is closed
    # without running its body, so only the callback is sure to hand it back, exactly once.
    tasks = []
    for item in items:
        task = loop.create_task(run_call(batch, item, None))
        task.add_done_callback(lambda _task, item=item: finished.put(item))
        tasks.append(task)
    try:
        await take_finished()
    except BaseException:
        for item in items:
            if item.scope is not None:
                item.scope.cancel()
        # Wait until every call has ended, as an anyio task group does: a further native
        # `task.cancel()` pierces the shield, so it is caught and the wait goes on; the
        # first cancellation propagates once no call's task is left running.
        while len(finished.items) < remaining:
            try:
                with anyio.CancelScope(shield=True):
                    await finished.wait(remaining)
            except asyncio.CancelledError:
                continue
        raise
    for task in tasks:  # a call's task never raises, unless the executor itself is misused
        error = None if task.cancelled() else task.exception()
        if error is not None:
            raise error
