"""Abort signals: how a barge-in, a disconnect or a timeout tells running work to stop.

`AbortController` owns the right to abort; the `AbortSignal` it hands out is what work observes.
Both can be created before any event loop runs, and `abort()` may be called from any thread (a VAD
or audio thread will): listeners registered from inside an event loop always run *in that loop's
thread*, so they may touch loop-bound objects such as cancel scopes.

This module sits on floor 0 (it imports nothing of ours) because every floor needs it: tools see
it in their `ToolContext`, the executor cancels batches with it, and model providers stop
streams with it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel

__all__ = ["AbortController", "AbortSignal", "AbortedError"]

_Listener = Callable[[], object]


class AbortedError(Exception):
    """Raised by `AbortSignal.raise_if_aborted()`; carries the abort reason."""

    def __init__(self, reason: object = None) -> None:
        super().__init__(f"aborted: {reason}" if reason is not None else "aborted")
        self.reason = reason


class _LoopListener:
    """A callback bound to the event loop (and thread) it was registered from."""

    __slots__ = ("callback", "thread_id", "token")

    def __init__(self, callback: _Listener) -> None:
        self.callback = callback
        self.thread_id = threading.get_ident()
        self.token = anyio.lowlevel.current_token()

    def fire(self) -> None:
        if threading.get_ident() == self.thread_id:
            self.callback()
            return
        # Another thread aborted: hop into the listener's loop without blocking the caller.
        # anyio's own from_thread portal uses this backend primitive for the same purpose.
        # (If that loop is gone, nothing is left there to notify.)
        with contextlib.suppress(anyio.RunFinishedError, RuntimeError):
            self.token.backend_class.run_sync_soon(self.callback, (), self.token.native_token)


class AbortSignal:
    """Read-only view of an abort: check `aborted`, read `reason`, or `await wait()`.

    Obtain one from `AbortController().signal`. A signal may have a parent: it then counts as
    aborted as soon as either it or its parent is (the executor gives each tool call such a child
    of the batch signal, so a timeout of one call never aborts its siblings).
    """

    __slots__ = ("_aborted", "_deadline", "_listeners", "_lock", "_parent", "_reason")

    def __init__(self, _parent: AbortSignal | None = None) -> None:
        self._aborted = False
        self._reason: object = None
        self._listeners: list[_LoopListener] = []
        self._lock = threading.Lock()
        self._parent = _parent
        # time.monotonic() after which the signal counts as aborted with reason "timeout": the
        # executor sets it when a handler starts, so code polling the signal (a thread, a
        # `finally` block) sees the timeout the moment it happens, before any cancellation.
        self._deadline: float | None = None

    @property
    def aborted(self) -> bool:
        """True once this signal (or its parent) has been aborted, or its deadline passed."""
        return (
            self._aborted
            or (self._deadline is not None and time.monotonic() >= self._deadline)
            or (self._parent is not None and self._parent.aborted)
        )

    @property
    def reason(self) -> object:
        """Why it aborted: its own reason (`"timeout"` past its deadline), else its parent's;
        None while not aborted."""
        if self._aborted:
            return self._reason
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return "timeout"
        if self._parent is not None:
            return self._parent.reason
        return None

    def raise_if_aborted(self) -> None:
        """Raise `AbortedError` if the signal is aborted; handy in cooperative loops."""
        if self.aborted:
            raise AbortedError(self.reason)

    async def wait(self) -> None:
        """Return once the signal is aborted (at once if it already is)."""
        if self.aborted:
            return
        event = anyio.Event()
        unsubscribe = self.subscribe(event.set)
        try:
            if self._deadline is None:
                await event.wait()
            else:
                with anyio.move_on_after(max(0.0, self._deadline - time.monotonic())):
                    await event.wait()
        finally:
            unsubscribe()

    def subscribe(self, callback: _Listener) -> Callable[[], None]:
        """Call `callback()` once when the signal aborts, in the current event loop's thread.

        Must be called from inside a running event loop. If the signal is already aborted the
        callback runs at once. Returns a function that removes the subscription.
        """
        fired = False

        def once() -> None:
            # Both this signal and its parent may fire; both hop to the same loop thread.
            nonlocal fired
            if not fired:
                fired = True
                callback()

        listener = _LoopListener(once)
        undo_parent = self._parent.subscribe(once) if self._parent is not None else None
        with self._lock:
            fire_now = self._aborted
            if not fire_now:
                self._listeners.append(listener)
        if fire_now:
            listener.fire()

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)
            if undo_parent is not None:
                undo_parent()

        return unsubscribe

    def _abort(self, reason: object) -> bool:
        with self._lock:
            if self._aborted:
                return False
            self._aborted = True
            self._reason = reason
            listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener.fire()
        return True

    def __repr__(self) -> str:
        state = f"aborted, reason={self.reason!r}" if self.aborted else "not aborted"
        return f"<AbortSignal {state}>"


class AbortController:
    """Owns an `AbortSignal` and the right to abort it.

    Example:
        controller = AbortController()
        results = await executor.execute(calls, abort_signal=controller.signal)
        # elsewhere, e.g. from the VAD thread when the user barges in:
        controller.abort("barge-in")
    """

    __slots__ = ("signal",)

    def __init__(self, *, parent: AbortSignal | None = None) -> None:
        """Create a controller.

        Args:
            parent: Optional signal this controller's signal follows: aborting the parent aborts
                this signal too, while aborting this one leaves the parent untouched.
        """
        self.signal = AbortSignal(parent)

    def abort(self, reason: Any = None) -> bool:
        """Abort the signal. Idempotent and thread-safe; returns True only for the first call."""
        return self.signal._abort(reason)

    def __repr__(self) -> str:
        return f"<AbortController {self.signal!r}>"
