"""Awaiting under an optional `AbortSignal`: the provider's request, stream and backoff."""

from __future__ import annotations

from contextlib import AbstractContextManager

import anyio

from llmrtc.abort import AbortSignal

__all__ = ["abort_scope", "aborted"]


def abort_scope(signal: AbortSignal | None) -> AbstractContextManager[anyio.CancelScope]:
    """`signal.cancel_scope()`, or a scope nothing cancels when there is no signal.

    The block is cancelled when the signal aborts, its deadline or a parent's passes, and the
    scope swallows that: check `scope.cancelled_caught` after the block. Never `yield` from an
    async generator inside it (the scope would cancel the consumer's code): wrap each await.
    """
    return signal.cancel_scope() if signal is not None else anyio.CancelScope()


def aborted(scope: anyio.CancelScope, signal: AbortSignal | None) -> bool:
    """Whether the signal stopped the work of `scope`, also when the awaited call returned
    without a checkpoint (so the scope's cancellation was never delivered)."""
    return scope.cancel_called or (signal is not None and signal.aborted)
