"""Correlation ids in contextvars, and a logging filter that copies them onto log records.

Every layer sets the ids it owns (the session server `session_id`, the turn loop `turn_id`,
the executor `call_id` while a handler runs), so any log record written meanwhile, by llmrtc or
by a tool's own code, can be tied to its trace. Floor 0: imports nothing of ours.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

__all__ = [
    "CorrelationFilter",
    "current_call_id",
    "current_session_id",
    "current_turn_id",
    "install_log_correlation",
]

current_session_id: ContextVar[str | None] = ContextVar("llmrtc_session_id", default=None)
"""The session whose work is running in this context."""
current_turn_id: ContextVar[str | None] = ContextVar("llmrtc_turn_id", default=None)
"""The conversational turn whose work is running in this context."""
current_call_id: ContextVar[str | None] = ContextVar("llmrtc_call_id", default=None)
"""The tool call whose handler is running in this context (also inside its worker thread)."""


_IDS = (
    ("session_id", current_session_id),
    ("turn_id", current_turn_id),
    ("call_id", current_call_id),
)


class CorrelationFilter(logging.Filter):
    """Sets `record.session_id`, `record.turn_id` and `record.call_id` (None when unknown).

    It never drops a record. Add one to your own handler to get the ids on every record that
    handler writes (llmrtc's and your application's), e.g. with a format like
    `%(session_id)s %(turn_id)s %(call_id)s %(message)s`; or call `install_log_correlation()`
    to have them set on the records of the `llmrtc.*` loggers before any handler sees them.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        # Ids the caller passed in `extra=` win; otherwise the context's (None when unknown).
        for name, var in _IDS:
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


class _CorrelatingHandler(logging.Handler):
    """Emits nothing: it exists so its filter runs for records propagating through `llmrtc`
    (filters on a *logger* only see records logged on that very logger, not its children)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.addFilter(CorrelationFilter())

    def emit(self, record: logging.LogRecord) -> None:
        # Being a handler, this one hides `logging.lastResort` (the stderr fallback an
        # unconfigured application relies on to see warnings): stand in for it when no other
        # handler will see the record.
        last_resort = logging.lastResort
        if last_resort is None or record.levelno < last_resort.level:
            return
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(not isinstance(h, _CorrelatingHandler) for h in logger.handlers):
                return
            if not logger.propagate:
                break
            logger = logger.parent
        last_resort.handle(record)


def install_log_correlation(logger_name: str = "llmrtc") -> None:
    """Make records of `logger_name` and its children carry the correlation ids. Idempotent.

    An application calls it when it wants the ids on llmrtc's records: importing llmrtc never
    touches logging (warnings then reach stderr through `logging.lastResort`, as any library's
    do). It adds a handler that writes nothing to `logger_name`, whose filter sets the ids;
    no global record factory is touched.
    """
    logger = logging.getLogger(logger_name)
    if not any(isinstance(h, _CorrelatingHandler) for h in logger.handlers):
        logger.addHandler(_CorrelatingHandler())
