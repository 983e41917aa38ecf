"""Floor 1: where tools come from at scale: versioned ids, backends, search (keyword and
semantic), injection (direct or discovery meta-tools), toolkits and permissions."""

from llmrtc.catalog.backend import LocalBackend, ToolBackend
from llmrtc.catalog.catalog import SearchMode, ToolCatalog
from llmrtc.catalog.embeddings import MiniLMEmbedder, TextEmbedder, default_embedder
from llmrtc.catalog.ids import ToolId, format_tool_id, from_wire_name, parse_tool_id, to_wire_name
from llmrtc.catalog.injection import ToolInjection, estimate_tokens
from llmrtc.catalog.search import SearchHit
from llmrtc.catalog.toolkits import Toolkit, ToolsConfig

__all__ = [
    "LocalBackend",
    "MiniLMEmbedder",
    "SearchHit",
    "SearchMode",
    "TextEmbedder",
    "ToolBackend",
    "ToolCatalog",
    "ToolId",
    "ToolInjection",
    "Toolkit",
    "ToolsConfig",
    "default_embedder",
    "estimate_tokens",
    "format_tool_id",
    "from_wire_name",
    "parse_tool_id",
    "to_wire_name",
]
