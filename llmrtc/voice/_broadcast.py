"""One producer, many consumers, none of which can slow the producer down.

`VoiceLoop.events()` and `audio_out()` are built on it: the loop publishes without ever
waiting (the audio clock must keep its 20 ms beat), and each subscriber has a bounded buffer
of its own. A subscriber that falls behind loses its *oldest* items (counted in `dropped`, and
logged once): for audio, the freshest frames are the ones worth playing; for events, a consumer
that lags by hundreds of events is broken anyway, and the loop must not grow without bound.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import anyio

T = TypeVar("T")

logger = logging.getLogger(__name__)

_LOG_EVERY = 10.0
"""Seconds between two debug lines about one slow subscriber (publish runs in the 20 ms audio
clock: it must never log per item)."""


class Subscription(Generic[T]):
    """An async iterator over what a `Broadcast` publishes from the moment it was created.

    It ends once the broadcast is closed and everything buffered was taken.
    """

    def __init__(self, maxlen: int, what: str) -> None:
        self._buffer: deque[T] = deque()
        self._maxlen = maxlen
        self._what = what
        self._wakeup: anyio.Event | None = None
        self._closed = False
        self.dropped = 0
        """Items lost because this subscriber fell more than `maxlen` behind."""
        self._logged_at = -_LOG_EVERY

    def _put(self, item: T) -> None:
        if len(self._buffer) >= self._maxlen:
            self._buffer.popleft()
            self.dropped += 1
            now = time.monotonic()
            if now - self._logged_at >= _LOG_EVERY:  # rate-limited, debug: see _LOG_EVERY
                self._logged_at = now
                logger.debug(
                    "a slow %s subscriber fell %d items behind: dropped %d oldest so far",
                    self._what,
                    self._maxlen,
                    self.dropped,
                )
        self._buffer.append(item)
        self._wake()

    def _close(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()
            self._wakeup = None

    def __aiter__(self) -> Subscription[T]:
        return self

    async def __anext__(self) -> T:
        while not self._buffer:
            if self._closed:
                raise StopAsyncIteration
            self._wakeup = anyio.Event()
            await self._wakeup.wait()
        return self._buffer.popleft()


class Broadcast(Generic[T]):
    """Hands every published item to every live subscription (held weakly: a consumer that
    drops its iterator unsubscribes)."""

    def __init__(self, maxlen: int, what: str) -> None:
        self._maxlen = maxlen
        self._what = what
        self._subscribers: weakref.WeakSet[Subscription[T]] = weakref.WeakSet()
        self._closed = False

    def subscribe(self) -> Subscription[T]:
        """A new subscription (already ended if the broadcast is closed)."""
        subscription: Subscription[T] = Subscription(self._maxlen, self._what)
        if self._closed:
            subscription._close()
        else:
            self._subscribers.add(subscription)
        return subscription

    def publish(self, item: T) -> None:
        """Give `item` to every subscriber; never waits."""
        for subscription in list(self._subscribers):
            subscription._put(item)

    def replace(self, change: Callable[[T], T]) -> None:
        """Swap every item still buffered for `change(item)` (e.g. speech frames not yet taken
        become silence after a barge-in); never waits."""
        for subscription in list(self._subscribers):
            buffer = subscription._buffer
            for i, item in enumerate(buffer):
                buffer[i] = change(item)

    def close(self) -> None:
        """End every subscription (after what they buffered)."""
        self._closed = True
        for subscription in list(self._subscribers):
            subscription._close()
        self._subscribers = weakref.WeakSet()
