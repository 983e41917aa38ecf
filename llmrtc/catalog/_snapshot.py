"""A snapshot: every backend's tools of one cache generation, listed whole and indexed for
lookups and search.

A snapshot is built whole and then swapped in by one assignment (`CatalogCore`), so a reader
sees either the old snapshot or the new one, never a half-built one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

from llmrtc.catalog._index_build import IndexBuild
from llmrtc.catalog.backend import ToolBackend
from llmrtc.catalog.ids import semver_key
from llmrtc.catalog.search import KeywordEntry, KeywordIndex, matches
from llmrtc.telemetry.events import ErrorEvent
from llmrtc.telemetry.hooks import Hooks, emit
from llmrtc.tools.tool import Tool

if TYPE_CHECKING:
    from llmrtc.catalog.embeddings import EmbeddingIndex, TextEmbedder

__all__ = ["Snapshot", "build_snapshot"]

logger = logging.getLogger(__name__)


@dataclass(eq=False)
class Snapshot:
    """Every tool of one cache generation, indexed for lookups and search."""

    generation: int
    tools: tuple[Tool, ...]
    """Backend order, then each backend's own order; one tool per id."""
    by_id: dict[str, Tool]
    ids: tuple[str, ...]
    """`ids[i]` is the tool id of `tools[i]` (computed once: `tool_id` formats on each read)."""
    by_name: dict[str, tuple[Tool, ...]]
    """Dotted name → its versions, highest semver first."""
    versions: tuple[tuple[int, ...], ...]
    """Positions in `tools` of each name's versions, highest first; names in catalog order."""
    latest: tuple[int, ...]
    """Positions of each name's highest version, in catalog order (what search ranks)."""
    latest_set: frozenset[int]
    keywords: KeywordIndex
    """`keywords.entries[i]` is the searchable text of `tools[i]`."""
    failed: tuple[str, ...] = ()
    """Backends that failed (raised or timed out) while this snapshot was built."""
    built_at: float = field(default_factory=time.monotonic)
    epoch: int = 0
    """The catalog's `invalidate()` count when this build started (current while equal)."""
    _index: IndexBuild | None = field(default=None, repr=False)

    def replaces(self, previous: Snapshot) -> None:
        """Take over from `previous`: share its index (built or still building) when every
        tool and text is the same (a retry whose backend is still down: no new build, no wasted
        thread); else stop its index build, which nobody will read any more."""
        if previous._index is None:
            return
        if previous.ids == self.ids and self._same_texts(previous):
            self._index = previous._index
        else:
            previous._index.supersede()

    def _same_texts(self, previous: Snapshot) -> bool:
        for old, new in zip(previous.tools, self.tools, strict=True):
            a, b = old.definition, new.definition
            if a is not b:
                from llmrtc.catalog.embeddings import tool_corpus

                if a.aliases != b.aliases or tool_corpus(a) != tool_corpus(b):
                    return False
        return True

    def start_index(
        self,
        embedder: TextEmbedder,
        reuse: Mapping[str, object],
        adopt: Callable[[int, Mapping[str, object]], None] | None = None,
    ) -> IndexBuild:
        """Start building this snapshot's embedding index, once, in a thread of its own (call
        on the event loop); returns the build (see `IndexBuild.start` for `reuse` and
        `adopt`)."""
        if self._index is None:
            build = IndexBuild(self.generation, [tool.definition for tool in self.tools])
            build.start(embedder, reuse, adopt)
            self._index = build
        return self._index

    def ready_index(self) -> EmbeddingIndex | None:
        """The embedding index if its build finished (None while building, or if it failed)."""
        return None if self._index is None else self._index.ready()

    async def embedding_index(
        self,
        embedder: TextEmbedder,
        reuse: Mapping[str, object],
        adopt: Callable[[int, Mapping[str, object]], None] | None = None,
    ) -> EmbeddingIndex:
        """This snapshot's embedding index, built once (off the event loop) for all callers.
        The wait is cancellable; the build goes on (see `start_index`).

        Raises:
            EmbedderError: if the model failed.
            IndexSuperseded: if a newer snapshot stopped the build.
        """
        return await self.start_index(embedder, reuse, adopt).wait()

    def candidates(
        self,
        namespace: str | None,
        tag: str | None,
        ids: frozenset[str] | None,
        permits: Callable[[Tool], bool] | None,
    ) -> Sequence[int]:
        """Positions of the tools a search may return: in `namespace`, with `tag`, among
        `ids`, permitted, and only the highest such version of each name (the model and users
        pick a tool by name). None filters nothing."""
        tools = self.tools
        if namespace is None and tag is None and permits is None and ids is None:
            return self.latest
        chosen = []
        for versions in self.versions:
            for i in versions:
                tool = tools[i]
                if ids is not None and tool.definition.tool_id not in ids:
                    continue
                if matches(tool, namespace, tag) and (permits is None or permits(tool)):
                    chosen.append(i)
                    break
        return sorted(chosen)


async def _list_backend(
    backend: ToolBackend, hooks: Hooks | None, timeout: float | None
) -> list[Tool] | None:
    """A backend's tools; a backend that raises, or takes longer than `timeout` seconds, is
    reported and counts as empty (None)."""
    try:
        with anyio.fail_after(timeout):
            listed = await backend.list()
        if not isinstance(listed, list | tuple):
            raise TypeError(f"list() returned {type(listed).__name__}, expected a list of Tool")
    except Exception as exc:
        if isinstance(exc, TimeoutError):
            exc = TimeoutError(f"list() took longer than backend_timeout={timeout:g} s")
        logger.warning(
            "tool backend %r failed to list its tools and is skipped until it is retried: %r",
            backend.name,
            exc,
        )
        if hooks is not None:
            await emit(hooks, ErrorEvent(error=exc, where=f"catalog backend {backend.name!r}"))
        return None
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
    timeout: float | None = None,
) -> Snapshot:
    """List every backend (at once, each bounded by `timeout` seconds) and index the result in
    backend order (the first backend wins an id).

    `reported_conflicts` holds (tool id, losing backend) pairs already logged, so a conflict is
    logged once per catalog, not at every rebuild.
    """
    listed: list[list[Tool] | None] = [None] * len(backends)

    async def list_one(position: int) -> None:
        listed[position] = await _list_backend(backends[position], hooks, timeout)

    # Concurrently: one slow backend costs one timeout, not one per backend.
    async with anyio.create_task_group() as group:
        for position in range(len(backends)):
            group.start_soon(list_one, position)
    by_id: dict[str, Tool] = {}
    owner: dict[str, str] = {}
    for backend, tools_of in zip(backends, listed, strict=True):
        for tool in tools_of or ():
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
    tools = tuple(by_id.values())
    positions: dict[str, list[int]] = {}
    for i, tool in enumerate(tools):
        positions.setdefault(tool.definition.name, []).append(i)
    for found in positions.values():
        found.sort(key=lambda i: semver_key(tools[i].definition.version), reverse=True)
    return Snapshot(
        generation=generation,
        tools=tools,
        by_id=by_id,
        ids=tuple(by_id),
        by_name={name: tuple(tools[i] for i in found) for name, found in positions.items()},
        versions=tuple(tuple(found) for found in positions.values()),
        latest=tuple(sorted(found[0] for found in positions.values())),
        latest_set=frozenset(found[0] for found in positions.values()),
        keywords=KeywordIndex([KeywordEntry.of(tool.definition) for tool in tools]),
        failed=tuple(b.name for b, found in zip(backends, listed, strict=True) if found is None),
    )
