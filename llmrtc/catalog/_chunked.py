"""Index builds that stop when no longer wanted: the embedder, a chunk of texts at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmrtc.catalog._cache import Snapshot
    from llmrtc.catalog.embeddings import TextEmbedder

__all__ = ["INDEX_CHUNK", "Chunked", "IndexSuperseded"]


INDEX_CHUNK = 32
"""Texts embedded between two checks that the build is still wanted."""


class IndexSuperseded(Exception):
    """An index build stopped: a newer snapshot with other tools replaced its snapshot."""


class Chunked:
    """The embedder, embedding `INDEX_CHUNK` texts at a time and stopping (raising
    `IndexSuperseded`) once `snapshot` is superseded."""

    def __init__(self, embedder: TextEmbedder, snapshot: Snapshot) -> None:
        self.embedder, self.snapshot = embedder, snapshot

    def embed(self, texts: Sequence[str]) -> Any:
        """The vectors of `texts`, a chunk at a time (raises `IndexSuperseded` between two)."""
        import numpy as np

        parts = []
        for start in range(0, len(texts), INDEX_CHUNK):
            if self.snapshot.superseded:
                raise IndexSuperseded(f"snapshot {self.snapshot.generation} was replaced")
            parts.append(np.asarray(self.embedder.embed(list(texts[start : start + INDEX_CHUNK]))))
        return np.concatenate(parts) if parts else np.zeros((0, 1), dtype=np.float32)

    def embed_one(self, text: str) -> Any:
        """The vector of one text (never stopped: a query, not a build)."""
        return self.embedder.embed_one(text)
