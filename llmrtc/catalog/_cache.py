"""The catalog's cache, shared by a catalog and all its `restricted()` views: the backends,
the current snapshot and its rebuilds (one at a time, failed backends retried in the
background), the embedder, and the vectors and query vectors later index builds and searches
reuse."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import anyio

from llmrtc.catalog._snapshot import Snapshot, build_snapshot
from llmrtc.catalog.backend import ToolBackend
from llmrtc.telemetry.hooks import Hooks

if TYPE_CHECKING:
    from llmrtc.catalog.embeddings import TextEmbedder

__all__ = ["QUERY_CACHE_SIZE", "CatalogCore"]

logger = logging.getLogger(__name__)

QUERY_CACHE_SIZE = 256


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
            built.replaces(previous)
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
