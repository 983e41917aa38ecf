"""`llmrtc.rtc`: WebRTC sessions over aiortc (floor 6, above `llmrtc.voice`).

- `server`: `RTCServer` (the web client, signalling, admission, resume, shutdown) and its
  `ServerConfig`; `session`: one admitted user; `errors`: `RTCError`.
- `protocol`: the wire protocol (`parse_client_message`, `to_wire`, `ProtocolError`, the error
  and close codes); `store`: where vanished sessions wait to be resumed (`SessionStore`).
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
    from llmrtc.rtc.config import ServerConfig
    from llmrtc.rtc.errors import RTCError
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
    from llmrtc.rtc.protocol import (
        CLOSE_CODES,
        ERROR_CODES,
        PROTOCOL_VERSION,
        ProtocolError,
        error_message,
        parse_client_message,
        parse_server_message,
        to_wire,
    )
    from llmrtc.rtc.server import RTCServer
    from llmrtc.rtc.store import (
        InMemorySessionStore,
        SessionState,
        SessionStore,
        SQLiteSessionStore,
        hash_token,
        new_session_credentials,
    )
    from llmrtc.rtc.tracks import InboundAudio, OutboundAudio

__all__ = [
    "CLOSE_CODES",
    "ERROR_CODES",
    "InMemorySessionStore",
    "InboundAudio",
    "OutboundAudio",
    "PROTOCOL_VERSION",
    "PeerConnectionError",
    "ProtocolError",
    "RTCError",
    "RTCServer",
    "SQLiteSessionStore",
    "ServerConfig",
    "SessionState",
    "SessionStore",
    "accept_answer",
    "accept_offer",
    "add_candidate",
    "candidate_from_dict",
    "candidate_to_dict",
    "create_offer",
    "create_peer",
    "description_from_dict",
    "description_to_dict",
    "error_message",
    "hash_token",
    "is_loopback_host",
    "loopback_candidates",
    "new_session_credentials",
    "parse_client_message",
    "parse_server_message",
    "remote_audio_track",
    "to_wire",
    "wait_connected",
]

_LAZY = {
    "CLOSE_CODES": "llmrtc.rtc.protocol",
    "ERROR_CODES": "llmrtc.rtc.protocol",
    "InMemorySessionStore": "llmrtc.rtc.store",
    "InboundAudio": "llmrtc.rtc.tracks",
    "OutboundAudio": "llmrtc.rtc.tracks",
    "PROTOCOL_VERSION": "llmrtc.rtc.protocol",
    "PeerConnectionError": "llmrtc.rtc.peer",
    "ProtocolError": "llmrtc.rtc.protocol",
    "RTCError": "llmrtc.rtc.errors",
    "RTCServer": "llmrtc.rtc.server",
    "SQLiteSessionStore": "llmrtc.rtc.store",
    "ServerConfig": "llmrtc.rtc.config",
    "SessionState": "llmrtc.rtc.store",
    "SessionStore": "llmrtc.rtc.store",
    "accept_answer": "llmrtc.rtc.peer",
    "accept_offer": "llmrtc.rtc.peer",
    "add_candidate": "llmrtc.rtc.peer",
    "candidate_from_dict": "llmrtc.rtc.ice",
    "candidate_to_dict": "llmrtc.rtc.ice",
    "create_offer": "llmrtc.rtc.peer",
    "create_peer": "llmrtc.rtc.peer",
    "description_from_dict": "llmrtc.rtc.peer",
    "description_to_dict": "llmrtc.rtc.peer",
    "error_message": "llmrtc.rtc.protocol",
    "hash_token": "llmrtc.rtc.store",
    "is_loopback_host": "llmrtc.rtc.ice",
    "loopback_candidates": "llmrtc.rtc.ice",
    "new_session_credentials": "llmrtc.rtc.store",
    "parse_client_message": "llmrtc.rtc.protocol",
    "parse_server_message": "llmrtc.rtc.protocol",
    "remote_audio_track": "llmrtc.rtc.peer",
    "to_wire": "llmrtc.rtc.protocol",
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
