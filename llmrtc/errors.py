"""`LLMRTCError`: the root of every exception llmrtc raises.

Floor 0: it imports nothing of llmrtc, so every floor may put its own errors under it.
"""

from __future__ import annotations

import logging

__all__ = ["LLMRTCError"]

logger = logging.getLogger(__name__)


class LLMRTCError(Exception):
    """The root of every exception llmrtc raises, so `except LLMRTCError` catches them all.

    Each specific error (`ToolError`, `LLMError`, `PlaybookError`, `RTCError`, ...) stands
    below it; one that is also a built-in kind keeps that base too (`PlaybookError` is still a
    `ValueError`, `MCPConnectionError` a `ConnectionError`), so existing `except ValueError`
    blocks keep catching it. Warnings (`ToolDefinitionWarning`) are not under it: they are
    issued, not raised.
    """
