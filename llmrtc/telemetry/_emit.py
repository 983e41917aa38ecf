"""`emit`: how every layer calls its hooks, isolating failures and stalls (see
`llmrtc.telemetry.hooks` for the rules; it re-exports `emit`)."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:
    from llmrtc.telemetry.hooks import Hooks

__all__ = ["emit"]

# The hooks module's logger: a failing hook is reported where users look for hook problems.
logger = logging.getLogger("llmrtc.telemetry.hooks")


async def emit(hooks: Sequence[Hooks], name: str, event: object, *, shield: bool = True) -> None:
    """Call hook `name` of each of `hooks` with `event`, isolating failures and stalls.

    Use `hooks_for` to pick the hooks once, outside the hot path.

    Args:
        hooks: The hooks to call, in order.
        name: The hook method, e.g. `"on_tool_end"`.
        event: The event object.
        shield: Protect async hooks from the caller's cancellation (an abort must not cut short
            the hooks that report it). Hooks that announce work about to start pass False, so
            an abort arriving meanwhile is not delayed by them. A native asyncio cancellation
            of the caller (`asyncio.timeout`) cannot be held off and propagates either way.
            On asyncio a cancellation the hook raised of its own making (it awaited something
            cancelled elsewhere) is logged and ignored either way; on trio only with a shield.
    """
    for hook in hooks:
        try:
            outcome = getattr(hook, name)(event)
            if outcome is None:  # a sync hook (the common case): nothing to await
                continue
            if inspect.isawaitable(outcome):
                await _await_hook(hook, name, outcome, shield=shield)
        except Exception:
            logger.exception("hook %s.%s raised; ignored", type(hook).__name__, name)


async def _await_hook(hook: Hooks, name: str, outcome: Awaitable[object], *, shield: bool) -> None:
    """Await an async hook's `outcome`, bounded by its `hook_timeout`; see `emit`."""
    # On asyncio anyio's shield holds off anyio's own cancel scopes but not a native
    # `Task.cancel()` (`asyncio.timeout`, a `TaskGroup` failing, a cancelled task): those reach
    # the hook anyway. The task's count of pending cancellation requests tells them apart from
    # a cancellation the hook made itself, which anyio balances out or never counted.
    task = _current_asyncio_task()
    requests = task.cancelling() if task is not None else 0
    try:
        # Bounded so a slow hook cannot stall a turn or the audio path.
        with anyio.CancelScope(shield=shield):
            with anyio.move_on_after(hook.hook_timeout) as scope:
                await outcome
    except anyio.get_cancelled_exc_class():
        if task is None:  # trio: unshielded, any cancellation may be the caller's
            if not shield:
                raise
        elif task.cancelling() > requests or requests:
            # The caller is being cancelled: anyio's own scopes (an abort, a timeout) cancel
            # through `Task.cancel()` too, so they count; a request pending since before the
            # hook began (thrown at its first await) counts as well.
            raise
        # Otherwise only the hook itself can have raised this (it awaited something cancelled
        # elsewhere): it must not cancel the library's work.
        logger.warning("hook %s.%s raised a cancellation; ignored", type(hook).__name__, name)
        return
    if task is not None and task.cancelling() > requests:
        # The hook caught and dropped the caller's cancellation: it must not be lost.
        raise asyncio.CancelledError(f"cancelled while hook {type(hook).__name__}.{name} ran")
    if scope.cancelled_caught:
        logger.warning(
            "hook %s.%s took longer than %.3g s and was cancelled",
            type(hook).__name__,
            name,
            hook.hook_timeout,
        )


def _current_asyncio_task() -> asyncio.Task[Any] | None:
    """The running asyncio task, or None on another event loop (trio)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no asyncio loop running in this thread
        return None
