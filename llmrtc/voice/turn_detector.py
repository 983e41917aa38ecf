"""`TurnDetector`: an end-of-turn model, asked at each pause whether the user has finished.

The endpointer (`llmrtc.voice.endpointing`) asks at `VoiceConfig.min_end_silence` of silence,
through `judge_later`: the model runs on one process-wide worker thread, never on the event
loop, and the endpointer polls the answer at each later VAD window, so audio is never held up.
"""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

__all__ = [
    "COMPLETE_ABOVE",
    "JUDGED_AUDIO",
    "TurnDetector",
    "TurnJudgement",
    "judge",
    "judge_later",
]

COMPLETE_ABOVE: Final = 0.5
"""A `completion_probability` above this judges the turn complete (the models' decision
boundary: a detector calibrates its output to it)."""
JUDGED_AUDIO: Final = 8.0
"""Seconds of the utterance's end a detector is given at most (Smart Turn's whole window: what
decides a turn is how it ends)."""


@runtime_checkable
class TurnDetector(Protocol):
    """An end-of-turn model: judges from the audio whether the speaker has finished their turn.

    Example:
        class Always:  # every pause ends the turn after `min_end_silence`
            sample_rate = 16000
            def completion_probability(self, pcm: bytes) -> float:
                return 1.0
        VoiceConfig(turn_detector=Always())
    """

    @property
    def sample_rate(self) -> int:
        """The rate `completion_probability` takes (Smart Turn: 16000)."""
        ...

    def completion_probability(self, pcm: bytes) -> float:
        """The probability (0..1) that the speaker has finished their turn.

        Blocking (tens of milliseconds for Smart Turn) and thread-safe: it runs on a worker
        thread. `pcm` is mono s16le at `sample_rate`: the utterance's last `JUDGED_AUDIO`
        seconds at most, ending in the pause being judged.
        """
        ...


@dataclass(frozen=True, slots=True)
class TurnJudgement:
    """A detector's answer for one pause."""

    complete: bool
    """The probability was above `COMPLETE_ABOVE`: the turn ends after `min_end_silence`."""
    probability: float
    """What the detector said."""
    cpu_seconds: float
    """CPU time the decision took on its thread (resampling, features and the model)."""
    wall_seconds: float
    """Time from asking to the answer, waiting for the worker thread included."""


def judge(detector: TurnDetector, pcm: bytes, sample_rate: int) -> TurnJudgement:
    """Ask `detector` about `pcm` (mono s16le at `sample_rate`), blocking; resamples first when
    the detector takes another rate.

    Raises:
        ValueError: the detector returned something other than a probability in 0..1.
        Exception: whatever the detector raised.
    """
    asked = time.perf_counter()
    cpu = time.thread_time()
    if sample_rate != detector.sample_rate:
        from llmrtc.voice.audio import resample

        pcm = resample(pcm, sample_rate, detector.sample_rate)
    probability = detector.completion_probability(pcm)
    if (
        isinstance(probability, bool)
        or not isinstance(probability, int | float)
        or not math.isfinite(probability)
        or not 0.0 <= probability <= 1.0
    ):
        raise ValueError(
            f"{type(detector).__name__}.completion_probability returned {probability!r}, "
            "expected a probability between 0 and 1"
        )
    return TurnJudgement(
        complete=probability > COMPLETE_ABOVE,
        probability=float(probability),
        cpu_seconds=time.thread_time() - cpu,
        wall_seconds=time.perf_counter() - asked,
    )


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def judge_later(detector: TurnDetector, pcm: bytes, sample_rate: int) -> Future[TurnJudgement]:
    """`judge` on the process's turn-detector thread; poll the future's `done()`.

    One thread for every stream: a decision is a burst of one core's work, and more threads
    would only compete with the STT and the model on a small machine. Each endpointer has at
    most one question in flight, so the queue is bounded by the number of streams, and an
    answer that comes too late is not waited for (the endpointer falls back to the fixed
    silence).
    """
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmrtc-turn")
        executor = _executor
    return executor.submit(judge, detector, pcm, sample_rate)
