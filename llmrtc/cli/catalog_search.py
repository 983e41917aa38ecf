"""`llmrtc tools FILE --search "query"`: the file's tools ranked for a query, as a catalog
search ranks them (keyword rules plus semantic similarity when the embedding model is
installed)."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from llmrtc.catalog.backend import LocalBackend
from llmrtc.catalog.catalog import ToolCatalog
from llmrtc.tools.registry import ToolRegistry

__all__ = ["print_search", "search_lines"]


async def search_lines(
    registry: ToolRegistry, query: str, *, limit: int = 10, semantic: bool = True
) -> list[str]:
    """The ranked results for `query`, as lines to print: rank, name, id, score, description,
    and which rules matched.

    Args:
        registry: The tools to search (hidden ones too).
        query: Words, a name, a tag or a phrase.
        limit: At most this many results (>= 1).
        semantic: Blend in semantic similarity (needs the packaged MiniLM model; without it
            the search is keyword-only).

    Raises:
        ValueError: if `limit` < 1.
    """
    tools = [*registry, *(registry.get(n) for n in registry.hidden_names())]
    catalog = ToolCatalog(
        [LocalBackend([t for t in tools if t is not None], name="file")],
        embedder="auto" if semantic else None,
    )
    hits = await catalog.search_scored(query, limit=limit)
    if not hits:
        return [f"no tool matches {query!r}"]
    lines: list[str] = []
    for rank, hit in enumerate(hits, 1):
        definition = hit.tool.definition
        lines.append(f"{rank}. {definition.name}  ({definition.tool_id})  score {hit.score:.1f}")
        if definition.description:
            lines.append(f"    {definition.description.splitlines()[0]}")
        if hit.why:
            lines.append(f"    matched: {hit.why}")
    return lines


def print_search(
    registry: ToolRegistry,
    query: str,
    *,
    limit: int = 10,
    semantic: bool = True,
    out: Callable[[str], object] = print,
) -> int:
    """Print `search_lines` (one call to `out` per line); returns the exit status (0)."""
    for line in anyio.run(lambda: search_lines(registry, query, limit=limit, semantic=semantic)):
        out(line)
    return 0
