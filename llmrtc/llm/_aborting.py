"""Awaiting under an `AbortSignal`: what the provider's stream and backoff are made of."""

from __future__ import annotations

from typing import Any

import anyio

from llmrtc.abort import AbortSignal

__all__ = ["ABORTED", "END", "next_or_end", "sleep_unless_aborted", "until_aborted"]

ABORTED = object()
"""What `until_aborted` returns for an abort, when asked to."""
END = object()
"""What `next_or_end` returns at the end of the iterator."""


async def next_or_end(iterator: Any) -> Any:
    """The iterator's next item, or `END`."""
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return END


async def until_aborted(awaitable: Any, signal: AbortSignal | None, default: Any = None) -> Any:
    """Await `awaitable`, cancelling it the moment `signal` aborts (then return `default`)."""
    if signal is None:
        return await awaitable
    with anyio.CancelScope() as scope:
        unsubscribe = signal.subscribe(scope.cancel)
        try:
            return await awaitable
        finally:
            unsubscribe()
    if hasattr(awaitable, "close"):
        awaitable.close()  # a coroutine cancelled before it started: no "never awaited"
    return default


async def sleep_unless_aborted(seconds: float, signal: AbortSignal | None) -> bool:
    """Sleep; False if `signal` aborted meanwhile."""
    if signal is None:
        await anyio.sleep(seconds)
        return True
    with anyio.move_on_after(seconds):
        await signal.wait()
        return False
    return True
