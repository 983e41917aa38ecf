"""`VoiceLoop` (stub: being written)."""

from __future__ import annotations

__all__ = ["VoiceLoop"]


class VoiceLoop:
    """Stub."""
