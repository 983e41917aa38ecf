"""`ToolCatalog`: the tools of several backends behind one cached, searchable view."""

from __future__ import annotations

import builtins
import heapq
import logging
from collections.abc import Callable, Collection, Iterable
from typing import TYPE_CHECKING, Any, Literal

import anyio

from llmrtc.catalog._cache import QUERY_CACHE_SIZE, CatalogCore
from llmrtc.catalog._index_build import IndexSuperseded
from llmrtc.catalog._snapshot import Snapshot
from llmrtc.catalog.backend import ToolBackend
from llmrtc.catalog.ids import ToolId, from_wire_name, parse_tool_id
from llmrtc.catalog.search import (
    KeywordMatch,
    KeywordQuery,
    SearchHit,
    hybrid_score,
    matches,
    rank_hybrid,
)
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools.tool import Tool

if TYPE_CHECKING:
    from llmrtc.catalog.embeddings import TextEmbedder

__all__ = ["SearchMode", "ToolCatalog"]

logger = logging.getLogger(__name__)

SearchMode = Literal["hybrid", "keyword"]
"""`"hybrid"`: keyword scores blended with semantic similarity (keyword-only when no embedding
model is available); `"keyword"`: seed 000's keyword scores alone."""


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
        backend_timeout: float | None = 10.0,
        backend_retry: float = 30.0,
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
            backend_timeout: Seconds a backend's `list()` may take (None: no bound); a slower
                backend is reported (`on_error`) and counts as empty, like one that raises.
            backend_retry: Seconds after which a cache that misses a failed backend is
                rebuilt: the next access still answers from the cache at once and starts the
                retry in a task of the event loop (ended with the loop's run; see
                `CatalogCore._start_retry`). `invalidate()` rebuilds before the next answer.

        Raises:
            ValueError: if two backends share a name, `embedder` is none of the above, or a
                timing is not a positive number of seconds.
        """
        if backend_timeout is not None and not backend_timeout > 0:
            raise ValueError(
                f"backend_timeout must be seconds > 0 or None, got {backend_timeout!r}"
            )
        if not backend_retry > 0:
            raise ValueError(f"backend_retry must be seconds > 0, got {backend_retry!r}")
        if embedder not in ("auto", None) and not _is_embedder(embedder):
            raise ValueError(
                f"embedder must be 'auto', None or a TextEmbedder (embed(texts), "
                f"embed_one(text)), got {embedder!r}"
            )
        self._core = CatalogCore(hooks, embedder, backend_timeout, backend_retry)
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
        found = self._lookup(snapshot, parsed)
        if found is None and parsed.namespace is None and "__" in parsed.name:
            # The wire form `crm__lookup` (tried second: a tool may be named `a__b` itself).
            wire = parse_tool_id(from_wire_name(parsed.name))
            found = self._lookup(snapshot, ToolId(wire.namespace, wire.name, parsed.version))
        return found

    def _lookup(self, snapshot: Snapshot, parsed: ToolId) -> Tool | None:
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
        if self._permits is None:
            return list(snapshot.tools)
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
            if matches(tool, namespace, tag)
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
        wait: bool = True,
        ids: Collection[str] | None = None,
    ) -> builtins.list[Tool]:
        """The tools shown that best match `query`, best first (see `search_scored`)."""
        hits = await self.search_scored(
            query, limit, namespace=namespace, tag=tag, mode=mode, wait=wait, ids=ids
        )
        return [hit.tool for hit in hits]

    async def search_scored(
        self,
        query: str,
        limit: int = 5,
        *,
        namespace: str | None = None,
        tag: str | None = None,
        mode: SearchMode = "hybrid",
        wait: bool = True,
        ids: Collection[str] | None = None,
    ) -> builtins.list[SearchHit]:
        """Ranked hits with their scores and what matched (`llmrtc.catalog.search` has the
        rules). The first hybrid search loads the embedding model and embeds the catalog off
        the event loop; later ones reuse both until the cache is rebuilt. Cancelling a search
        that waits for the index stops the wait only: the index is kept when ready.

        Args:
            query: Words, a name, a tag, or a phrase in the user's language.
            limit: At most this many hits (>= 1).
            namespace: Only tools of this namespace.
            tag: Only tools with this tag.
            mode: `"hybrid"` (default) or `"keyword"`.
            wait: False: while the semantic index is still being built, answer by keyword
                now (the build goes on) rather than wait for it (a live turn's `search_tools`).
            ids: Only tools with these ids (`tool_id`), filtered before the cut to `limit`
                (an injection's `search_tools` offers only the tools it was built with).

        Raises:
            ValueError: if `limit` < 1 or `mode` is unknown.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"search limit must be a positive integer, got {limit!r}")
        if mode not in ("hybrid", "keyword"):
            raise ValueError(f"search mode must be 'hybrid' or 'keyword', got {mode!r}")
        snapshot = await self._core.current()
        keywords = KeywordQuery(query)
        if not keywords.phrase:
            return []
        only = None if ids is None else frozenset(ids)
        candidates = snapshot.candidates(namespace, tag, only, self._permits)
        entries = snapshot.keywords.entries
        allowed = snapshot.latest_set if candidates is snapshot.latest else set(candidates)
        matched: dict[int, KeywordMatch] = {}
        for i in snapshot.keywords.containing(*keywords.needles):
            if i in allowed and (match := keywords.match(entries[i])) is not None:
                matched[i] = match
        similarities = None
        if mode == "hybrid" and candidates:
            similarities = await self._similarities(snapshot, query, wait=wait)
        if similarities is None:
            # Ranked by keyword alone: a tool missing a word another candidate holds sinks.
            held = keywords.held(matched.values())
            keyword = {i: keywords.score(match, held) for i, match in matched.items()}
            ranked = heapq.nsmallest(limit, keyword, key=lambda i: (-keyword[i], i))
            return [
                SearchHit(
                    snapshot.tools[i],
                    keyword[i],
                    keyword[i],
                    None,
                    keywords.why(entries[i], held),
                )
                for i in ranked
            ]
        # Meaning ranks; the boost takes the keyword score without the missing word penalty.
        keyword = {i: keywords.score(match) for i, match in matched.items()}
        hits = []
        # Ties keep catalog order (the first backend first).
        for i in rank_hybrid(similarities, candidates, keyword, limit):
            score = keyword.get(i, 0.0)
            why = keywords.why(entries[i]) if i in keyword else ""
            similarity = float(similarities[i])
            reason = f"similarity {similarity:.2f}" + (f"; {why}" if why else "")
            hybrid = hybrid_score(score, similarity)
            hits.append(SearchHit(snapshot.tools[i], hybrid, score, similarity, reason))
        return hits

    async def warm_up(self) -> None:
        """Build the cache now and, for hybrid search, load the model and embed every tool
        (off the event loop), so the first `search` does not wait for them.

        Call it at start-up (a server's start, before a session's first turn): embedding costs
        ~30-70 ms of CPU per tool on a busy 2-core machine. Failures are logged, never raised.
        """
        snapshot = await self._core.current()
        if snapshot.tools:
            await self._similarities(snapshot, None)

    async def start_indexing(self) -> None:
        """Build the cache now and start embedding every tool in the background, without
        waiting (what `ToolInjection.build` does in discovery mode). Searches that pass
        `wait=False` answer by keyword until the index is ready."""
        snapshot = await self._core.current()
        embedder = self._core.resolve_embedder()
        if snapshot.tools and embedder is not None:
            snapshot.start_index(embedder, self._core.vectors, self._core.adopt_vectors)

    async def _similarities(self, snapshot: Snapshot, query: str | None, wait: bool = True) -> Any:
        """Cosine similarity of `query` to each tool of `snapshot`, or None without a model,
        while the index builds and `wait` is False (or without a query: then this only builds
        the index)."""
        from llmrtc.catalog.embeddings import EmbedderError, embed_query

        core = self._core
        embedder = core.resolve_embedder()
        if embedder is None:
            return None
        try:
            if wait:
                index = await snapshot.embedding_index(embedder, core.vectors, core.adopt_vectors)
            elif (ready := snapshot.ready_index()) is not None:
                index = ready
            else:
                snapshot.start_index(embedder, core.vectors, core.adopt_vectors)
                return None
            core.adopt_vectors(snapshot.generation, index.vectors)
            if query is None:
                return None
            vector = core.queries.get(query)
            if vector is None:
                vector = await anyio.to_thread.run_sync(
                    embed_query, embedder, query, abandon_on_cancel=True
                )
                core.queries[query] = vector
                if len(core.queries) > QUERY_CACHE_SIZE:
                    core.queries.popitem(last=False)
            else:
                core.queries.move_to_end(query)
        except IndexSuperseded:
            return None  # its snapshot was replaced meanwhile: keywords for this one search
        except EmbedderError:
            # A broken model must not break search: fall back to keywords for good.
            logger.exception("semantic tool search failed; the catalog searches by keyword only")
            if core.embedder is embedder:
                core.embedder = None
            return None
        except Exception:
            # Anything else fails this one search's semantic half, not the model for good.
            logger.exception("semantic tool search failed; this search used keywords only")
            return None
        return index.similarities(vector)

    def __repr__(self) -> str:
        view = ", restricted" if self._permits is not None else ""
        return f"ToolCatalog(backends={list(self._core.backends)}{view})"


def _is_embedder(value: object) -> bool:
    return callable(getattr(value, "embed", None)) and callable(getattr(value, "embed_one", None))
