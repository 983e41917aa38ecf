"""Worker threads for sync handlers: an explicit bound that also counts abandoned threads."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from llmrtc.tools.errors import ToolError


class NoWorkerThreadError(ToolError):
    """Every worker thread is taken, mostly by handlers abandoned after a timeout or abort."""


class _Job:
    __slots__ = ("dropped", "started")

    def __init__(self) -> None:
        self.started = False
        self.dropped = False


class WorkerThreads:
    """Runs sync handlers in worker threads, at most `limit` alive at once.

    A thread cannot be killed: a handler abandoned at its timeout keeps its thread until it
    returns. anyio frees a limiter token at abandonment on asyncio but only when the thread ends
    on trio, so neither bounds abandoned threads the same way. This class counts live threads
    itself (a thread gives its place back when its handler really returns) and refuses to start
    another past the limit, so a tool that hangs cannot pile up threads without end. The anyio
    limiter it passes is the executor's own and unbounded: it never waits, and it never takes a
    token from anyio's shared default pool.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.live = 0
        self._lock = threading.Lock()
        self._limiter: RunVar[anyio.CapacityLimiter] = RunVar(f"llmrtc-threads-{id(self)}")

    async def run(self, handler: Callable[[Any, Any], Any], args: Any, ctx: Any) -> Any:
        """Run `handler(args, ctx)` in a worker thread; cancellation abandons the thread.

        Raises:
            NoWorkerThreadError: when `limit` threads are alive.
        """
        with self._lock:
            if self.live >= self.limit:
                raise NoWorkerThreadError(
                    f"all {self.limit} worker threads for sync tools are busy (handlers that "
                    "timed out or were aborted are still running); try again later"
                )
            self.live += 1
        job = _Job()
        try:
            return await anyio.to_thread.run_sync(
                self._in_thread,
                job,
                handler,
                args,
                ctx,
                abandon_on_cancel=True,
                limiter=self._own(),
            )
        except BaseException:
            # Cancelled before a worker picked the job up: anyio will never run it, so its place
            # is returned here. A job that started returns its place itself when it ends.
            with self._lock:
                if not job.started:
                    job.dropped = True
                    self.live -= 1
            raise

    def _in_thread(self, job: _Job, handler: Callable[[Any, Any], Any], args: Any, ctx: Any) -> Any:
        with self._lock:
            if job.dropped:
                return None
            job.started = True
        try:
            return handler(args, ctx)
        finally:
            with self._lock:
                self.live -= 1

    def _own(self) -> anyio.CapacityLimiter:
        try:
            return self._limiter.get()
        except LookupError:
            limiter = anyio.CapacityLimiter(math.inf)
            self._limiter.set(limiter)
            return limiter
