"""`CircuitBreaker`: a tool's policy for a failing backend (issue 21). After `failures`
consecutive failed calls the tool is *open*: calls end at once, without running, with status
`"unavailable"`; after `reset_after` seconds one call is let through (*half-open*): its success
closes the breaker, its failure opens it again. The executor keeps one breaker per tool
(`llmrtc.execution.breakers`); this is the setting a tool declares."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["BreakerState", "CircuitBreaker"]

BreakerState = Literal["closed", "open", "half_open"]
"""`"closed"`: calls run; `"open"`: calls are refused (`"unavailable"`); `"half_open"`: one
trial call runs, the others are refused until it ends."""


@dataclass(frozen=True, slots=True)
class CircuitBreaker:
    """When to stop calling a failing tool for a while.

    Example:
        @tool(breaker=CircuitBreaker(failures=5, reset_after=30.0))
        async def lookupOrder(order_id: str) -> dict: ...

    Attributes:
        failures: Consecutive failed calls (status `error` or `timeout`; invalid arguments,
            aborts and refusals do not count) that open the breaker.
        reset_after: Seconds the breaker stays open before one trial call is let through.
    """

    failures: int = 5
    reset_after: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.failures, bool) or not isinstance(self.failures, int):
            raise TypeError(f"CircuitBreaker.failures must be an int, got {self.failures!r}")
        if self.failures < 1:
            raise ValueError(f"CircuitBreaker.failures must be >= 1, got {self.failures}")
        reset = self.reset_after
        if (
            isinstance(reset, bool)
            or not isinstance(reset, int | float)
            or not math.isfinite(reset)
            or reset <= 0
        ):
            raise ValueError(
                f"CircuitBreaker.reset_after must be a finite number of seconds > 0, got {reset!r}"
            )
