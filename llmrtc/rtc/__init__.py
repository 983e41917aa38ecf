"""`llmrtc.rtc`: WebRTC sessions over aiortc (floor 6, above `llmrtc.voice`).

- `peer`: the peer connection (`create_peer`, with the `loopback` ICE option), SDP offer and
  answer as JSON-able dicts, trickled remote candidates, `wait_connected`.
- `ice`: 127.0.0.1 as a host candidate (`loopback_candidates`, `is_loopback_host`) and ICE
  candidates to and from the browser's JSON.
- `tracks`: `InboundAudio` (remote track -> `AudioFrame`s) and `OutboundAudio` (an aiortc
  track fed by `VoiceLoop.audio_out()`).

aiortc and PyAV are optional (`pip install "llmrtc[rtc]"`): the names below load their module
on first access, so importing `llmrtc.rtc` (or a light submodule of it) does not import aiortc.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmrtc.rtc.ice import (
        candidate_from_dict,
        candidate_to_dict,
        is_loopback_host,
        loopback_candidates,
    )
    from llmrtc.rtc.peer import (
        PeerConnectionError,
        accept_answer,
        accept_offer,
        add_candidate,
        create_offer,
        create_peer,
        description_from_dict,
        description_to_dict,
        remote_audio_track,
        wait_connected,
    )
    from llmrtc.rtc.tracks import InboundAudio, OutboundAudio

__all__ = [
    "InboundAudio",
    "OutboundAudio",
    "PeerConnectionError",
    "accept_answer",
    "accept_offer",
    "add_candidate",
    "candidate_from_dict",
    "candidate_to_dict",
    "create_offer",
    "create_peer",
    "description_from_dict",
    "description_to_dict",
    "is_loopback_host",
    "loopback_candidates",
    "remote_audio_track",
    "wait_connected",
]

_LAZY = {
    "InboundAudio": "llmrtc.rtc.tracks",
    "OutboundAudio": "llmrtc.rtc.tracks",
    "PeerConnectionError": "llmrtc.rtc.peer",
    "accept_answer": "llmrtc.rtc.peer",
    "accept_offer": "llmrtc.rtc.peer",
    "add_candidate": "llmrtc.rtc.peer",
    "candidate_from_dict": "llmrtc.rtc.ice",
    "candidate_to_dict": "llmrtc.rtc.ice",
    "create_offer": "llmrtc.rtc.peer",
    "create_peer": "llmrtc.rtc.peer",
    "description_from_dict": "llmrtc.rtc.peer",
    "description_to_dict": "llmrtc.rtc.peer",
    "is_loopback_host": "llmrtc.rtc.ice",
    "loopback_candidates": "llmrtc.rtc.ice",
    "remote_audio_track": "llmrtc.rtc.peer",
    "wait_connected": "llmrtc.rtc.peer",
}


def __getattr__(name: str) -> Any:
    """Load an exported name's module on first access (it imports aiortc)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'llmrtc.rtc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
