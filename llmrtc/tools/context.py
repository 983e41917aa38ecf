"""`ToolContext`: what a running tool may know about the call it serves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from llmrtc.abort import AbortSignal

__all__ = ["ToolContext"]

_EMPTY_METADATA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Passed to every handler as its second argument (or injected into an `@tool` function
    parameter annotated `ToolContext`)."""

    call_id: str
    """The id of the call being served."""
    abort_signal: AbortSignal
    """Never None and private to this call: set when the batch is aborted or this call times out.
    Long-running and thread-bound handlers should check it to stop cooperatively."""
    session_id: str | None = None
    """The session the call belongs to, if the caller gave one."""
    turn_id: str | None = None
    """The conversational turn the call belongs to, if the caller gave one."""
    metadata: Mapping[str, Any] = field(default_factory=lambda: _EMPTY_METADATA)
    """Read-only mapping of caller-supplied values (e.g. a playbook control object)."""
