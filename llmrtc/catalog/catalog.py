"""`ToolCatalog`: the tools of several backends behind one cached, searchable view."""

from __future__ import annotations

import builtins
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Literal

import anyio

from llmrtc.catalog._cache import Snapshot, build_snapshot
from llmrtc.catalog.backend import ToolBackend
from llmrtc.catalog.ids import from_wire_name, parse_tool_id
from llmrtc.catalog.search import (
    MIN_SIMILARITY,
    SearchHit,
    hybrid_score,
    keyword_score,
    query_terms,
)
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools.tool import Tool

if TYPE_CHECKING:
    from llmrtc.catalog.embeddings import TextEmbedder

__all__ = ["SearchMode", "ToolCatalog"]

logger = logging.getLogger("llmrtc.catalog")

SearchMode = Literal["hybrid", "keyword"]
"""`"hybrid"`: keyword scores blended with semantic similarity (keyword-only when no embedding
model is available); `"keyword"`: seed 000's keyword scores alone."""

_QUERY_CACHE_SIZE = 256


class _Core:
    """What a catalog and all its `restricted()` views share: backends, cache, embedder."""

    def __init__(self, hooks: Hooks | None, embedder: TextEmbedder | Literal["auto"] | None):
        self.backends: dict[str, ToolBackend] = {}
        self.hooks = hooks
        self.generation = 0
        self.snapshot: Snapshot | None = None
        self.lock = anyio.Lock()
        self.reported_conflicts: set[tuple[str, str]] = set()
        self.embedder: TextEmbedder | None = None
        self.embedder_resolved = embedder != "auto"
        if embedder != "auto":
            self.embedder = embedder
        self.vectors: dict[str, object] = {}
        self.queries: OrderedDict[str, Any] = OrderedDict()

    async def current(self) -> Snapshot:
        snapshot = self.snapshot
        if snapshot is not None and snapshot.generation == self.generation:
            return snapshot
        # One rebuild however many callers arrive: the first takes the lock and builds, the
        # others wait on it and then find the fresh snapshot. A caller cancelled mid-build
        # releases the lock and the next waiter builds instead.
        async with self.lock:
            snapshot = self.snapshot
            if snapshot is not None and snapshot.generation == self.generation:
                return snapshot
            generation = self.generation
            built = await build_snapshot(
                tuple(self.backends.values()), generation, self.hooks, self.reported_conflicts
            )
            # One assignment: readers see the old snapshot or this complete one.
            self.snapshot = built
            return built

    def resolve_embedder(self) -> TextEmbedder | None:
        if not self.embedder_resolved:
            from llmrtc.catalog.embeddings import default_embedder

            self.embedder = default_embedder()
            self.embedder_resolved = True
        return self.embedder


class ToolCatalog:
    """Tools from several backends: lookup by id or name, listing, filtering and search.

    The catalog keeps a flat cache (tool id → tool) built from every backend in the order they
    were added; the first backend wins when two offer the same id. The cache is built at first
    use and again after `invalidate()`, `add_backend()` or `remove_backend()`.

    Example:
        catalog = ToolCatalog([LocalBackend([lookup_customer, issue_refund])])
        tool = await catalog.get("crm:lookup_customer")      # highest version
        hits = await catalog.search("refund a payment", limit=5)
    """

    def __init__(
        self,
        backends: Iterable[ToolBackend] = (),
        *,
        permits: Callable[[Tool], bool] | None = None,
        hooks: Hooks | None = None,
        embedder: TextEmbedder | Literal["auto"] | None = "auto",
    ) -> None:
        """Create a catalog over `backends` (in priority order).

        Args:
            backends: Tool sources; the first one wins an id both offer.
            permits: Which tools this catalog shows; a refused tool is invisible to `get`,
                `list`, `find` and `search`. None shows every tool.
            hooks: Receives `on_error` when a backend fails to list its tools.
            embedder: The text embedder for semantic search: `"auto"` (the packaged MiniLM
                model when installed, else keyword-only search, logged once), a `TextEmbedder`,
                or None for keyword-only search.

        Raises:
            ValueError: if two backends share a name.
        """
        self._core = _Core(hooks, embedder)
        self._permits = permits
        for backend in backends:
            self.add_backend(backend)

    # -- backends and the cache -------------------------------------------------------------

    @property
    def backends(self) -> tuple[ToolBackend, ...]:
        """The backends, in priority order (shared with every `restricted()` view)."""
        return tuple(self._core.backends.values())

    def add_backend(self, backend: ToolBackend) -> ToolCatalog:
        """Add a backend after the others (it loses id conflicts to them); returns the catalog.

        Raises:
            ValueError: if a backend with the same name is already added.
            TypeError: if `backend` lacks `name`, `list()` or `get()`.
        """
        if not isinstance(backend, ToolBackend):
            raise TypeError(
                f"add_backend() takes a ToolBackend (name, async list(), async get(id)), "
                f"got {type(backend).__name__}"
            )
        name = backend.name
        if name in self._core.backends:
            raise ValueError(
                f"a backend named {name!r} is already in the catalog; backend names must be "
                f"unique (added: {list(self._core.backends)})"
            )
        self._core.backends[name] = backend
        self.invalidate()
        return self

    def remove_backend(self, name: str) -> bool:
        """Remove a backend by name; returns whether it was there."""
        if self._core.backends.pop(name, None) is None:
            return False
        self.invalidate()
        return True

    def invalidate(self) -> None:
        """Drop the cache: the next lookup rebuilds it from the backends (once, however many
        callers wait). Lookups already under way finish on the cache they started with."""
        self._core.generation += 1

    # -- permissions ------------------------------------------------------------------------

    def restricted(self, permits: Callable[[Tool], bool]) -> ToolCatalog:
        """A view of this catalog that also hides the tools `permits` refuses.

        The view shares backends, cache and embedding index with this catalog (adding a backend
        to either shows in both); it applies this catalog's own `permits` too.
        """
        outer = self._permits
        view = ToolCatalog.__new__(ToolCatalog)
        view._core = self._core
        if outer is None:
            view._permits = permits
        else:
            view._permits = lambda tool: outer(tool) and permits(tool)
        return view

    def allows(self, tool: Tool) -> bool:
        """Whether this catalog shows `tool` (its `permits` accept it)."""
        return self._permits is None or bool(self._permits(tool))

    # -- lookups ----------------------------------------------------------------------------

    async def get(self, id_or_name: str) -> Tool | None:
        """The tool an id or name designates, or None when there is none (or it is hidden).

        Accepts the exact id `crm:lookup@1.2.0`; `crm:lookup`, the dotted `crm.lookup`, the
        wire name `crm__lookup` or a bare name (a tool without a namespace), each meaning the
        highest version shown. A malformed id gives None, like an unknown one.
        """
        snapshot = await self._core.current()
        try:
            parsed = parse_tool_id(id_or_name)
        except ValueError:
            return None
        if parsed.namespace is None and "__" in parsed.name:
            wire = parse_tool_id(from_wire_name(parsed.name))
            parsed = type(parsed)(wire.namespace, wire.name, parsed.version)
        if parsed.version is not None:
            found = snapshot.by_id.get(str(parsed))
            return found if found is not None and self.allows(found) else None
        for candidate in snapshot.by_name.get(parsed.qualified_name, ()):
            if self.allows(candidate):
                return candidate
        return None

    async def list(self) -> builtins.list[Tool]:
        """Every tool shown, in backend order (each backend's own order within it)."""
        snapshot = await self._core.current()
        return [tool for tool in snapshot.tools if self.allows(tool)]

    async def namespaces(self) -> builtins.list[str]:
        """The namespaces of the tools shown, sorted (discovery's categories)."""
        found = {t.definition.namespace for t in await self.list()}
        return sorted(ns for ns in found if ns is not None)

    async def find(
        self,
        namespace: str | None = None,
        tag: str | None = None,
        prefix: str | None = None,
    ) -> builtins.list[Tool]:
        """The tools shown that pass every filter given, in `list()` order.

        Args:
            namespace: Exact namespace (`"crm"`).
            tag: A tag the tool carries (exact).
            prefix: The start of the tool id or of the dotted name (`"crm:look"`, `"crm.look"`).
        """
        return [
            tool
            for tool in await self.list()
            if _matches(tool, namespace, tag)
            and (
                prefix is None
                or tool.definition.tool_id.startswith(prefix)
                or tool.definition.name.startswith(prefix)
            )
        ]

    # -- search -----------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        limit: int = 5,
        *,
        namespace: str | None = None,
        tag: str | None = None,
        mode: SearchMode = "hybrid",
    ) -> builtins.list[Tool]:
        """The tools shown that best match `query`, best first (see `search_scored`)."""
        hits = await self.search_scored(query, limit, namespace=namespace, tag=tag, mode=mode)
        return [hit.tool for hit in hits]

    async def search_scored(
        self,
        query: str,
        limit: int = 5,
        *,
        namespace: str | None = None,
        tag: str | None = None,
        mode: SearchMode = "hybrid",
    ) -> builtins.list[SearchHit]:
        """Ranked hits with their scores and what matched (`llmrtc.catalog.search` has the
        rules). The first hybrid search loads the embedding model and embeds the catalog off
        the event loop; later ones reuse both until the cache is rebuilt.

        Args:
            query: Words, a name, a tag, or a phrase in the user's language.
            limit: At most this many hits (>= 1).
            namespace: Only tools of this namespace.
            tag: Only tools with this tag.
            mode: `"hybrid"` (default) or `"keyword"`.

        Raises:
            ValueError: if `limit` < 1 or `mode` is unknown.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"search limit must be a positive integer, got {limit!r}")
        if mode not in ("hybrid", "keyword"):
            raise ValueError(f"search mode must be 'hybrid' or 'keyword', got {mode!r}")
        snapshot = await self._core.current()
        candidates = self._search_candidates(snapshot, namespace, tag)
        phrase, terms = query_terms(query)
        similarities = None
        if mode == "hybrid" and phrase and candidates:
            similarities = await self._similarities(snapshot, query)
        hits: builtins.list[SearchHit] = []
        for i in candidates:
            keyword, why = keyword_score(snapshot.entries[i], phrase, terms)
            if similarities is None:
                if keyword > 0:
                    hits.append(SearchHit(snapshot.tools[i], keyword, keyword, None, why))
                continue
            similarity = float(similarities[i])
            if keyword > 0 or similarity >= MIN_SIMILARITY:
                reason = f"similarity {similarity:.2f}" + (f"; {why}" if why else "")
                score = hybrid_score(keyword, similarity)
                hits.append(SearchHit(snapshot.tools[i], score, keyword, similarity, reason))
        # Stable sort: equal scores keep catalog order (the first backend first).
        hits.sort(key=lambda hit: hit.score, reverse=True)
        return hits[:limit]

    def _search_candidates(
        self, snapshot: Snapshot, namespace: str | None, tag: str | None
    ) -> builtins.list[int]:
        """Positions of the tools a search may return: shown, filtered, and only the highest
        shown version of each name (the model and users pick a tool by name)."""
        best: set[str] = set()
        for versions in snapshot.by_name.values():
            for tool in versions:
                if _matches(tool, namespace, tag) and self.allows(tool):
                    best.add(tool.definition.tool_id)
                    break
        return [i for i, tool in enumerate(snapshot.tools) if tool.definition.tool_id in best]

    async def _similarities(self, snapshot: Snapshot, query: str) -> Any:
        """Cosine similarity of `query` to each tool of `snapshot`, or None without a model."""
        core = self._core
        embedder = core.resolve_embedder()
        if embedder is None:
            return None
        try:
            index = await snapshot.embedding_index(embedder, core.vectors)
            vector = core.queries.get(query)
            if vector is None:
                vector = await anyio.to_thread.run_sync(embedder.embed_one, query)
                core.queries[query] = vector
                if len(core.queries) > _QUERY_CACHE_SIZE:
                    core.queries.popitem(last=False)
            else:
                core.queries.move_to_end(query)
        except Exception:
            # A broken model must not break search: fall back to keywords for good.
            logger.exception("semantic tool search failed; the catalog searches by keyword only")
            core.embedder = None
            return None
        return index.similarities(vector)

    def __repr__(self) -> str:
        view = ", restricted" if self._permits is not None else ""
        return f"ToolCatalog(backends={list(self._core.backends)}{view})"


def _matches(tool: Tool, namespace: str | None, tag: str | None) -> bool:
    definition = tool.definition
    return (namespace is None or definition.namespace == namespace) and (
        tag is None or tag in definition.tags
    )
