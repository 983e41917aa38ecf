"""`Speech` and `open_default_speech` (stub: being written)."""

from __future__ import annotations

from dataclasses import dataclass

from llmrtc.voice.stt import STT
from llmrtc.voice.tts import TTS
from llmrtc.voice.vad import VAD

__all__ = ["Speech", "open_default_speech"]


@dataclass(frozen=True)
class Speech:
    """A VAD, an STT and a TTS that go together (loaded once, shared by sessions)."""

    vad: VAD
    stt: STT
    tts: TTS


def open_default_speech() -> None:
    """Stub."""
