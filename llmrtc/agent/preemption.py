"""`Preemption`: a turn's first model request, sent before the turn (preemptive generation).

A voice loop knows what the user said a few hundred milliseconds before it decides the user has
finished: the user paused, the pause was transcribed, and the loop still waits to see whether
the user goes on. A `PreemptingHandler` starts the model on that transcript at once
(`handler.preempt(text)`); the answer streams into a buffer that nobody hears. When the turn
is then run with the same words (`run_turn(text, preemption=p)`), its first request, if it is
exactly the request the handler started (same history, prompt, tools and settings), takes the
buffered answer and the rest of the stream instead of asking again: the answer is already under
way. Anything else discards it.

What a preemptive answer never does, by construction: run a tool (the buffer holds the calls
the model made; only the turn that adopts it runs them, as its own) or reach a speaker (its text
is only yielded by the turn that adopts it). Discarding aborts the request, which releases the
model server's slot. Nothing of a discarded answer reaches the history or the hooks: the hooks
see the request when a turn adopts it, as that turn's first request.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

import anyio

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.llm.types import LLMDone, LLMEvent, LLMRequest, LLMResponse, LLMTextDelta, LLMToolCall

if TYPE_CHECKING:
    from llmrtc.llm.provider import LLMProvider

__all__ = ["Preemption"]

logger = logging.getLogger(__name__)


class Preemption:
    """A model request started ahead of its turn; see the module docstring.

    Made by a handler's `preempt(user_text)`; the caller runs `run()` in a task of its own and
    passes the object to `run_turn(..., preemption=...)`, or calls `discard()`.

    Example:
        early = handler.preempt("What's the weather in Oslo?")
        if early is not None:
            group.start_soon(early.run)
            ...                                  # the user said nothing more
            async for event in handler.run_turn(early.user_text, preemption=early):
                ...
    """

    def __init__(self, llm: LLMProvider, request: LLMRequest, user_text: str) -> None:
        """Prepare the early request (nothing is sent before `run()`)."""
        self.llm = llm
        """The model asked."""
        self.request = request
        """The request sent: a turn takes the answer only for an equal first request."""
        self.user_text = user_text
        """The words it answers."""
        self._controller = AbortController()
        self._events: list[LLMEvent] = []
        self._error: BaseException | None = None
        self._finished = False
        self._changed = anyio.Event()
        self._scope: anyio.CancelScope | None = None
        self._adopted = False

    @property
    def discarded(self) -> bool:
        """True once `discard()` was called (or the adopting turn aborted it)."""
        return self._controller.signal.aborted

    @property
    def adopted(self) -> bool:
        """True once a turn took this request as its first."""
        return self._adopted

    @property
    def text(self) -> str:
        """The answer's text streamed so far (what a turn adopting it would say first)."""
        return "".join(e.text for e in self._events if isinstance(e, LLMTextDelta))

    @property
    def calls(self) -> int:
        """Tool calls the model made in it so far (none of them has run)."""
        return sum(isinstance(e, LLMToolCall) for e in self._events)

    async def run(self) -> None:
        """Send the request and buffer its answer until it ends or is discarded. Never raises
        a model failure: the turn that adopts the request meets it as its own."""
        if self.discarded:
            return
        ended = False
        with anyio.CancelScope() as self._scope:
            try:
                async for event in self.llm.stream(self.request, abort_signal=self._signal):
                    self._events.append(event)
                    self._wake()
                ended = True
            except Exception as exc:  # the adopting turn recovers from it as from its own
                logger.debug("the preemptive request failed: %r", exc)
                self._error = exc
                ended = True
            finally:
                if not ended:  # cancelled (discarded, or its task group ended): cut off
                    self._controller.abort("the preemptive request was cancelled")
                self._finished = True
                self._scope = None
                self._wake()

    def discard(self, reason: str = "the preemptive answer was not used") -> None:
        """Stop the request and forget its answer (a no-op once adopted)."""
        if self._adopted:
            return
        if self._controller.abort(reason):
            logger.debug("preemptive answer discarded (%s) after %r", reason, self.text[:80])
        if self._scope is not None:
            self._scope.cancel()
        self._wake()

    def adopt(self, request: LLMRequest) -> LLMProvider | None:
        """A provider that answers `request` with this early answer, if `request` is exactly
        the one started and it is still alive; else None (and it is discarded). Once only.
        Its `run()` must be running or due to run in a task: the turn waits for its events."""
        if self._adopted or self.discarded:
            return None

        if request != self.request:
            self.discard("the turn's first request differs from the preempted one")
            return None
        self._adopted = True
        return _Adopted(self)

    @property
    def _signal(self) -> AbortSignal:
        return self._controller.signal

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _replay(self, abort_signal: AbortSignal | None) -> AsyncGenerator[LLMEvent, None]:
        """The buffered events, then the rest as it comes; `abort_signal` stops the request."""
        unsubscribe = (
            abort_signal.subscribe(lambda: self._abort(abort_signal))
            if abort_signal is not None
            else None
        )
        at = 0
        ended = False  # its LLMDone was given: the answer is whole, nothing to stop
        try:
            while True:
                if abort_signal is not None and abort_signal.aborted:
                    yield LLMDone("aborted")  # the turn was aborted: no more of the buffer
                    return
                if at < len(self._events):
                    event = self._events[at]
                    at += 1
                    if isinstance(event, LLMDone):
                        ended = True
                    yield event
                    if ended:
                        return
                    continue
                if self._finished:
                    if self._error is not None:
                        raise self._error
                    if self._controller.signal.aborted:
                        yield LLMDone("aborted")
                        return
                    # A provider that ended without its LLMDone: end the stream as one would.
                    yield LLMDone("stop")
                    return
                await self._changed.wait()
        finally:
            if unsubscribe is not None:
                unsubscribe()
            if not self._finished and not ended:  # the turn left early (aborted, or left)
                self._abort(None)

    def _abort(self, signal: AbortSignal | None) -> None:
        reason = signal.reason if signal is not None else "the turn left its first request"
        self._controller.abort(reason)
        self._wake()

    def __repr__(self) -> str:
        state = "adopted" if self._adopted else "discarded" if self.discarded else "open"
        return f"<Preemption {state} {self.user_text!r}>"


class _Adopted:
    """The `LLMProvider` a turn's first round asks: it answers with the early answer."""

    def __init__(self, early: Preemption) -> None:
        self._early = early
        self._used = False
        self.model = early.llm.model
        self.provider_name = early.llm.provider_name

    def stream(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> AsyncGenerator[LLMEvent, None]:
        if self._used or request != self._early.request:
            raise RuntimeError("an adopted preemptive answer answers its one request once")
        self._used = True
        return self._early._replay(abort_signal)

    async def complete(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> LLMResponse:
        from llmrtc.llm.provider import collect_response

        return await collect_response(self.stream(request, abort_signal=abort_signal))
