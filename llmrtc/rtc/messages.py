"""The wire protocol's messages: one frozen pydantic model per `type`, both directions.

`llmrtc.rtc.protocol` parses and serializes them (and re-exports them all); `docs/protocol.md`
describes them for client authors. Every model forbids unknown fields and coerces nothing, so a
typo in a client is an `invalid_message` error naming the field, not a silently ignored option.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmrtc.agent.events import TurnStopReason
from llmrtc.tools.calls import ToolCallStatus

__all__ = [
    "MAX_SDP_CHARS",
    "MAX_TEXT_CHARS",
    "PROTOCOL_VERSION",
    "AgentSpeechEndedMessage",
    "AgentSpeechStartedMessage",
    "MAX_REASON_CHARS",
    "AnswerMessage",
    "ApprovalRequestedMessage",
    "ApproveMessage",
    "AssistantTextMessage",
    "BargeInMessage",
    "ClientMessage",
    "EndMessage",
    "ErrorCode",
    "ErrorMessage",
    "FinalToolCallStatus",
    "IceCandidate",
    "IceMessage",
    "InterruptionMessage",
    "InterruptMessage",
    "OfferMessage",
    "PingMessage",
    "PongMessage",
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
    "TranscriptLine",
    "TranscriptMessage",
    "TranscriptTool",
    "TurnCompletedMessage",
]

PROTOCOL_VERSION: Final = 1
"""The protocol this module speaks; sent in `session` and checked in `offer`/`resume`."""
MAX_TEXT_CHARS: Final = 4000
"""Longest `text` message, in characters (about a page; a turn is not a document upload)."""
MAX_SDP_CHARS: Final = 32 * 1024
"""Longest SDP in an `offer`."""
MAX_REASON_CHARS: Final = 200
"""Longest `reason` of an `approve`: a short sentence the agent may say."""
_MAX_ID_CHARS = 128
ErrorCode: TypeAlias = Literal[
    "message_too_large",
    "invalid_json",
    "invalid_message",
    "unknown_type",
    "unsupported_protocol",
    "unexpected_message",
    "not_ready",
    "bad_offer",
    "bad_candidate",
    "server_full",
    "shutting_down",
    "resume_refused",
    "session_replaced",
    "idle_timeout",
    "model_error",
    "speech_error",
    "turn_error",
    "too_many_turns",
    "unknown_approval",
    "internal",
]
"""Every `error.code` the server sends. Stable: clients may switch on them."""


class _Message(BaseModel):
    # strict: `"final": "yes"` or `"sdpMLineIndex": "0"` are errors, not coerced guesses.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# Client -> server ---------------------------------------------------------------------------


class IceCandidate(BaseModel):
    """A trickled ICE candidate, as the browser's `RTCIceCandidate.toJSON()` writes it.

    Unknown fields are ignored here (not an error) because browsers add fields over time.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    candidate: str = Field(max_length=1024)
    """The `candidate:...` SDP attribute line; `""` marks the end of candidates."""
    sdpMid: str | None = Field(default=None, max_length=64)
    """The media stream id the candidate belongs to."""
    sdpMLineIndex: int | None = Field(default=None, ge=0, le=64)
    """The index of the m-line the candidate belongs to."""
    usernameFragment: str | None = Field(default=None, max_length=256)
    """The ICE ufrag the candidate belongs to."""


class OfferMessage(_Message):
    """Client: start the media session with this SDP offer (after `resume`, if resuming)."""

    type: Literal["offer"] = "offer"
    sdp: str = Field(min_length=1, max_length=MAX_SDP_CHARS)
    """The offer's SDP (`RTCSessionDescription.sdp`)."""
    protocol: int | None = None
    """The protocol version the client speaks; absent means `PROTOCOL_VERSION`."""


class IceMessage(_Message):
    """Either side: a trickled ICE candidate, or `null` for the end of candidates."""

    type: Literal["ice"] = "ice"
    candidate: IceCandidate | None
    """The candidate; `null` (or an empty `candidate` string) ends the candidates."""

    @property
    def end_of_candidates(self) -> bool:
        """True when this message only says no more candidates will come."""
        return self.candidate is None or not self.candidate.candidate


class TextMessage(_Message):
    """Client: a typed user turn, handled like a final transcript. Sent while the agent speaks
    or a turn runs, it interrupts that turn as spoken words would."""

    type: Literal["text"] = "text"
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    """What the user typed: not blank, at most `MAX_TEXT_CHARS` characters."""

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if text.isspace():
            raise ValueError("must not be blank")
        return text


class InterruptMessage(_Message):
    """Client: stop the agent's reply now, as a barge-in would."""

    type: Literal["interrupt"] = "interrupt"


class EndMessage(_Message):
    """Client: hang up. The session ends for good (it cannot be resumed)."""

    type: Literal["end"] = "end"


class ResumeMessage(_Message):
    """Client: the first message on a new connection to take back an earlier session."""

    type: Literal["resume"] = "resume"
    session_id: str = Field(min_length=1, max_length=_MAX_ID_CHARS, pattern=r"^[A-Za-z0-9_-]+$")
    """The `session_id` of the earlier `session` message."""
    token: str = Field(min_length=1, max_length=_MAX_ID_CHARS, pattern=r"^[A-Za-z0-9_-]+$")
    """The latest `resume_token` the server sent for that session (each is single-use)."""
    protocol: int | None = None
    """The protocol version the client speaks; absent means `PROTOCOL_VERSION`."""


class PingMessage(_Message):
    """Client: answered with a `pong` carrying the same `id` (on the channel the ping came on)."""

    type: Literal["ping"] = "ping"
    id: str = Field(max_length=64)
    """Echoed in the `pong`, to match replies (e.g. to measure the round trip)."""


class ApproveMessage(_Message):
    """Client: the user's answer to an `approval_requested` (only with the server's
    `approvals="client"`; each request is answered once)."""

    type: Literal["approve"] = "approve"
    call_id: str = Field(min_length=1, max_length=_MAX_ID_CHARS)
    """The `call_id` of the `approval_requested` this answers."""
    approved: bool
    """True: the call may run; false: it is denied (the model is told, with `reason`)."""
    reason: str | None = Field(default=None, max_length=MAX_REASON_CHARS)
    """Why not (or a note), told to the model; at most `MAX_REASON_CHARS` characters."""


ClientMessage: TypeAlias = Annotated[
    OfferMessage
    | IceMessage
    | TextMessage
    | InterruptMessage
    | EndMessage
    | ResumeMessage
    | PingMessage
    | ApproveMessage,
    Field(discriminator="type"),
]
"""Any message a client may send."""


# Server -> client ---------------------------------------------------------------------------


class TranscriptLine(_Message):
    """A user or agent line of the conversation the agent remembers, as a page shows it."""

    role: Literal["user", "assistant"]
    """Who said it: the user (spoken or typed) or the agent."""
    text: str
    """What was said. For the agent, everything it produced in that turn (a lead-in before a
    tool call and the answer after it are one line, as on the page live); cut short if
    `interrupted`."""
    interrupted: bool = False
    """True when the agent's answer was cut short (barge-in, hang-up, a lost connection)."""


class TranscriptTool(_Message):
    """A tool call the agent made during a turn (after that turn's user line), as the page's
    tool timeline shows it."""

    role: Literal["tool"] = "tool"
    name: str
    """The tool's name as the model wrote it."""
    status: ToolCallStatus
    """How the call ended: `ok`, `error`, `invalid_arguments`, `not_found`, `timeout`,
    `aborted`, `duplicate`, `unavailable` or `denied` (the agent keeps results, not
    durations: a restored call has no duration)."""


TranscriptEntry: TypeAlias = Annotated[TranscriptLine | TranscriptTool, Field(discriminator="role")]
"""One entry of `SessionMessage.history`: a `TranscriptLine` or a `TranscriptTool`."""


class SessionMessage(_Message):
    """Server: the session is admitted (sent just before `answer`)."""

    type: Literal["session"] = "session"
    session_id: str
    """Identifies the session; the same after a resume."""
    resume_token: str
    """Secret to resume with; a new one after every resume (the old one stops working)."""
    protocol: int = PROTOCOL_VERSION
    """The protocol version the server speaks."""
    resumed: bool = False
    """True when an earlier session's history and playbook state were restored."""
    stage: str | None = None
    """The playbook's current stage id (after a resume, the stage it was in); None when the
    agent runs no playbook."""
    history: list[TranscriptEntry] = Field(default_factory=list)
    """The conversation the agent remembers, oldest first: empty for a new session, the
    restored one after a resume. Per turn: the user's line, the agent's one line for the turn
    and the turn's tool calls in order. A page shows exactly this (and nothing older)."""


class AnswerMessage(_Message):
    """Server: the SDP answer to the client's offer."""

    type: Literal["answer"] = "answer"
    sdp: str


class SpeechStartedMessage(_Message):
    """Server: the user started speaking (VAD)."""

    type: Literal["speech_started"] = "speech_started"


class SpeechEndedMessage(_Message):
    """Server: the user's utterance ended; a transcript follows."""

    type: Literal["speech_ended"] = "speech_ended"


class TranscriptMessage(_Message):
    """Server: what the speech recognizer heard; a final one starts a turn."""

    type: Literal["transcript"] = "transcript"
    text: str
    final: bool = True


class AssistantTextMessage(_Message):
    """Server: a piece of the assistant's answer, in order."""

    type: Literal["assistant_text"] = "assistant_text"
    delta: str


class ToolCallStartedMessage(_Message):
    """Server: the model called a tool; exactly one `tool_call_finished` follows."""

    type: Literal["tool_call_started"] = "tool_call_started"
    call_id: str
    name: str
    """The tool's name as the model wrote it."""
    background: bool = False
    """True for a call of a background tool: its turn does not wait for it, and its
    `tool_call_finished` comes when it really ends, perhaps after the turn's `turn_completed`
    (the model was told at once that it is still running; no message says so)."""


class ToolCallProgressMessage(_Message):
    """Server: a running call reported how it is getting on (`ToolContext.progress`); between
    its `tool_call_started` and its `tool_call_finished`, at most a few per second."""

    type: Literal["tool_call_progress"] = "tool_call_progress"
    call_id: str
    name: str
    """The tool's name as the model wrote it."""
    message: str
    """One line for people, written by the tool (e.g. "Checking availability")."""


FinalToolCallStatus: TypeAlias = Literal[
    "ok",
    "error",
    "invalid_arguments",
    "not_found",
    "timeout",
    "aborted",
    "duplicate",
    "unavailable",
    "denied",
]
"""How a call ended, as `tool_call_finished` says it: every `ToolCallStatus` but `running` (a
background call's provisional answer, which is not its end)."""


class ToolCallFinishedMessage(_Message):
    """Server: one call got its final result (sent when that call ends, not its whole batch;
    for a background call, when its final result arrives)."""

    type: Literal["tool_call_finished"] = "tool_call_finished"
    call_id: str
    name: str
    status: FinalToolCallStatus
    """`ok`, `error`, `invalid_arguments`, `not_found`, `timeout`, `aborted`, `duplicate`
    (the same call was made already: its tool did not run again), `unavailable` (the tool's
    circuit breaker is open after repeated failures) or `denied` (its approval was refused or
    did not come)."""
    duration_ms: float = Field(ge=0)
    """How long the tool ran (0 for a call that never ran)."""
    reused_from: str | None = None
    """The earlier call whose result answered this one (the tool's `on_duplicate="reuse"`:
    it did not run again); null otherwise."""


class ApprovalRequestedMessage(_Message):
    """Server: a call needs the user's yes before its tool runs (only with the server's
    `approvals="client"`); answer with `approve`. Its `tool_call_finished` follows the answer
    (`denied` for a no; no answer in time or the session ending also deny it), and its
    `tool_call_started` may come before or after this message."""

    type: Literal["approval_requested"] = "approval_requested"
    call_id: str
    name: str
    """The tool's name."""
    arguments: dict[str, Any]
    """The parsed arguments (defaults filled), the tool's `sensitive_fields` masked as
    `"***"`."""


class StageChangedMessage(_Message):
    """Server: the playbook moved to another stage."""

    type: Literal["stage_changed"] = "stage_changed"
    from_stage: str
    to_stage: str


class AgentSpeechStartedMessage(_Message):
    """Server: the agent's reply started playing on the audio track."""

    type: Literal["agent_speech_started"] = "agent_speech_started"
    text: str
    """The first piece of text being spoken."""


class AgentSpeechEndedMessage(_Message):
    """Server: the agent's reply stopped playing (finished or cut by a barge-in)."""

    type: Literal["agent_speech_ended"] = "agent_speech_ended"
    interrupted: bool
    heard_text: str
    """What was played before it stopped, to the word."""


class BargeInMessage(_Message):
    """Server: the reply was cut by the user (protocol 1's first word for it, still sent right
    after each `interruption` of kind `barge_in`; a client that knows `interruption` may ignore
    it)."""

    type: Literal["barge_in"] = "barge_in"
    heard_text: str = ""
    """What the user had heard of the reply."""


class InterruptionMessage(_Message):
    """Server: the user spoke or typed over the agent (or sent `interrupt`), and what came of
    it: `kind` `barge_in` (the reply was cut; its `agent_speech_ended` follows), `false` (no
    words, e.g. a cough: the paused reply resumed) or `backchannel` ("uh-huh": the reply went
    on and no turn was made of it)."""

    type: Literal["interruption"] = "interruption"
    kind: Literal["barge_in", "false", "backchannel"] = "barge_in"
    heard_text: str = ""
    """What the user had heard of the reply when it was cut or paused."""


class TurnCompletedMessage(_Message):
    """Server: the last event of every turn."""

    type: Literal["turn_completed"] = "turn_completed"
    text: str
    """All assistant text of the turn."""
    stop_reason: TurnStopReason
    """`stop`, `length`, `max_tool_rounds`, `aborted` or `error`."""


class ErrorMessage(_Message):
    """Server: something failed; `code` is stable, `message` is for people."""

    type: Literal["error"] = "error"
    code: ErrorCode
    message: str


class PongMessage(_Message):
    """Server: the answer to a `ping`."""

    type: Literal["pong"] = "pong"
    id: str


ServerMessage: TypeAlias = Annotated[
    SessionMessage
    | AnswerMessage
    | IceMessage
    | SpeechStartedMessage
    | SpeechEndedMessage
    | TranscriptMessage
    | AssistantTextMessage
    | ToolCallStartedMessage
    | ToolCallProgressMessage
    | ToolCallFinishedMessage
    | ApprovalRequestedMessage
    | StageChangedMessage
    | AgentSpeechStartedMessage
    | AgentSpeechEndedMessage
    | InterruptionMessage
    | BargeInMessage
    | TurnCompletedMessage
    | ErrorMessage
    | PongMessage,
    Field(discriminator="type"),
]
"""Any message the server sends."""
