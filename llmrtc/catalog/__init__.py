"""Floor 1: where tools come from at scale: versioned ids, backends, search (keyword and
semantic), injection (direct or discovery meta-tools), toolkits and permissions, and tools that
run without a hand-written handler: LLM-backed tools (`define_llm_tool`, `ModelPool`), composed
schemas (`compose_schema`) and MCP servers (`MCPBackend`)."""

from llmrtc.catalog.backend import LocalBackend, ToolBackend
from llmrtc.catalog.catalog import SearchMode, ToolCatalog
from llmrtc.catalog.compose import compose_schema
from llmrtc.catalog.embeddings import MiniLMEmbedder, TextEmbedder, default_embedder
from llmrtc.catalog.ids import ToolId, format_tool_id, from_wire_name, parse_tool_id, to_wire_name
from llmrtc.catalog.injection import ToolInjection, estimate_tokens
from llmrtc.catalog.llm_tools import (
    UTIL_TOOLS,
    LLMTool,
    LLMToolError,
    MaxTokensContext,
    MissingCredentialsError,
    ModelPool,
    ModelPreference,
    ModelUnavailableError,
    PromptProvider,
    PromptVariant,
    ToolPrompt,
    define_llm_tool,
)
from llmrtc.catalog.mcp import MCPBackend, MCPConnectionError
from llmrtc.catalog.search import SearchHit
from llmrtc.catalog.toolkits import Toolkit, ToolsConfig

__all__ = [
    "UTIL_TOOLS",
    "LLMTool",
    "LLMToolError",
    "LocalBackend",
    "MCPBackend",
    "MCPConnectionError",
    "MaxTokensContext",
    "MiniLMEmbedder",
    "MissingCredentialsError",
    "ModelPool",
    "ModelPreference",
    "ModelUnavailableError",
    "PromptProvider",
    "PromptVariant",
    "SearchHit",
    "SearchMode",
    "TextEmbedder",
    "ToolBackend",
    "ToolCatalog",
    "ToolId",
    "ToolInjection",
    "ToolPrompt",
    "Toolkit",
    "ToolsConfig",
    "compose_schema",
    "default_embedder",
    "define_llm_tool",
    "estimate_tokens",
    "format_tool_id",
    "from_wire_name",
    "parse_tool_id",
    "to_wire_name",
]
