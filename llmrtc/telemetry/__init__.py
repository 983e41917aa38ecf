"""Observability: the events every layer reports, the `Hooks` protocol that receives them, log
correlation, and (in `llmrtc.telemetry.otel`) OpenTelemetry spans and metrics as a `Hooks`.

To observe the library, subclass `Hooks` and override the `on_*` methods you need; every event
type a method receives is importable from here (and from `llmrtc`).
"""

from llmrtc.telemetry.correlation import (
    CorrelationFilter,
    current_call_id,
    current_session_id,
    current_turn_id,
    install_log_correlation,
)
from llmrtc.telemetry.events import *  # noqa: F403 - every event type
from llmrtc.telemetry.events import __all__ as _events_all
from llmrtc.telemetry.hooks import (
    HOOK_NAMES,
    CompositeHooks,
    Hooks,
    combined_tool_call_context,
    emit,
    error_type_name,
    listeners,
    tool_call_context_hooks,
)

__all__ = [
    "HOOK_NAMES",
    "CompositeHooks",
    "CorrelationFilter",
    "Hooks",
    "combined_tool_call_context",
    "current_call_id",
    "current_session_id",
    "current_turn_id",
    "emit",
    "error_type_name",
    "listeners",
    "tool_call_context_hooks",
    "install_log_correlation",
    *_events_all,
]
