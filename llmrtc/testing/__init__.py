"""What users need to test their own bots: a scripted model, a scripted OpenAI-compatible
HTTP server for the real `openai` client, hooks that record every event, in-memory
OpenTelemetry, an abort on a timer, fake speech engines, and `RTCTestClient`, an aiortc client
of `llmrtc.rtc.RTCServer` (loaded on first access: importing this package does not import
aiortc)."""

from typing import TYPE_CHECKING, Any

from llmrtc.testing.aborts import abort_after
from llmrtc.testing.openai_audio import (
    SpeechReply,
    TranscriptionReply,
    speech_reply,
    tone,
    tone_reply,
)
from llmrtc.testing.openai_server import (
    DisconnectReply,
    ErrorReply,
    ScriptedOpenAIServer,
    StreamReply,
    chunk,
    text_reply,
    tool_call_reply,
)
from llmrtc.testing.recording import RecordingHooks
from llmrtc.testing.scripted import (
    ScriptedLLM,
    ScriptedResponse,
    ScriptExhaustedError,
    check_chat_messages,
)
from llmrtc.testing.speech import FakeSTT, FakeTTS, FakeVAD
from llmrtc.testing.telemetry import InMemoryTelemetry

if TYPE_CHECKING:
    from llmrtc.testing.rtc_client import RTCTestClient

__all__ = [
    "DisconnectReply",
    "ErrorReply",
    "FakeSTT",
    "FakeTTS",
    "FakeVAD",
    "InMemoryTelemetry",
    "RTCTestClient",
    "RecordingHooks",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "ScriptedOpenAIServer",
    "ScriptedResponse",
    "SpeechReply",
    "StreamReply",
    "TranscriptionReply",
    "abort_after",
    "check_chat_messages",
    "chunk",
    "speech_reply",
    "text_reply",
    "tone",
    "tone_reply",
    "tool_call_reply",
]


def __getattr__(name: str) -> Any:
    """Load `RTCTestClient` on first access (it imports aiortc: `pip install "llmrtc[rtc]"`)."""
    if name == "RTCTestClient":
        from llmrtc.testing.rtc_client import RTCTestClient

        globals()[name] = RTCTestClient
        return RTCTestClient
    raise AttributeError(f"module 'llmrtc.testing' has no attribute {name!r}")
