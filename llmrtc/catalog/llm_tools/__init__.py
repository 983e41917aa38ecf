"""LLM-backed tools: tools whose handler is a prompt to a model.

- `tool`: `define_llm_tool` and the `LLMTool` it makes.
- `spec`: what such a tool asks for (`ModelPreference`, `PromptVariant`, `MaxTokensContext`).
- `run`: how one call is answered, model after model (`LLMToolError` when all fail).
- `text`: prompt templates, the JSON output rules, and reading JSON back from an answer.
- `model_pool`: `ModelPool`, the models they run on, and the `PromptProvider` protocol.
- `util_tools`: ready ones (`UTIL_TOOLS`: summarize, classify, extract).
"""

from llmrtc.catalog.llm_tools.model_pool import (
    MissingCredentialsError,
    ModelPool,
    ModelUnavailableError,
    PromptProvider,
    ToolPrompt,
)
from llmrtc.catalog.llm_tools.run import LLMToolError
from llmrtc.catalog.llm_tools.spec import MaxTokensContext, ModelPreference, PromptVariant
from llmrtc.catalog.llm_tools.tool import LLMTool, define_llm_tool
from llmrtc.catalog.llm_tools.util_tools import UTIL_TOOLS

__all__ = [
    "UTIL_TOOLS",
    "LLMTool",
    "LLMToolError",
    "MaxTokensContext",
    "MissingCredentialsError",
    "ModelPool",
    "ModelPreference",
    "ModelUnavailableError",
    "PromptProvider",
    "PromptVariant",
    "ToolPrompt",
    "define_llm_tool",
]
