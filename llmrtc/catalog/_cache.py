"""The catalog's flat cache: one immutable snapshot of every backend's tools.

A snapshot is built whole and then swapped in by one assignment, so a reader sees either the
old snapshot or the new one, never a half-built one.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import anyio

from llmrtc.catalog._chunked import Chunked, IndexSuperseded
from llmrtc.catalog.backend import ToolBackend
from llmrtc.catalog.ids import semver_key
from llmrtc.catalog.search import KeywordEntry, KeywordIndex
from llmrtc.telemetry.hooks import ErrorEvent, Hooks, emit, hooks_for
from llmrtc.tools.tool import Tool

if TYPE_CHECKING:
    from llmrtc.catalog.embeddings import EmbeddingIndex, TextEmbedder

__all__ = ["QUERY_CACHE_SIZE", "CatalogCore", "Snapshot", "build_snapshot"]

logger = logging.getLogger("llmrtc.catalog")

QUERY_CACHE_SIZE = 256


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
    _index: Future[EmbeddingIndex] | None = field(default=None, repr=False)
    superseded: bool = False
    """A newer snapshot with other texts replaced this one: its index build stops."""

    def inherit_index(self, previous: Snapshot) -> None:
        """Share `previous`'s index (built or still building) when every tool and text is the
        same (a retry whose backend is still down): no new build, no wasted thread."""
        if previous._index is None or previous.ids != self.ids:
            return
        for old, new in zip(previous.tools, self.tools, strict=True):
            a, b = old.definition, new.definition
            if a is not b:
                from llmrtc.catalog.embeddings import tool_corpus

                if a.aliases != b.aliases or tool_corpus(a) != tool_corpus(b):
                    return
        self._index = previous._index

    def start_index(
        self,
        embedder: TextEmbedder,
        reuse: Mapping[str, object],
        adopt: Callable[[int, Mapping[str, object]], None] | None = None,
    ) -> Future[EmbeddingIndex]:
        """Start building this snapshot's embedding index, once, in a thread of its own (call
        on the event loop); returns its future.

        The build belongs to no caller, so a search that stops waiting (barge-in, timeout)
        abandons only its wait: the index is stored when ready, for whoever asks next.
        `reuse` maps texts to vectors embedded for an earlier snapshot (copied here: builds of
        successive snapshots may overlap), so a rebuild only embeds what changed. `adopt` gets
        the finished index's vectors (from the build's thread), so the next build reuses them
        even if no search ever read this index. Once `superseded`, the build stops before its
        next chunk of `INDEX_CHUNK` texts (its waiters get `IndexSuperseded`).
        """
        if self._index is None:
            from llmrtc.catalog.embeddings import EmbedderError, EmbeddingIndex

            future: Future[EmbeddingIndex] = Future()
            definitions = [tool.definition for tool in self.tools]
            vectors = dict(reuse)
            chunked = Chunked(embedder, self)

            def build() -> None:
                try:
                    index = EmbeddingIndex.build(chunked, definitions, vectors)
                    if adopt is not None:
                        adopt(self.generation, index.vectors)
                    future.set_result(index)
                except EmbedderError as exc:
                    stopped = isinstance(exc.__cause__, IndexSuperseded)
                    future.set_exception(exc.__cause__ if stopped else exc)
                except BaseException as exc:  # delivered to whoever awaits the index
                    future.set_exception(exc)

            self._index = future
            name = f"llmrtc-catalog-index-{self.generation}"
            threading.Thread(target=build, name=name, daemon=True).start()
        return self._index

    def ready_index(self) -> EmbeddingIndex | None:
        """The embedding index if its build finished (None while building, or if it failed)."""
        future = self._index
        if future is None or not future.done() or future.exception() is not None:
            return None
        return future.result()

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
        """
        future = self.start_index(embedder, reuse, adopt)
        if not future.done():
            await anyio.to_thread.run_sync(future.exception, abandon_on_cancel=True)
        return future.result()


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
            event = ErrorEvent(error=exc, where=f"catalog backend {backend.name!r}")
            await emit(hooks_for([hooks], "on_error"), "on_error", event)
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


class CatalogCore:
    """What a catalog and all its `restricted()` views share: backends, cache, embedder."""

    queries: OrderedDict[str, Any]
    """Recent query vectors (LRU, `QUERY_CACHE_SIZE`): a repeated search skips the model."""

    def __init__(
        self,
        hooks: Hooks | None,
        embedder: TextEmbedder | Literal["auto"] | None,
        backend_timeout: float | None = None,
        backend_retry: float = math.inf,
    ):
        self.backend_timeout = backend_timeout
        self.backend_retry = backend_retry
        self.backends: dict[str, ToolBackend] = {}
        self.hooks = hooks
        self.generation = 0
        """Bumped by `invalidate()`: a snapshot of an older epoch is rebuilt before use."""
        self.serial = 0  # numbers the snapshots (Snapshot.generation), newest highest
        self.snapshot: Snapshot | None = None
        self.retrying = False  # a background retry of failed backends is under way
        self.retry_task: Any = None  # its asyncio task (None under trio)
        self.lock = anyio.Lock()
        self.reported_conflicts: set[tuple[str, str]] = set()
        self.embedder: TextEmbedder | None = None
        self.embedder_resolved = embedder != "auto"
        if embedder != "auto":
            self.embedder = embedder
        self.vectors: Mapping[str, object] = {}
        """Text → vector of the newest built index (what the next build reuses)."""
        self.vectors_generation = -1
        self.vectors_lock = threading.Lock()
        self.queries = OrderedDict()

    async def current(self) -> Snapshot:
        """The current snapshot, rebuilt first if it is missing or invalidated.

        A snapshot that misses a failed backend due for a retry (`backend_retry`) is served
        as it is, and the retry runs in the background (`_retry`): a live turn never waits
        `backend_timeout` for a backend that was already down.
        """
        snapshot = self.snapshot
        if self._fresh(snapshot):
            assert snapshot is not None
            return snapshot
        if snapshot is not None and snapshot.epoch == self.generation:
            self._start_retry()
            return snapshot
        # One rebuild however many callers arrive: the first takes the lock and builds, the
        # others wait on it and then find the fresh snapshot. A caller cancelled mid-build
        # releases the lock and the next waiter builds instead.
        async with self.lock:
            snapshot = self.snapshot
            if snapshot is not None and snapshot.epoch == self.generation:
                return snapshot
            return await self._build()

    async def _build(self) -> Snapshot:
        """List the backends into a new snapshot and make it current (hold `lock`)."""
        epoch = self.generation
        self.serial += 1
        built = await build_snapshot(
            tuple(self.backends.values()),
            self.serial,
            self.hooks,
            self.reported_conflicts,
            self.backend_timeout,
        )
        built.epoch = epoch
        previous = self.snapshot
        if previous is not None:
            built.inherit_index(previous)
            previous.superseded = previous._index is not built._index
        # One assignment: readers see the old snapshot or this complete one.
        self.snapshot = built
        return built

    def _start_retry(self) -> None:
        """Retry the failed backends in a task of the running event loop, once at a time.

        The task belongs to the loop, not to the caller (a barge-in must not cancel it, and
        the caller must not wait): asyncio cancels it when its loop's run ends, trio runs it
        as a system task (cancelled when `trio.run` ends), so it never outlives the catalog's
        use; each backend is bounded by `backend_timeout` meanwhile.
        """
        task = self.retry_task
        # (A task cancelled before its first step never ran its `finally`: done() tells.)
        if self.retrying and (task is None or not task.done()):
            return
        import sniffio

        self.retrying = True
        if sniffio.current_async_library() == "trio":
            import trio

            trio.lowlevel.spawn_system_task(self._retry)
        else:
            import asyncio

            # Kept referenced: the loop holds tasks weakly.
            self.retry_task = asyncio.get_running_loop().create_task(self._retry())

    async def _retry(self) -> None:
        try:
            async with self.lock:
                snapshot = self.snapshot
                # Invalidated meanwhile (the next caller rebuilds), or rebuilt already.
                due = snapshot is not None and snapshot.epoch == self.generation
                if due and not self._fresh(snapshot):
                    await self._build()
        except Exception:  # a task of the loop: nobody else would see it
            logger.exception("retrying the failed tool backends failed")
        finally:
            self.retrying = False

    def _fresh(self, snapshot: Snapshot | None) -> bool:
        """Whether `snapshot` is current: not invalidated, and no failed backend is due for a
        retry (`backend_retry` seconds after the build)."""
        if snapshot is None or snapshot.epoch != self.generation:
            return False
        return not snapshot.failed or time.monotonic() - snapshot.built_at < self.backend_retry

    def adopt_vectors(self, generation: int, vectors: Mapping[str, object]) -> None:
        """Keep `vectors` (of the index built for `generation`) for the next build to reuse,
        unless a newer generation's are kept already. Called from index build threads too."""
        with self.vectors_lock:
            if generation > self.vectors_generation:
                self.vectors = vectors
                self.vectors_generation = generation

    def resolve_embedder(self) -> TextEmbedder | None:
        """The embedder; `"auto"` is resolved (and a missing model logged) on first use."""
        if not self.embedder_resolved:
            from llmrtc.catalog.embeddings import default_embedder

            self.embedder = default_embedder()
            self.embedder_resolved = True
        return self.embedder
