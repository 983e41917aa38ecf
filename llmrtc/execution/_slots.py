"""A FIFO pool of concurrency slots shared by every batch of one executor."""

from __future__ import annotations

import threading
from collections import deque

import anyio


class SlotPool:
    """Like `anyio.CapacityLimiter`, but an uncontended acquire does not yield to the event loop
    (a limiter's checkpoint costs ~5 µs per tool call) and the pool holds no loop-bound state, so
    an executor can serve turns that each run under a new event loop.

    Waiters are served first-come first-served; a released slot is handed straight to the oldest
    waiter so a newcomer cannot overtake it. The pool serves one event loop at a time: using it
    from a second loop thread while slots are taken raises instead of deadlocking.
    """

    __slots__ = ("_thread", "_waiters", "in_use", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.in_use = 0
        self._waiters: deque[anyio.Event] = deque()
        self._thread = 0  # the event loop thread using the pool while any slot is taken

    def _check_thread(self) -> None:
        thread = threading.get_ident()
        if self.in_use and thread != self._thread:
            raise RuntimeError(
                "this ToolExecutor is already running calls in another event loop thread; "
                "use one executor per session (per event loop)"
            )
        self._thread = thread

    def can_take(self, count: int) -> bool:
        """Whether `count` slots are free right now with nobody waiting."""
        return not self._waiters and self.in_use + count <= self.total

    def take(self, count: int) -> None:
        """Take `count` free slots at once (check `can_take` first); never waits."""
        self._check_thread()
        self.in_use += count

    async def acquire(self) -> None:
        """Take a slot, waiting in line if none is free. Cancellation while waiting is safe."""
        self._check_thread()
        if self.in_use < self.total and not self._waiters:
            self.in_use += 1
            return
        granted = anyio.Event()
        self._waiters.append(granted)
        try:
            await granted.wait()
        except BaseException:
            if granted.is_set():
                self.release()  # the slot reached us as we were cancelled: pass it on
            else:
                self._waiters.remove(granted)
            raise

    def release(self) -> None:
        """Return a slot, handing it to the oldest waiter if there is one."""
        if self._waiters:
            self._waiters.popleft().set()  # in_use stays: the slot changes hands
        else:
            self.in_use -= 1
