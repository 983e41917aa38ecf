"""`Breakers`: the executor's circuit breakers, one per tool that declares a `CircuitBreaker`
(`llmrtc.tools.breaker`). The executor asks `admit` before a call runs and tells `record` how
it ended; a refused call ends `"unavailable"` without running.

How outcomes count: `ok` is a success, `error` and `timeout` are failures, every other status
(invalid arguments, aborted, refused, still running in the background) says nothing about the
backend and leaves the count as it is. In the half-open state exactly one trial call runs; a
trial that ends with such a neutral status frees the trial for the next call. A call admitted
while closed that ends after the breaker opened does not change the open state (the trial
after `reset_after` decides).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from llmrtc.tools.breaker import BreakerState, CircuitBreaker

__all__ = ["BreakerChange", "Breakers"]

logger = logging.getLogger(__name__)

_FAILURES = frozenset({"error", "timeout"})


@dataclass(frozen=True, slots=True)
class BreakerChange:
    """A breaker moved from one state to another."""

    tool_name: str
    old: BreakerState
    new: BreakerState
    failures: int
    """Consecutive failures counted when it changed."""
    reset_after: float
    """Seconds an open breaker waits before its trial call."""


class _Breaker:
    __slots__ = ("failures", "generation", "opened_at", "policy", "state", "trial")

    def __init__(self, policy: CircuitBreaker) -> None:
        self.policy = policy
        self.state: BreakerState = "closed"
        self.failures = 0
        self.opened_at = 0.0
        self.trial = False  # a half-open trial call is running
        self.generation = 1  # +1 each time it opens (admission tickets)


class Breakers:
    """One breaker per tool name, created when the tool is first called.

    Args:
        on_change: Called with each `BreakerChange` (must not block: the executor turns it
            into the `on_breaker_change` hook).
        clock: The monotonic clock (tests pass their own).
    """

    def __init__(
        self,
        on_change: Callable[[BreakerChange], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Start with every breaker closed."""
        self._breakers: dict[str, _Breaker] = {}
        self._on_change = on_change
        self._clock = clock

    def state(self, tool_name: str) -> BreakerState:
        """The breaker's state for `tool_name` (`"closed"` for a tool without one, or not
        called yet). An open breaker whose `reset_after` has passed reads `"half_open"`: the
        next call is its trial."""
        breaker = self._breakers.get(tool_name)
        if breaker is None:
            return "closed"
        if breaker.state == "open" and self._due(breaker):
            return "half_open"
        return breaker.state

    def admit(
        self,
        tool_name: str,
        policy: CircuitBreaker | None,
        changes: list[BreakerChange] | None = None,
    ) -> int:
        """Whether a call of `tool_name` may run now: 0 when not (it ends `"unavailable"`),
        else its ticket for `record` (the breaker's generation: it changes each time the
        breaker opens, so an outcome from before that is told apart). A state change it
        causes is also appended to `changes`."""
        if policy is None:
            return 1
        breaker = self._breaker(tool_name, policy)
        if breaker.state == "closed":
            return breaker.generation
        if breaker.state == "open":
            if not self._due(breaker):
                return 0
            self._move(tool_name, breaker, "half_open", changes)
        if breaker.trial:
            return 0  # half-open: one trial at a time
        breaker.trial = True
        return breaker.generation

    def record(
        self,
        tool_name: str,
        policy: CircuitBreaker | None,
        status: str,
        changes: list[BreakerChange] | None = None,
        *,
        ticket: int | None = None,
    ) -> None:
        """A call admitted by `admit` (which gave it `ticket`; None: the current one) ended
        with `status`. Only calls admitted since the breaker last opened count: in the
        half-open state that is the one trial. A state change it causes is also appended to
        `changes`."""
        if policy is None:
            return
        breaker = self._breaker(tool_name, policy)
        if ticket is not None and ticket != breaker.generation:
            return  # admitted before the breaker last opened: it tells nothing new
        failed = status in _FAILURES
        if breaker.state == "half_open":
            breaker.trial = False
            if status == "ok":
                breaker.failures = 0
                self._move(tool_name, breaker, "closed", changes)
            elif failed:
                self._open(tool_name, breaker, changes)
            return
        if breaker.state == "open":
            return  # cannot happen with a ticket; without one, the trial decides
        if status == "ok":
            breaker.failures = 0
        elif failed:
            breaker.failures += 1
            if breaker.failures >= breaker.policy.failures:
                self._open(tool_name, breaker, changes)

    def _open(self, tool_name: str, breaker: _Breaker, changes: list[BreakerChange] | None) -> None:
        if breaker.state == "half_open":
            breaker.failures += 1
        breaker.opened_at = self._clock()
        breaker.generation += 1
        self._move(tool_name, breaker, "open", changes)

    def _breaker(self, tool_name: str, policy: CircuitBreaker) -> _Breaker:
        breaker = self._breakers.get(tool_name)
        if breaker is None or breaker.policy != policy:
            # A tool re-registered with another policy starts over (closed).
            breaker = self._breakers[tool_name] = _Breaker(policy)
        return breaker

    def _due(self, breaker: _Breaker) -> bool:
        return self._clock() - breaker.opened_at >= breaker.policy.reset_after

    def _move(
        self,
        tool_name: str,
        breaker: _Breaker,
        new: BreakerState,
        changes: list[BreakerChange] | None,
    ) -> None:
        old, breaker.state = breaker.state, new
        if old == new:
            return
        change = BreakerChange(tool_name, old, new, breaker.failures, breaker.policy.reset_after)
        if changes is not None:
            changes.append(change)
        logger.info("tool %r: circuit breaker %s -> %s", tool_name, old, new)
        if self._on_change is not None:
            try:
                self._on_change(change)
            except Exception:
                logger.exception("on_breaker_change callback raised; ignored")
