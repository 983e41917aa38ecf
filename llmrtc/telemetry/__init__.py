"""Observability: the `Hooks` protocol every layer calls, log correlation, and (in
`llmrtc.telemetry.otel`) OpenTelemetry spans and metrics implemented as `Hooks`."""

from llmrtc.telemetry.correlation import (
    CorrelationFilter,
    current_call_id,
    current_session_id,
    current_turn_id,
    install_log_correlation,
)
from llmrtc.telemetry.hooks import *  # noqa: F403 - the events and the protocol
from llmrtc.telemetry.hooks import __all__ as _hooks_all

__all__ = [
    "CorrelationFilter",
    "current_call_id",
    "current_session_id",
    "current_turn_id",
    "install_log_correlation",
    *_hooks_all,
]
