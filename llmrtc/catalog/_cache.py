"""The catalog's flat cache: one immutable snapshot of every backend's tools.

A snapshot is built whole and then swapped in by one assignment, so a reader sees either the
old snapshot or the new one, never a half-built one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from llmrtc.catalog.backend import ToolBackend
from llmrtc.catalog.ids import semver_key
from llmrtc.catalog.search import KeywordEntry
from llmrtc.telemetry.hooks import ErrorEvent, Hooks, emit, hooks_for
from llmrtc.tools.tool import Tool

if TYPE_CHECKING:
    from llmrtc.catalog.embeddings import EmbeddingIndex, TextEmbedder

__all__ = ["Snapshot", "build_snapshot"]

logger = logging.getLogger("llmrtc.catalog")


@dataclass(eq=False)
class Snapshot:
    """Every tool of one cache generation, indexed for lookups and search."""

    generation: int
    tools: tuple[Tool, ...]
    """Backend order, then each backend's own order; one tool per id."""
    by_id: dict[str, Tool]
    by_name: dict[str, tuple[Tool, ...]]
    """Dotted name → its versions, highest semver first."""
    entries: tuple[KeywordEntry, ...]
    """`entries[i]` is the searchable text of `tools[i]`."""
    _index: EmbeddingIndex | None = field(default=None, repr=False)
    _index_lock: anyio.Lock = field(default_factory=anyio.Lock, repr=False)

    async def embedding_index(
        self, embedder: TextEmbedder, reuse: dict[str, object]
    ) -> EmbeddingIndex:
        """This snapshot's embedding index, built once (off the event loop) for all callers.

        `reuse` maps texts to vectors embedded for an earlier snapshot, so a rebuild after
        `invalidate()` only embeds what changed; it is replaced by this index's own texts.
        """
        if self._index is not None:
            return self._index
        async with self._index_lock:
            if self._index is None:
                from llmrtc.catalog.embeddings import EmbeddingIndex

                definitions = [tool.definition for tool in self.tools]
                self._index = await anyio.to_thread.run_sync(
                    EmbeddingIndex.build, embedder, definitions, reuse
                )
            return self._index


async def _list_backend(backend: ToolBackend, hooks: Hooks | None) -> list[Tool]:
    """A backend's tools; a backend that raises is reported and counts as empty."""
    try:
        listed = await backend.list()
        if not isinstance(listed, list | tuple):
            raise TypeError(f"list() returned {type(listed).__name__}, expected a list of Tool")
    except Exception as exc:
        logger.warning(
            "tool backend %r failed to list its tools and is skipped until the next rebuild: %r",
            backend.name,
            exc,
        )
        if hooks is not None:
            event = ErrorEvent(error=exc, where=f"catalog backend {backend.name!r}")
            await emit(hooks_for([hooks], "on_error"), "on_error", event)
        return []
    tools = []
    for item in listed:
        if isinstance(item, Tool):
            tools.append(item)
        else:
            logger.warning(
                "tool backend %r listed a %s, not a Tool; skipped",
                backend.name,
                type(item).__name__,
            )
    return tools


async def build_snapshot(
    backends: Sequence[ToolBackend],
    generation: int,
    hooks: Hooks | None,
    reported_conflicts: set[tuple[str, str]],
) -> Snapshot:
    """List every backend in order and index the result (the first backend wins an id).

    `reported_conflicts` holds (tool id, losing backend) pairs already logged, so a conflict is
    logged once per catalog, not at every rebuild.
    """
    by_id: dict[str, Tool] = {}
    owner: dict[str, str] = {}
    for backend in backends:
        for tool in await _list_backend(backend, hooks):
            tool_id = tool.definition.tool_id
            if tool_id in by_id:
                if (tool_id, backend.name) not in reported_conflicts:
                    reported_conflicts.add((tool_id, backend.name))
                    logger.warning(
                        "tool id %r is offered by backends %r and %r; %r wins (added first)",
                        tool_id,
                        owner[tool_id],
                        backend.name,
                        owner[tool_id],
                    )
                continue
            by_id[tool_id] = tool
            owner[tool_id] = backend.name
    versions: dict[str, list[Tool]] = {}
    for tool in by_id.values():
        versions.setdefault(tool.definition.name, []).append(tool)
    by_name = {
        name: tuple(sorted(found, key=lambda t: semver_key(t.definition.version), reverse=True))
        for name, found in versions.items()
    }
    tools = tuple(by_id.values())
    return Snapshot(
        generation=generation,
        tools=tools,
        by_id=by_id,
        by_name=by_name,
        entries=tuple(KeywordEntry.of(tool.definition) for tool in tools),
    )
