"""Floor 2: talking to models — messages, requests, the `LLMProvider` protocol, the
OpenAI-compatible provider, the tool-call formats (`formats/`), tolerant text tool-call parsing
and the one call-shape scanner (`scanner`), and the offline default model."""

from llmrtc.llm.compat import CompatProfile, RetryPolicy
from llmrtc.llm.formats import ToolCallFormat
from llmrtc.llm.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from llmrtc.llm.openai_provider import OpenAIProvider
from llmrtc.llm.prompting import PromptCompleter, PromptCompletion, complete_prompt
from llmrtc.llm.provider import LLMError, LLMProvider, collect_response
from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.text_tools import TextToolCallParser
from llmrtc.llm.types import (
    LLMDone,
    LLMEvent,
    LLMRequest,
    LLMResponse,
    LLMTextDelta,
    LLMToolCall,
    StopReason,
    ToolChoice,
    Usage,
)

__all__ = [
    "AssistantMessage",
    "CompatProfile",
    "LLMDone",
    "LLMError",
    "LLMEvent",
    "LLMProvider",
    "LLMRequest",
    "LLMResponse",
    "LLMTextDelta",
    "LLMToolCall",
    "Message",
    "ModelSettings",
    "OpenAIProvider",
    "PromptCompleter",
    "PromptCompletion",
    "RetryPolicy",
    "StopReason",
    "SystemMessage",
    "TextToolCallParser",
    "ToolCallFormat",
    "ToolChoice",
    "ToolMessage",
    "Usage",
    "UserMessage",
    "collect_response",
    "complete_prompt",
]
