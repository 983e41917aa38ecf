"""`RetryPolicy`: when a failed attempt is tried again — a model request (`OpenAIProvider`) or
a tool call (`ToolDefinition.retry`). Backoff doubles from `base_delay` with +/-20 % jitter,
capped at `max_delay`."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from llmrtc.tools.errors import ToolError

__all__ = ["RetryPolicy"]

logger = logging.getLogger(__name__)


def _seconds(value: object) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value >= 0
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When a failed attempt is tried again, and how long to wait first.

    For model requests (`OpenAIProvider(retry=...)`): retries happen only before anything
    streamed, and an abort interrupts the backoff. For tool calls (`@tool(retry=...)`): every
    attempt runs inside the call's own `timeout` (a backoff that would end past it is not
    slept: the call ends with its last outcome), an abort stops the loop at once, and each
    retry fires `on_tool_retry`; the result's `attempts` counts the handler runs.

    Example:
        OpenAIProvider("gpt-4o-mini", retry=RetryPolicy(max_retries=4, max_delay=20.0))

        @tool(retry=RetryPolicy(max_retries=2, base_delay=0.2, attempt_timeout=3.0))
        async def lookupOrder(order_id: str) -> dict: ...
    """

    max_retries: int = 2
    """Retries after the first attempt (0: never retry)."""
    base_delay: float = 0.5
    """First backoff delay in seconds; it doubles per retry, with +/-20 % jitter."""
    max_delay: float = 8.0
    """Cap for one delay, also for a server's `Retry-After`."""
    retry_status_errors: bool = True
    """Model requests only: retry HTTP 429 and 5xx. False for a server whose errors are
    deterministic (a local llama.cpp at temperature 0): connection failures are still
    retried."""
    retry_on: tuple[type[BaseException], ...] | Callable[[BaseException], bool] | None = None
    """Tool calls only: which exceptions a handler raised are retried — exception classes, or
    a predicate. None (default): any `Exception` except `ToolError` (a tool's own refusal,
    meant for the model, would only be said again)."""
    attempt_timeout: float | None = None
    """Tool calls only: seconds one attempt may run; an attempt past it is abandoned (its
    signal aborts) and retried. None: attempts are bounded only by the call's `timeout`, and
    a timed-out call is not retried."""
    retry_side_effects: bool = False
    """Tool calls only: allow retrying a tool that declares `side_effects` and keeps
    `on_duplicate="allow"` — a retry may then do the thing twice (a second charge). Without it
    such a tool is not retried (a warning says so when it is defined)."""

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int):
            raise ValueError(f"max_retries must be an int >= 0, got {self.max_retries!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        if not _seconds(self.base_delay) or not _seconds(self.max_delay):
            raise ValueError(
                f"base_delay and max_delay must be >= 0, got {self.base_delay}, {self.max_delay}"
            )
        retry_on = self.retry_on
        if isinstance(retry_on, type):  # one exception class (a class is also callable)
            retry_on = (retry_on,)
        if (
            retry_on is not None
            and not callable(retry_on)
            and (
                not isinstance(retry_on, tuple)
                or not all(
                    isinstance(kind, type) and issubclass(kind, BaseException) for kind in retry_on
                )
            )
        ):
            raise ValueError(
                "retry_on must be exception classes (a tuple) or a predicate "
                f"(exception) -> bool, got {self.retry_on!r}"
            )
        if retry_on is not self.retry_on:
            object.__setattr__(self, "retry_on", retry_on)
        timeout = self.attempt_timeout
        if timeout is not None and (not _seconds(timeout) or timeout == 0):
            raise ValueError(f"attempt_timeout must be seconds > 0 or None, got {timeout!r}")
        if not isinstance(self.retry_side_effects, bool):
            raise ValueError(
                f"retry_side_effects must be True or False, got {self.retry_side_effects!r}"
            )

    @property
    def for_tools_only(self) -> bool:
        """Whether a field that only applies to tool calls is set (a model request refuses it)."""
        return (
            self.retry_on is not None or self.attempt_timeout is not None or self.retry_side_effects
        )

    def delay(self, retry: int) -> float:
        """Seconds to wait before retry number `retry` (0-based): `base_delay * 2**retry`,
        +/-20 % jitter, at most `max_delay`."""
        delay = self.base_delay * (2**retry)
        return float(min(delay * random.uniform(0.8, 1.2), self.max_delay))

    def retries(self, error: BaseException) -> bool:
        """Whether a tool handler's `error` is worth another attempt (see `retry_on`)."""
        retry_on = self.retry_on
        if retry_on is None:
            return isinstance(error, Exception) and not isinstance(error, ToolError)
        if isinstance(retry_on, tuple):
            return isinstance(error, retry_on)
        try:
            return bool(retry_on(error))
        except Exception:
            logger.exception("RetryPolicy.retry_on raised; the failure is not retried")
            return False
