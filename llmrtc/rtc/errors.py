"""`RTCError`: a session the server refused or ended, with the protocol's stable code."""

from __future__ import annotations

from llmrtc.errors import LLMRTCError

__all__ = ["RTCError"]


class RTCError(LLMRTCError):
    """A WebRTC session could not be opened or was ended by the server.

    Attributes:
        code: The protocol's stable error code (`server_full`, `resume_refused`, `bad_offer`,
            ...; see `llmrtc.rtc.protocol.ERROR_CODES`), or `connection_failed` when the server
            could not be reached or the media connection never came up.
        message: What happened, in words a person can act on.
    """

    def __init__(self, code: str, message: str) -> None:
        """Create the error; `str(error)` is `"<code>: <message>"`."""
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
