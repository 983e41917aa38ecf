"""`abort_after`: abort a controller after a delay, the way a barge-in or a hang-up would.

Example:
    async with abort_after(0.05, "barge-in") as controller:
        results = await executor.execute(calls, abort_signal=controller.signal)
    assert results[0].status == "aborted"
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from llmrtc.abort import AbortController

__all__ = ["abort_after"]


@asynccontextmanager
async def abort_after(
    seconds: float,
    reason: Any = "barge-in",
    *,
    controller: AbortController | None = None,
    from_thread: bool = False,
) -> AsyncIterator[AbortController]:
    """Call `controller.abort(reason)` once `seconds` have passed inside the block.

    The abort is a real `abort()` call made while the block runs (not a deadline), as a
    voice activity detector or a disconnect would make it. If the block ends first, nothing
    is aborted and nothing is left running. What the block raises propagates unchanged.

    Args:
        seconds: Delay from entering the block to the abort (>= 0).
        reason: The abort reason the signal will carry.
        controller: The controller to abort; a new one by default.
        from_thread: Abort from a plain thread (as a VAD or audio thread does) instead of a
            task of the current event loop.

    Yields:
        The controller; pass `controller.signal` to the code under test.

    Raises:
        ValueError: `seconds` is negative or not a number.
    """
    if not seconds >= 0:  # also refuses NaN
        raise ValueError(f"abort_after: seconds must be >= 0, got {seconds!r}")
    controller = AbortController() if controller is None else controller
    if from_thread:
        timer = threading.Timer(seconds, controller.abort, args=(reason,))
        timer.daemon = True
        timer.start()
        try:
            yield controller
        finally:
            timer.cancel()
            timer.join()  # returns at once unless abort() is running this instant
        return
    body_error: BaseException | None = None
    try:
        async with anyio.create_task_group() as group:

            async def abort_later() -> None:
                await anyio.sleep(seconds)
                controller.abort(reason)

            group.start_soon(abort_later)
            try:
                yield controller
            except BaseException as exc:
                body_error = exc
                raise
            finally:
                group.cancel_scope.cancel()
    except BaseExceptionGroup as group_error:
        # The task group wraps what the block raised; callers expect it as it was raised.
        if body_error is None or list(group_error.exceptions) != [body_error]:
            raise
    if body_error is not None:
        raise body_error
