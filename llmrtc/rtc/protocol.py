"""The wire protocol between a client and `RTCServer`: JSON objects with a `type`.

Client messages arrive on the WebSocket (`/ws`); server messages go out on the WebSocket until
the data channel opens, then on the data channel. `docs/protocol.md` is the write-up for client
authors; this module is its executable form:

    message = parse_client_message(raw)     # or ProtocolError(code, message)
    await websocket.send(to_wire(AnswerMessage(sdp=sdp)))

Every model is frozen and forbids unknown fields, so a typo in a client is an `invalid_message`
error naming the field, not a silently ignored option.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Final, cast, get_args

from pydantic import BaseModel, ValidationError

from llmrtc.errors import LLMRTCError
from llmrtc.rtc.messages import (
    MAX_REASON_CHARS,
    MAX_SDP_CHARS,
    MAX_TEXT_CHARS,
    PROTOCOL_VERSION,
    AgentSpeechEndedMessage,
    AgentSpeechStartedMessage,
    AnswerMessage,
    ApprovalRequestedMessage,
    ApproveMessage,
    AssistantTextMessage,
    BargeInMessage,
    ClientMessage,
    EndMessage,
    ErrorCode,
    ErrorMessage,
    FinalToolCallStatus,
    IceCandidate,
    IceMessage,
    InterruptionMessage,
    InterruptMessage,
    OfferMessage,
    PingMessage,
    PongMessage,
    ResumeMessage,
    ServerMessage,
    SessionMessage,
    SpeechEndedMessage,
    SpeechStartedMessage,
    StageChangedMessage,
    TextMessage,
    ToolCallFinishedMessage,
    ToolCallProgressMessage,
    ToolCallStartedMessage,
    TranscriptEntry,
    TranscriptMessage,
    TurnCompletedMessage,
)

__all__ = [
    "CLOSE_CODES",
    "ERROR_CODES",
    "MAX_FRAME_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_REASON_CHARS",
    "MAX_SDP_CHARS",
    "MAX_TEXT_CHARS",
    "PROTOCOL_VERSION",
    "AgentSpeechEndedMessage",
    "AgentSpeechStartedMessage",
    "AnswerMessage",
    "ApprovalRequestedMessage",
    "ApproveMessage",
    "AssistantTextMessage",
    "ClientMessage",
    "EndMessage",
    "ErrorCode",
    "ErrorMessage",
    "FinalToolCallStatus",
    "IceCandidate",
    "IceMessage",
    "InterruptMessage",
    "BargeInMessage",
    "InterruptionMessage",
    "OfferMessage",
    "PingMessage",
    "PongMessage",
    "ProtocolError",
    "ResumeMessage",
    "ServerMessage",
    "SessionMessage",
    "SpeechEndedMessage",
    "SpeechStartedMessage",
    "StageChangedMessage",
    "TextMessage",
    "ToolCallFinishedMessage",
    "ToolCallProgressMessage",
    "ToolCallStartedMessage",
    "TranscriptEntry",
    "TranscriptMessage",
    "TurnCompletedMessage",
    "error_message",
    "parse_client_message",
    "parse_server_message",
    "to_wire",
]

MAX_MESSAGE_BYTES: Final = 64 * 1024
"""Largest client message accepted, in bytes of UTF-8 (an SDP offer is 2-8 KiB)."""

ERROR_CODES: Final[dict[ErrorCode, str]] = {
    "message_too_large": f"A message was over {MAX_MESSAGE_BYTES} bytes; it was ignored.",
    "invalid_json": "A message was not a UTF-8 JSON document; it was ignored.",
    "invalid_message": "A message had a missing, extra or wrong-typed field; it was ignored.",
    "unknown_type": "A message had a `type` this protocol does not have; it was ignored.",
    "unsupported_protocol": "The client asked for a protocol version this server does not speak.",
    "unexpected_message": "A valid message came at the wrong time (a second offer, a late "
    "resume); it was ignored.",
    "not_ready": "A message needs a session but no offer was made yet; it was ignored.",
    "bad_offer": "The offer's SDP could not be used (no audio, unparsable).",
    "bad_candidate": "An ICE candidate could not be parsed or added; it was ignored.",
    "server_full": "The server is at its session limit; try again later.",
    "shutting_down": "The server is shutting down and admits no new sessions.",
    "resume_refused": "The session to resume does not exist, has expired, or the token is wrong.",
    "idle_timeout": "The session was idle for too long and was closed.",
    "session_replaced": "The session was resumed on another connection; this one was closed.",
    "model_error": "The language model failed during a turn; the agent apologised.",
    "speech_error": "Speech recognition or synthesis failed during a turn.",
    "turn_error": "The agent failed during a turn (not the model); it apologised.",
    "too_many_turns": "Too many typed turns were waiting for the agent; this `text` was not "
    "taken (send it after the agent answers).",
    "unknown_approval": "An `approve` named no call waiting for this session's approval "
    "(unknown, or answered already); it was ignored.",
    "internal": "The server failed unexpectedly; the session was closed.",
}
"""What each code means, as sent when the server has nothing more specific to say."""

CLOSE_CODES: Final[dict[ErrorCode, int]] = {
    "unsupported_protocol": 1002,
    "bad_offer": 1008,
    "resume_refused": 1008,
    "server_full": 1013,
    "shutting_down": 1001,
    "idle_timeout": 1000,
    "session_replaced": 1000,
    "internal": 1011,
}
"""The errors after which the server closes the WebSocket (and the session), with the
WebSocket close code it uses. Every other error leaves the session running: the offending
message is ignored."""
MAX_FRAME_BYTES: Final = 1024 * 1024
"""Largest WebSocket message the server reads at all (websockets' `max_size`): messages
between `MAX_MESSAGE_BYTES` and this get `message_too_large`; larger ones close the connection
with code 1009 before they are read."""


class ProtocolError(LLMRTCError):
    """A client message (or a client's action) the server refuses, with a stable `code`.

    Attributes:
        code: One of `ErrorCode`.
        message: What was wrong, where, and what is allowed; never echoes large input.
    """

    def __init__(self, code: ErrorCode, message: str) -> None:
        """Create the error; `str(error)` is `"<code>: <message>"`."""
        super().__init__(f"{code}: {message}")
        self.code: ErrorCode = code
        self.message = message

    def to_message(self) -> ErrorMessage:
        """The `error` event to send the client."""
        return ErrorMessage(code=self.code, message=self.message)


def _models_by_type(union: Any) -> dict[str, type[BaseModel]]:
    models: tuple[type[BaseModel], ...] = get_args(get_args(union)[0])
    return {model.model_fields["type"].default: model for model in models}


_CLIENT_MODELS = _models_by_type(ClientMessage)
_SERVER_MODELS = _models_by_type(ServerMessage)


def error_message(code: ErrorCode, message: str | None = None) -> ErrorMessage:
    """An `error` event; without `message`, the code's meaning from `ERROR_CODES`."""
    return ErrorMessage(code=code, message=message or ERROR_CODES[code])


def to_wire(message: BaseModel) -> str:
    """A message as compact JSON text, ready to send."""
    return message.model_dump_json()


def parse_client_message(raw: str | bytes) -> ClientMessage:
    """Parse and validate one client message.

    Args:
        raw: A WebSocket or data-channel message (text, or UTF-8 bytes).

    Returns:
        The message model (`OfferMessage`, `TextMessage`, ...).

    Raises:
        ProtocolError: `message_too_large`, `invalid_json`, `invalid_message` (field errors
            named by their path), `unknown_type`, or `unsupported_protocol`.
    """
    message = _parse(raw, _CLIENT_MODELS, "client")
    protocol = getattr(message, "protocol", None)
    if protocol is not None and protocol != PROTOCOL_VERSION:
        raise ProtocolError(
            "unsupported_protocol",
            f"{message.type!r} asks for protocol {protocol}; this server speaks protocol "
            f"{PROTOCOL_VERSION} (omit `protocol` or send {PROTOCOL_VERSION})",
        )
    return cast("ClientMessage", message)


def parse_server_message(raw: str | bytes) -> ServerMessage:
    """Parse and validate one server message (for clients written in Python, e.g. tests).

    Raises:
        ProtocolError: as `parse_client_message` does.
    """
    # The size limit guards the server; a client reading its own server's events needs the
    # same checks but not the limit (a long answer's `turn_completed` may be large).
    return cast("ServerMessage", _parse(raw, _SERVER_MODELS, "server", limit=None))


def _parse(
    raw: str | bytes,
    models: dict[str, type[BaseModel]],
    side: str,
    *,
    limit: int | None = MAX_MESSAGE_BYTES,
) -> Any:  # one of `models`' models: a member of the caller's union
    if not isinstance(raw, str | bytes):
        raise TypeError(f"expected str or bytes, got {type(raw).__name__}")
    if limit is not None:
        # A str has at least as many UTF-8 bytes as characters: a long one is refused before
        # paying for its encoding.
        size = len(raw) if isinstance(raw, bytes) or len(raw) > limit else len(raw.encode())
        if size > limit:
            raise ProtocolError(
                "message_too_large",
                f"message is {size} bytes; the limit is {limit} bytes ({limit // 1024} KiB)",
            )
    if isinstance(raw, bytes):
        # The protocol is UTF-8: json.loads would sniff UTF-16/32 from a BOM or zero bytes
        # and accept them, and report a bad byte's offset in the encoding it guessed.
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(
                "invalid_json", f"message is not UTF-8 (bad byte at offset {exc.start})"
            ) from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ProtocolError(
            "invalid_json",
            f"message is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from None
    except RecursionError:
        raise ProtocolError("invalid_json", "message nests too deeply to parse") from None
    except ValueError as exc:
        # Not a JSONDecodeError: a limit of the parser, e.g. an integer longer than
        # `sys.get_int_max_str_digits()` (CVE-2020-10735's guard), which Python refuses to
        # convert. No number of this protocol is anywhere near that long.
        if "integer string conversion" in str(exc):
            reason = (
                f"an integer has more than {sys.get_int_max_str_digits()} digits "
                "(no number in this protocol needs more than a few)"
            )
        else:
            reason = str(exc)[:100]
        raise ProtocolError("invalid_json", f"message cannot be parsed: {reason}") from None
    allowed = ", ".join(models)
    if not isinstance(data, dict):
        raise ProtocolError(
            "invalid_message",
            f"a message must be a JSON object with a `type`, got {_json_kind(data)}; "
            f"allowed types: {allowed}",
        )
    kind = data.get("type")
    if not isinstance(kind, str):
        got = "no `type` field" if "type" not in data else f"`type` is {_json_kind(kind)}"
        raise ProtocolError("invalid_message", f"{got}; `type` must be a string, one of: {allowed}")
    model = models.get(kind)
    if model is None:
        raise ProtocolError(
            "unknown_type",
            f"unknown {side} message type {_clip(kind)!r}; allowed types: {allowed}",
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError("invalid_message", _describe(kind, exc)) from None


def _describe(kind: str, exc: ValidationError) -> str:
    """`invalid 'text' message: text: String should have at most 4000 characters`, etc."""
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    parts = []
    for error in errors[:5]:
        path = ".".join(str(part) for part in error["loc"]) or "(message)"
        reason = error["msg"]
        if error["type"] == "extra_forbidden":
            reason = "unknown field (not allowed)"
        elif error["type"] == "missing":
            reason = "missing (required)"
        elif error["type"] == "value_error":
            reason = reason.removeprefix("Value error, ")
        parts.append(f"{path}: {reason}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return f"invalid {kind!r} message: " + "; ".join(parts) + more


def _json_kind(value: object) -> str:
    match value:
        case None:
            return "null"
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "an array"
        case _:
            return "an object"


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
