"""What users need to test their own bots: a scripted model, a scripted OpenAI-compatible
HTTP server for the real `openai` client, and (later) fake speech and an aiortc client."""

from llmrtc.testing.openai_server import (
    DisconnectReply,
    ErrorReply,
    ScriptedOpenAIServer,
    StreamReply,
    chunk,
    text_reply,
    tool_call_reply,
)
from llmrtc.testing.scripted import ScriptedLLM, ScriptedResponse, ScriptExhaustedError

__all__ = [
    "DisconnectReply",
    "ErrorReply",
    "ScriptExhaustedError",
    "ScriptedLLM",
    "ScriptedOpenAIServer",
    "ScriptedResponse",
    "StreamReply",
    "chunk",
    "text_reply",
    "tool_call_reply",
]
