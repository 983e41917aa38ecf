"""One snapshot's embedding index, built once in a thread of its own, and stopped between two
chunks of texts once a newer snapshot with other tools replaced the one it was built for."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import anyio

from llmrtc.errors import LLMRTCError
from llmrtc.tools.definition import ToolDefinition

if TYPE_CHECKING:
    from llmrtc.catalog.embeddings import EmbeddingIndex, TextEmbedder

__all__ = ["INDEX_CHUNK", "IndexBuild", "IndexSuperseded"]

logger = logging.getLogger(__name__)

INDEX_CHUNK = 32
"""Texts embedded between two checks that the build is still wanted."""


class IndexSuperseded(LLMRTCError):
    """An index build stopped: a newer snapshot with other tools replaced its snapshot."""


class IndexBuild:
    """The embedding index of one snapshot's tools, built once for all who ask.

    The build belongs to no caller, so a search that stops waiting (barge-in, timeout)
    abandons only its wait: the index is stored when ready, for whoever asks next. Once
    `supersede()` is called, the build stops before its next chunk of `INDEX_CHUNK` texts (its
    waiters get `IndexSuperseded`).
    """

    def __init__(self, generation: int, definitions: Sequence[ToolDefinition]) -> None:
        """A build (not started) of the index of `definitions`, for snapshot `generation`."""
        self.generation = generation
        self.definitions = definitions
        self.future: Future[EmbeddingIndex] = Future()
        self.superseded = False
        """A newer snapshot with other texts replaced this one: the build stops."""

    def start(
        self,
        embedder: TextEmbedder,
        reuse: Mapping[str, object],
        adopt: Callable[[int, Mapping[str, object]], None] | None = None,
    ) -> None:
        """Start the build in a thread of its own (call once).

        `reuse` maps texts to vectors embedded for an earlier snapshot (copied here: builds of
        successive snapshots may overlap), so a rebuild only embeds what changed. `adopt` gets
        the finished index's vectors (from the build's thread), so the next build reuses them
        even if no search ever read this index.
        """
        from llmrtc.catalog.embeddings import EmbedderError, EmbeddingIndex

        chunked = _ChunkedEmbedder(embedder, self)
        vectors = dict(reuse)
        future = self.future

        def build() -> None:
            try:
                index = EmbeddingIndex.build(chunked, self.definitions, vectors)
                if adopt is not None:
                    adopt(self.generation, index.vectors)
                future.set_result(index)
            except EmbedderError as exc:
                stopped = isinstance(exc.__cause__, IndexSuperseded)
                future.set_exception(exc.__cause__ if stopped else exc)
            except BaseException as exc:  # delivered to whoever awaits the index
                future.set_exception(exc)

        name = f"llmrtc-catalog-index-{self.generation}"
        threading.Thread(target=build, name=name, daemon=True).start()

    def supersede(self) -> None:
        """Stop the build before its next chunk (a newer snapshot replaced this one)."""
        self.superseded = True

    def ready(self) -> EmbeddingIndex | None:
        """The index if the build finished (None while building, or if it failed)."""
        future = self.future
        if not future.done() or future.exception() is not None:
            return None
        return future.result()

    async def wait(self) -> EmbeddingIndex:
        """The index, once built; the wait is cancellable, the build goes on.

        Raises:
            EmbedderError: if the model failed.
            IndexSuperseded: if the build was stopped.
        """
        if not self.future.done():
            await anyio.to_thread.run_sync(self.future.exception, abandon_on_cancel=True)
        return self.future.result()


class _ChunkedEmbedder:
    """`embedder` as `EmbeddingIndex.build` sees it during `build`: `INDEX_CHUNK` texts at a
    time, stopping (raising `IndexSuperseded`) once the build is superseded."""

    def __init__(self, embedder: TextEmbedder, build: IndexBuild) -> None:
        self.embedder, self.build = embedder, build

    def embed(self, texts: Sequence[str]) -> Any:
        """The vectors of `texts`, a chunk at a time (raises `IndexSuperseded` between two)."""
        import numpy as np

        parts = []
        for start in range(0, len(texts), INDEX_CHUNK):
            if self.build.superseded:
                raise IndexSuperseded(f"snapshot {self.build.generation} was replaced")
            parts.append(np.asarray(self.embedder.embed(list(texts[start : start + INDEX_CHUNK]))))
        return np.concatenate(parts) if parts else np.zeros((0, 1), dtype=np.float32)

    def embed_one(self, text: str) -> Any:
        """The vector of one text (never stopped: a query, not a build)."""
        return self.embedder.embed_one(text)
