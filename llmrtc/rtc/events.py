"""`wire_event`: what a session sends the client for each event its voice loop yields."""

from __future__ import annotations

from llmrtc.agent.events import (
    StageChanged,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
)
from llmrtc.rtc.messages import (
    AgentSpeechEndedMessage,
    AgentSpeechStartedMessage,
    AssistantTextMessage,
    ErrorMessage,
    InterruptionMessage,
    ServerMessage,
    SpeechEndedMessage,
    SpeechStartedMessage,
    StageChangedMessage,
    ToolCallFinishedMessage,
    ToolCallStartedMessage,
    TranscriptMessage,
    TurnCompletedMessage,
)
from llmrtc.voice.events import (
    AgentSpeechEnded,
    AgentSpeechStarted,
    BargeIn,
    SpeechError,
    Transcript,
    UserSpeechEnded,
    UserSpeechStarted,
)

__all__ = [
    "MODEL_ERROR_TEXT",
    "STT_ERROR_TEXT",
    "TTS_ERROR_TEXT",
    "TURN_ERROR_TEXT",
    "tool_call_finished",
    "wire_duration_ms",
    "wire_event",
]

# The events' own messages name exception types, servers and URLs: for logs, never for the
# client. The client gets a fixed sentence it can show a user.
MODEL_ERROR_TEXT = (
    "The language model failed during this turn; the agent answered with an apology. "
    "You can go on talking."
)
"""The `model_error` message sent for a `TurnFailed`."""
STT_ERROR_TEXT = "Speech recognition failed for the last utterance; please say it again."
"""The `speech_error` message sent when the STT failed."""
TTS_ERROR_TEXT = "Speech synthesis failed; the agent's reply is shown as text only."
"""The `speech_error` message sent when the TTS failed."""
TURN_ERROR_TEXT = (
    "The agent failed during this turn and answered with an apology. You can go on talking."
)
"""The `turn_error` message sent when the turn handler itself failed (`SpeechError` with
`source="turn"`, or any source this module does not know)."""

_SPEECH_STARTED = SpeechStartedMessage()
_SPEECH_ENDED = SpeechEndedMessage()


def wire_duration_ms(duration_ms: float) -> float:
    """A tool call's duration as `tool_call_finished` carries it: milliseconds to the
    microsecond (a sync lookup takes ~20 µs: 0.02), so a call that ran is not sent as 0 unless
    it took under half a microsecond. How to show it is the client's business. A negative
    clock reading is 0.

    Args:
        duration_ms: The measured duration in milliseconds (0 for a call that never ran).

    Returns:
        The duration to send, in milliseconds.
    """
    return round(max(duration_ms, 0.0), 3)


def tool_call_finished(
    call_id: str, name: str, status: str, duration_ms: float, reused_from: str | None = None
) -> ToolCallFinishedMessage | None:
    """The `tool_call_finished` message for a call's result, or None for a background call's
    provisional `running` answer (its `tool_call_finished` goes out when its final result
    arrives).

    Args:
        call_id: The call's id.
        name: The tool's name as the model wrote it.
        status: The result's status (`ToolCallStatus`, or a hook's status word).
        duration_ms: How long the tool ran, in milliseconds (see `wire_duration_ms`).
        reused_from: The earlier call whose result answered this one, if any.

    Returns:
        The message, or None for `running`.
    """
    if status == "running":
        return None
    return ToolCallFinishedMessage.model_validate(
        {
            "call_id": call_id,
            "name": name,
            "status": status,
            "duration_ms": wire_duration_ms(duration_ms),
            "reused_from": reused_from,
        }
    )


def wire_event(event: object) -> ServerMessage | None:
    """The message to send the client for one loop event, or None for events it never sees.

    Covers every `llmrtc.voice.events` and `llmrtc.agent.events` type. Error events become
    `error` messages with a stable code (`model_error`, `speech_error`, `turn_error`) and a
    fixed, safe text: their internal detail stays in the server's logs and hooks.

    Args:
        event: Anything `VoiceLoop.events()` yields.

    Returns:
        The wire message, or None for an event type the protocol does not carry.
    """
    match event:
        case TextDelta(text=text):
            return AssistantTextMessage(delta=text)
        case ToolCallStarted(call=call, background=background):
            return ToolCallStartedMessage(
                call_id=call.call_id, name=call.name, background=background
            )
        case ToolCallFinished(result=result):
            return tool_call_finished(
                result.call_id,
                result.tool_name,
                result.status,
                result.duration_ms,
                result.reused_from,
            )
        case StageChanged():
            return StageChangedMessage(from_stage=event.from_stage, to_stage=event.to_stage)
        case TurnCompleted():
            return TurnCompletedMessage(text=event.text, stop_reason=event.stop_reason)
        case TurnFailed():
            return ErrorMessage(code="model_error", message=MODEL_ERROR_TEXT)
        case UserSpeechStarted():
            return _SPEECH_STARTED
        case UserSpeechEnded():
            return _SPEECH_ENDED
        case Transcript(text=text, final=final):
            return TranscriptMessage(text=text, final=final)
        case AgentSpeechStarted(text=text):
            return AgentSpeechStartedMessage(text=text)
        case AgentSpeechEnded(interrupted=interrupted, heard_text=heard_text):
            return AgentSpeechEndedMessage(interrupted=interrupted, heard_text=heard_text)
        case BargeIn(heard_text=heard_text, kind=kind):
            return InterruptionMessage(kind=kind, heard_text=heard_text)
        case SpeechError(source="stt"):
            return ErrorMessage(code="speech_error", message=STT_ERROR_TEXT)
        case SpeechError(source="tts"):
            return ErrorMessage(code="speech_error", message=TTS_ERROR_TEXT)
        case SpeechError():  # "turn": the handler raised; the loop apologised and goes on
            return ErrorMessage(code="turn_error", message=TURN_ERROR_TEXT)
    return None
