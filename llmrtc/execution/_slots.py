"""A FIFO pool of concurrency slots shared by every batch of one executor."""

from __future__ import annotations

from collections import deque

import anyio


class SlotPool:
    """Like `anyio.CapacityLimiter`, but an uncontended acquire does not yield to the event loop
    (a limiter's checkpoint costs ~5 µs per tool call) and the pool holds no loop-bound state, so
    an executor can serve turns that each run under a new event loop.

    Waiters are served first-come first-served; a released slot is handed straight to the oldest
    waiter so a newcomer cannot overtake it.
    """

    __slots__ = ("_waiters", "in_use", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.in_use = 0
        self._waiters: deque[anyio.Event] = deque()

    async def acquire(self) -> None:
        """Take a slot, waiting in line if none is free. Cancellation while waiting is safe."""
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
