"""Abort signals: how a barge-in, a disconnect or a timeout tells running work to stop.

`AbortController` owns the right to abort; the `AbortSignal` it hands out is what work observes.
Controllers form a tree (session → turn → tool call): a child's signal counts as aborted as soon
as its parent's is, never the other way round. A controller may also carry a deadline
(`time.monotonic()` seconds), after which its signal counts as aborted with reason `"timeout"`.

Both can be created before any event loop runs, and `abort()` may be called from any thread (a VAD
or audio thread will): listeners registered from inside an event loop always run *in that loop's
thread*, so they may touch loop-bound objects such as cancel scopes.

Work observes a signal by polling (`aborted`, `raise_if_aborted()`: a sync tool in a worker
thread), by waiting (`await wait()`, `await sleep(seconds)`), or by running inside
`cancel_scope()`, which cancels the code in it when the signal aborts or its deadline passes.

This module sits on floor 0 (of ours it imports only the root exception, `llmrtc.errors`)
because every floor needs it: tools see it in their `ToolContext`, the executor cancels batches
with it, and model providers, STT, TTS and playout stop with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio
import anyio.lowlevel

from llmrtc.errors import LLMRTCError

try:
    import sniffio as _sniffio
except ImportError:  # anyio no longer needs it; without it, a running asyncio loop is asyncio
    _sniffio = None  # type: ignore[assignment]

__all__ = ["AbortController", "AbortSignal", "AbortedError"]

_Listener = Callable[[], object]

_log = logging.getLogger(__name__)


def _checked_deadline(value: float | None) -> float | None:
    """`value` as a float deadline; NaN is refused (it compares false with every time, so it
    would never pass, and anyio refuses it as a scope deadline)."""
    if value is None:
        return None
    deadline = float(value)
    if math.isnan(deadline):
        raise ValueError(
            f"AbortController deadline: got {value!r}; expected a time.monotonic() time "
            "(a number, inf for never) or None"
        )
    return deadline


def _fire_all(listeners: list[_LoopListener]) -> None:
    """Fire every listener; one that raises is logged and never keeps the others (cancel scopes
    among them) from being told."""
    for listener in listeners:
        try:
            listener.fire()
        except Exception:
            _log.exception("abort signal listener %r raised", listener.callback)


class AbortedError(LLMRTCError):
    """Raised by `AbortSignal.raise_if_aborted()`; carries the abort reason."""

    def __init__(self, reason: object = None) -> None:
        super().__init__(f"aborted: {reason}" if reason is not None else "aborted")
        self.reason = reason


class _LoopListener:
    """A callback bound to the event loop (and thread) it was registered from."""

    __slots__ = ("callback", "native_token", "thread_id")

    def __init__(self, callback: _Listener, native_token: Any = None) -> None:
        self.callback = callback
        self.thread_id = threading.get_ident()
        # The backend's own loop handle: an asyncio event loop or a `trio.lowlevel.TrioToken`.
        # Hopping through it directly works on every anyio >= 4.11 (anyio's own
        # `backend_class.run_sync_soon` appeared only in 4.16).
        self.native_token: Any = native_token if native_token is not None else _native_token()

    def fire(self) -> None:
        if threading.get_ident() == self.thread_id:
            self.callback()
            return
        # Another thread aborted: hop into the listener's loop without blocking the caller.
        # A loop that is gone has nothing left to notify (asyncio raises RuntimeError for a
        # closed loop, trio its RunFinishedError, a RuntimeError too).
        native = self.native_token
        with contextlib.suppress(RuntimeError):
            if hasattr(native, "call_soon_threadsafe"):
                native.call_soon_threadsafe(self.callback)
            else:
                native.run_sync_soon(self.callback)


def _native_token() -> Any:
    """The running loop's own handle: the asyncio loop, else (trio) the backend's token.

    `anyio.lowlevel.current_token()` costs ~2.5 us; the asyncio loop is found in a tenth of
    that, and every batch and every `cancel_scope()` needs one.
    """
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # trio (or no loop: anyio raises its NoEventLoopError)
        return anyio.lowlevel.current_token().native_token
    if _sniffio is not None:
        try:
            library = _sniffio.current_async_library()
        except _sniffio.AsyncLibraryNotFoundError:  # a bare loop callback: asyncio's own
            return loop
        if library != "asyncio":  # trio in guest mode on an asyncio loop
            return anyio.lowlevel.current_token().native_token
    return loop


_scope_classes: dict[bool, type[anyio.CancelScope]] = {}  # by "is asyncio"


class _SignalScope:
    """`AbortSignal.cancel_scope()`: one listener for the whole chain of signals, told both of
    an abort and of a deadline change, and a cancel scope that follows them.

    A class rather than a generator context manager, with one listener instead of one per
    signal and per kind: the executor enters one per batch, so its cost is paid per batch.
    """

    __slots__ = ("_chain", "_listener", "_offset", "_scope", "_signal")

    def __init__(self, signal: AbortSignal) -> None:
        self._signal = signal
        self._listener: _LoopListener | None = None
        self._chain: list[AbortSignal] = []

    def __enter__(self) -> anyio.CancelScope:
        if self._listener is not None:
            # Its one listener and scope are in use: a second entry would replace them.
            raise RuntimeError(
                "this signal.cancel_scope() is already entered; nested or concurrent blocks "
                "each need their own: call signal.cancel_scope() again"
            )
        token = _native_token()
        is_asyncio = hasattr(token, "call_soon_threadsafe")
        scope_class = _scope_classes.get(is_asyncio)
        if scope_class is None:  # anyio picks the backend's class on every CancelScope()
            scope_class = _scope_classes[is_asyncio] = type(anyio.CancelScope())
        scope = self._scope = scope_class()
        # The loop's clock may differ from time.monotonic() (trio's has an offset). Taken here,
        # in the task: a deadline update may run as a bare loop callback, where anyio cannot
        # tell which backend it is on.
        now = token.time() if is_asyncio else anyio.current_time()
        self._offset = now - time.monotonic()
        listener = self._listener = _LoopListener(self._update, token)
        chain: list[AbortSignal] = []
        self._chain = chain
        try:
            signal: AbortSignal | None = self._signal
            while signal is not None:
                with signal._lock:
                    chain.append(signal)
                    signal._watchers.append(listener)
                    if not signal._aborted:
                        signal._listeners.append(listener)
                signal = signal._parent
            self._update()  # an abort or deadline that came first applies at once
            scope.__enter__()
        except BaseException:
            self._unregister()
            raise
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._unregister()
        return bool(self._scope.__exit__(exc_type, exc, traceback))

    def _unregister(self) -> None:
        """Remove the listener from every signal it was added to; the object may be re-entered."""
        listener = self._listener
        for signal in self._chain:
            with signal._lock:
                if listener in signal._watchers:
                    signal._watchers.remove(listener)
                if listener in signal._listeners:
                    signal._listeners.remove(listener)
        self._chain = []
        self._listener = None

    def _update(self) -> None:
        """An abort or a deadline change somewhere in the chain (in the loop's thread)."""
        signal = self._signal
        if signal.aborted:
            self._scope.cancel()
            return
        deadline = signal._earliest_deadline()
        self._scope.deadline = math.inf if deadline is None else deadline + self._offset


class AbortSignal:
    """Read-only view of an abort: check `aborted`, read `reason`, `await wait()`, `await
    sleep(seconds)`, or run code inside `cancel_scope()`.

    Obtain one from `AbortController().signal`. A signal may have a parent: it then counts as
    aborted as soon as either it or its parent is (the executor gives each tool call such a child
    of the batch signal, so a timeout of one call never aborts its siblings).

    Example:
        async def speak(text: str, signal: AbortSignal) -> None:
            with signal.cancel_scope():  # a barge-in stops playout at once
                async for frame in tts.stream(text):
                    await playout.put(frame)
    """

    __slots__ = ("_aborted", "_deadline", "_listeners", "_lock", "_parent", "_reason", "_watchers")

    def __init__(self, _parent: AbortSignal | None = None) -> None:
        self._aborted = False
        self._reason: object = None
        self._listeners: list[_LoopListener] = []
        self._watchers: list[_LoopListener] = []  # told when this signal's deadline changes
        self._lock = threading.Lock()
        self._parent = _parent
        self._deadline: float | None = None

    @property
    def aborted(self) -> bool:
        """True once this signal (or its parent) has been aborted, or a deadline passed."""
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

    @property
    def deadline(self) -> float | None:
        """This signal's own deadline in `time.monotonic()` seconds, or None (a parent's
        deadline applies too, but is not shown here). Set it through the controller."""
        return self._deadline

    def raise_if_aborted(self) -> None:
        """Raise `AbortedError` if the signal is aborted; handy in cooperative loops."""
        if self.aborted:
            raise AbortedError(self.reason)

    def cancel_scope(self) -> contextlib.AbstractContextManager[anyio.CancelScope]:
        """Run a block that is cancelled when this signal aborts or its deadline passes.

        Yields an anyio `CancelScope` that swallows its own cancellation, as `move_on_after`
        does: check `scope.cancelled_caught` after the block to know whether it was cut short.
        Works in any anyio task (asyncio or trio), also when `abort()` is called from a plain
        thread; a deadline changed through the controller while the block runs applies at once.
        If the signal is already aborted, the block is cancelled at its first checkpoint.

        Example:
            with signal.cancel_scope() as scope:
                async for chunk in stt.stream(audio):
                    ...
            if scope.cancelled_caught:
                ...  # barge-in or timeout
        """
        return _SignalScope(self)

    async def sleep(self, seconds: float) -> bool:
        """Sleep `seconds` unless the signal aborts first.

        Returns:
            True when the full time passed, False when the signal aborted (or its deadline
            passed) first. Cancelling the caller still raises as usual.

        Example:
            while await signal.sleep(0.02):  # one 20 ms audio frame at a time, until barge-in
                send(next_frame())
        """
        if self.aborted:
            return False
        with self.cancel_scope():
            await anyio.sleep(seconds)
            return True
        return False

    async def wait(self) -> None:
        """Return once the signal is aborted or its deadline passed (at once if it already is)."""
        if self.aborted:
            return
        with self.cancel_scope():
            await anyio.sleep_forever()

    def subscribe(self, callback: _Listener) -> Callable[[], None]:
        """Call `callback()` once when the signal (or a parent) is aborted, in the current event
        loop's thread.

        Must be called from inside a running event loop. If the signal is already aborted the
        callback runs at once. A deadline passing is not an abort by itself (nothing runs at
        that moment): `cancel_scope()`, `wait()` and `sleep()` watch deadlines. Returns a
        function that removes the subscription.
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

    def _earliest_deadline(self) -> float | None:
        """The earliest deadline of this signal and its ancestors."""
        earliest = self._deadline
        parent = self._parent
        while parent is not None:
            if parent._deadline is not None and (earliest is None or parent._deadline < earliest):
                earliest = parent._deadline
            parent = parent._parent
        return earliest

    def _set_deadline(self, deadline: float | None) -> None:
        self._deadline = deadline
        if self._watchers:  # only blocks inside cancel_scope()/wait()/sleep() need telling
            with self._lock:
                watchers = list(self._watchers)
            _fire_all(watchers)

    def _abort(self, reason: object) -> bool:
        with self._lock:
            if self._aborted:
                return False
            self._aborted = True
            self._reason = reason
            listeners, self._listeners = self._listeners, []
        _fire_all(listeners)
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

        # A child with a time limit: aborted by its parent, or after 5 s with reason "timeout".
        reply = AbortController(parent=controller.signal, deadline=time.monotonic() + 5)
    """

    __slots__ = ("signal",)

    def __init__(self, *, parent: AbortSignal | None = None, deadline: float | None = None) -> None:
        """Create a controller.

        Args:
            parent: Optional signal this controller's signal follows: aborting the parent aborts
                this signal too, while aborting this one leaves the parent untouched.
            deadline: Optional `time.monotonic()` time after which the signal counts as aborted
                with reason `"timeout"` (see `deadline`).
        """
        self.signal = AbortSignal(parent)
        self.signal._deadline = _checked_deadline(deadline)

    @property
    def deadline(self) -> float | None:
        """The signal's own deadline in `time.monotonic()` seconds; None means none.

        Settable at any time, from any thread; None clears it. Past it the signal counts as
        aborted with reason `"timeout"` (`aborted` and `reason` say so at once, and blocks in
        `cancel_scope()`, `wait()` or `sleep()` are cancelled), but listeners registered with
        `subscribe` are only called by `abort()`.
        """
        return self.signal._deadline

    @deadline.setter
    def deadline(self, value: float | None) -> None:
        self.signal._set_deadline(_checked_deadline(value))

    def abort(self, reason: Any = None) -> bool:
        """Abort the signal. Idempotent and thread-safe; returns True only for the first call."""
        return self.signal._abort(reason)

    def __repr__(self) -> str:
        return f"<AbortController {self.signal!r}>"
