"""Batch scheduling: which calls of a batch run together (parallel groups, sequential barriers),
how a group runs concurrently and hands each finished call back to the caller's task, how an
abort or the caller's cancellation stops them, and how every call still gets its one result and
report, in request order."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.execution.batch import Batch
from llmrtc.execution.call import Call, report_all

__all__ = ["run_batch"]


async def run_batch(batch: Batch, calls: list[Call]) -> None:
    """Run `calls` under `batch`: when this returns (or propagates the caller's cancellation),
    every call has its one result and its report, and no handler task is left running.

    Aborting the batch signal, or its deadline (or a parent's) passing, cancels running
    handlers and skips queued ones, all at once, except started `"finish"` calls, which run on
    (see `ToolExecutor.execute`)."""
    # Every tool is looked up (in the batch's view) before anything is reported, also for a
    # batch aborted before it starts: the end events carry each tool's sensitive fields.
    segments = _segments(batch, calls)
    signal = batch.signal
    try:
        if calls and not batch.aborted():
            if signal is None:
                await _run_segments(batch, segments)
            elif batch.finishing:
                await _run_interruptible(batch, calls, segments)
            else:
                # Cancelled by an abort, and by the signal's (or a parent's) deadline.
                with signal.cancel_scope():
                    await _run_segments(batch, segments)
    finally:
        batch.disarm()
        # Whatever has no result now was aborted: by the signal, or by the caller cancelling
        # us. It still gets its one result and its report (shielded, so a cancelled caller
        # does not skip them); the caller's cancellation then propagates unchanged.
        if _unsettled(batch, calls):
            with anyio.CancelScope(shield=True):
                for item in calls:
                    if item.result is None:
                        item.abort(signal)
                await report_all(batch, calls)


def _unsettled(batch: Batch, calls: list[Call]) -> bool:
    """Whether a call still lacks its result, or its report."""
    reporting = batch.reporting
    return any(item.result is None or (reporting and not item.reported) for item in calls)


def _segments(batch: Batch, calls: list[Call]) -> list[list[Call]]:
    """Split the batch at sequential calls: each sequential call is a segment of its own.
    Looks each tool up once, in the batch's view, and marks the calls that finish on
    interrupt."""
    segments: list[list[Call]] = []
    group: list[Call] = []
    # The registry re-targets a router's call (discovery's execute_tool) to the real tool and
    # names wire-name/id calls by the tool's name: policy, timeout, hooks and spans see the
    # call that runs, under the model's call id.
    resolve = batch.tools.resolve
    default = batch.default_policy
    for item in calls:
        item.call, tool = resolve(item.call)
        item.tool = tool
        if tool is None:
            policy = default
        else:
            definition = tool.definition
            policy = definition.execution_policy or default
            if definition.background:
                # Not stopped by an abort of this batch once started (see `BackgroundCalls`).
                item.background = True
            elif definition.on_interrupt == "finish":
                item.finishes_on_interrupt = batch.finishing = True
        if policy == "parallel":
            group.append(item)
            continue
        if group:
            segments.append(group)
            group = []
        segments.append([item])
    if group:
        segments.append(group)
    return segments


async def _run_segments(batch: Batch, segments: list[list[Call]]) -> None:
    """Run the segments one after another; a segment's calls run concurrently."""
    reporting = batch.reporting
    for segment in segments:
        if batch.aborted():
            return  # aborted from another thread; the cancel is on its way to our loop
        ready: list[Call] = []
        for item in segment:
            if not item.prepare(batch):
                if reporting:
                    await item.report(batch)
            elif item.background and batch.background is not None and not item.needs_approval:
                # Answered "running" at once; its run and final report happen outside. (One
                # that needs approval is asked first, in the batch: see `Call._before_slot`.)
                batch.background.start(item, batch)
            else:
                ready.append(item)
        if len(ready) == 1:  # a lone call runs in the caller's task: no task to pay for
            item = ready[0]
            await item.run(batch, None)
            if reporting:
                await item.report(batch)
        elif ready:
            await _run_group(batch, ready)


async def _run_interruptible(batch: Batch, calls: list[Call], segments: list[list[Call]]) -> None:
    """`_run_segments` for a batch with `"finish"` calls: an abort of the batch signal (or its
    deadline) cancels the calls one by one (`_interrupt`) instead of the whole batch, so a
    started `"finish"` call runs on and the batch waits for it. A watcher task is the price,
    paid only by such batches. Cancelling the caller still cancels every call, `"finish"`
    ones too."""
    signal: AbortSignal = batch.signal  # type: ignore[assignment]  # checked by run_batch

    async def watch() -> None:
        await signal.wait()
        _interrupt(calls)

    async with anyio.create_task_group() as watcher:
        watcher.start_soon(watch)
        try:
            await _run_segments(batch, segments)
        finally:
            watcher.cancel_scope.cancel()


def _interrupt(calls: list[Call]) -> None:
    """The batch signal aborted in a batch with `"finish"` calls: cancel every call except
    those whose handler already started and finish on interrupt. A `"finish"` call still
    queued (for a slot, behind a sequential call, or in its start hooks) never started:
    nothing happened yet, so there is nothing to finish, and it is aborted like the rest.
    Runs in the loop's thread, between the steps of the calls' tasks, so a call is either
    still before its start check (which sees the signal) or already started."""
    for item in calls:
        if (
            item.result is None
            and item.scope is not None
            and not (item.finishes_on_interrupt and item.started)
        ):
            item.scope.cancel()


class Finished:
    """The calls of a group whose tasks ended, waiting for the caller's task to take them
    (`_run_group`): each call is handed over here as its task ends.

    On asyncio the caller waits on a bare loop future: cheaper than an anyio `Event`, and a
    cancellation of the caller cancels only that future, never the tasks running the calls
    (awaiting a task directly would cancel it natively, past any shield its handler holds).
    """

    __slots__ = ("_loop", "_need", "_waiter", "items")

    def __init__(self, loop: Any) -> None:
        self.items: deque[Call] = deque()
        self._loop = loop
        self._waiter: Any = None
        self._need = 1

    def put(self, item: Call) -> None:
        """Called as a call's task ends (also when cancelled)."""
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


async def _run_group(batch: Batch, items: list[Call]) -> None:
    """Run `items` concurrently, reporting each as it ends; return when all ended. Cancelling
    the caller cancels every call (through its own cancel scope) and waits for them before
    the cancellation propagates."""
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
                    await item.report(batch)

    loop = batch.loop
    if loop is None:  # trio (or any backend but asyncio): an anyio task group
        async with anyio.create_task_group() as group:
            for item in items:
                group.start_soon(item.run, batch, finished.put)
            await take_finished()
        return
    # asyncio: bare tasks cost a fifth of task-group tasks. Each call still runs inside its
    # own anyio cancel scope (see `Call.run`), so timeouts, aborts and the caller's
    # cancellation reach it as anyio cancellations that respect its shields. Every call gets
    # a task (none runs in the caller's), so an abort or a cancellation of the caller reaches
    # the caller at once, and it cancels every call's scope together.
    # Each call is handed back by its task's done callback, not by `Call.run` itself: a task
    # cancelled natively before its first step (say, an app cancelling every task) is closed
    # without running its body, so only the callback is sure to hand it back, exactly once.
    tasks = []
    for item in items:
        task = loop.create_task(item.run(batch, None))
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
