"""Floor 5: audio in, audio out around a `TurnHandler`: frames, VAD, STT, TTS, turn-taking,
streamed speech and barge-in. Transport-free (the `rtc` floor puts it on WebRTC).

Heavy engines (faster-whisper, Silero, piper) are imported only when a provider is opened.
"""

from llmrtc.voice.config import VoiceConfig
from llmrtc.voice.events import (
    AgentSpeechEnded,
    AgentSpeechStarted,
    BargeIn,
    LoopEvent,
    SpeechError,
    Transcript,
    UserSpeechEnded,
    UserSpeechStarted,
    VoiceEvent,
)
from llmrtc.voice.frames import FRAME_DURATION, AudioFrame
from llmrtc.voice.loop import VoiceLoop
from llmrtc.voice.providers._whisper_model import VoiceModelError
from llmrtc.voice.speech import Speech, open_default_speech, resolve_turn_detector
from llmrtc.voice.stt import STT, STTError
from llmrtc.voice.tts import TTS, TTSError
from llmrtc.voice.turn_detector import TurnDetector, TurnJudgement
from llmrtc.voice.vad import VAD, VADStream

__all__ = [
    "FRAME_DURATION",
    "STT",
    "TTS",
    "VAD",
    "AgentSpeechEnded",
    "AgentSpeechStarted",
    "AudioFrame",
    "BargeIn",
    "LoopEvent",
    "STTError",
    "Speech",
    "SpeechError",
    "TTSError",
    "Transcript",
    "TurnDetector",
    "TurnJudgement",
    "UserSpeechEnded",
    "UserSpeechStarted",
    "VADStream",
    "VoiceConfig",
    "VoiceEvent",
    "VoiceLoop",
    "VoiceModelError",
    "open_default_speech",
    "resolve_turn_detector",
]
