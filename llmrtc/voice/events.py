"""What `VoiceLoop.events()` yields besides the handler's own `AgentEvent`s, in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llmrtc.agent.events import AgentEvent

__all__ = [
    "AgentSpeechEnded",
    "AgentSpeechStarted",
    "BargeIn",
    "InterruptionKind",
    "LoopEvent",
    "SpeechError",
    "Transcript",
    "UserSpeechEnded",
    "UserSpeechStarted",
    "VoiceEvent",
]


@dataclass(frozen=True, slots=True)
class UserSpeechStarted:
    """The VAD heard the user start speaking."""

    audio_time: float = 0.0
    """Where in the input audio speech started, in seconds since the loop started."""


@dataclass(frozen=True, slots=True)
class UserSpeechEnded:
    """The user's utterance ended (`VoiceConfig.end_of_speech_silence` of silence)."""

    duration: float = 0.0
    """Seconds of the utterance, from speech start to the last voiced audio."""


@dataclass(frozen=True, slots=True)
class Transcript:
    """What the STT heard. Final transcripts start a turn (an empty one does not)."""

    text: str
    final: bool = True


@dataclass(frozen=True, slots=True)
class AgentSpeechStarted:
    """The agent's reply started playing (its first non-silent frame went out)."""

    text: str
    """The first piece of text being spoken."""


@dataclass(frozen=True, slots=True)
class AgentSpeechEnded:
    """The agent's reply stopped playing: it finished, or a barge-in cut it."""

    interrupted: bool
    heard_text: str
    """What was played out before it stopped, to the word (the whole text if not interrupted)."""


InterruptionKind = Literal["barge_in", "false", "backchannel"]
"""What speech over the agent turned out to be (see `BargeIn`)."""


@dataclass(frozen=True, slots=True)
class BargeIn:
    """The user spoke (or typed) over the agent, and what came of it (`kind`):

    - `"barge_in"`: words, a typed text or `interrupt()`: playout stopped, the turn was
      aborted (each tool by its `on_interrupt` policy); the history keeps what was heard.
    - `"false"`: no words (a cough, a door) within `VoiceConfig.false_interruption_timeout`:
      the paused reply resumed from the word where it stopped.
    - `"backchannel"`: only a `VoiceConfig.backchannels` phrase ("uh-huh"): the reply went on
      (resumed, if it had paused) and no turn was made of it.
    """

    heard_text: str = ""
    """What the user had heard of the reply when it was cut or paused ("" when it had not
    started)."""
    kind: InterruptionKind = "barge_in"


@dataclass(frozen=True, slots=True)
class SpeechError:
    """STT or TTS failed, or the handler's turn raised (`source="turn"`); the turn ended with a
    short spoken apology (where TTS still works) and the loop serves the next turn."""

    source: Literal["stt", "tts", "turn"]
    message: str
    """For developers and logs; never spoken."""
    error_type: str


VoiceEvent = (
    UserSpeechStarted
    | UserSpeechEnded
    | Transcript
    | AgentSpeechStarted
    | AgentSpeechEnded
    | BargeIn
    | SpeechError
)
"""The loop's own events."""

LoopEvent = VoiceEvent | AgentEvent
"""Everything `VoiceLoop.events()` yields: voice events and the handler's events."""
