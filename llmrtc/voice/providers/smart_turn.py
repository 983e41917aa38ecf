"""`SmartTurnDetector`: Smart Turn v3.2, an end-of-turn model judging the audio itself, offline.

The model is Daily's Smart Turn v3.2 (BSD-2-Clause; 8.7 MB of int8 ONNX: a Whisper-tiny-sized
audio encoder with a classification head), shipped inside the `pipecat-ai` wheel. llmrtc takes
only the file: the distribution is installed with `pip install --no-deps` (its dependencies are
a whole other voice framework), located through `importlib.metadata`, its sha256 checked, and
run by the `onnxruntime` the Silero VAD already uses. pipecat's code is never imported.

The model's input contract: 16 kHz mono, the last 8 s of the utterance (zero-padded in front when
shorter), as Whisper's log-mel spectrogram (80 mel bins, 25 ms windows every 10 ms: 80 x 800) of
the waveform normalised to zero mean and unit variance. It returns the probability that the turn
is complete. The features are computed here in numpy.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Final

from llmrtc.packaged_models import (
    PackageNotInstalledError,
    PackageVersionError,
    distribution_files,
    verified_once,
)
from llmrtc.voice.providers._onnx import open_session
from llmrtc.voice.providers._whisper_model import VoiceModelError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = ["INSTALL_HINT", "SmartTurnDetector"]

logger = logging.getLogger(__name__)

SAMPLE_RATE: Final = 16000
_SECONDS: Final = 8
_SAMPLES: Final = SAMPLE_RATE * _SECONDS
_N_FFT: Final = 400  # 25 ms
_HOP: Final = 160  # 10 ms
_MELS: Final = 80
_PACKAGE: Final = "pipecat-ai"
_VERSION: Final = "1.14.0"
_MODEL: Final = PurePosixPath("pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx")
_SIZE: Final = 8_679_182
_SHA256: Final = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
INSTALL_HINT: Final = f'pip install --no-deps "{_PACKAGE}=={_VERSION}"'
"""How to install the model's file (without the framework around it)."""


def _model_path() -> Path:
    """The ONNX file inside the installed `pipecat-ai`, checked against its pinned digest."""
    try:
        files = distribution_files(_PACKAGE, version=_VERSION)
    except PackageNotInstalledError:
        raise VoiceModelError(
            f"the Smart Turn model ships in {_PACKAGE!r}, which is not installed; install "
            f"the file (not the framework) with: {INSTALL_HINT}"
        ) from None
    except PackageVersionError as exc:
        raise VoiceModelError(
            f"Smart Turn: {exc}; install the pinned one with: {INSTALL_HINT}"
        ) from None
    path = files.get(_MODEL)
    if path is None or not verified_once(path, size=_SIZE, sha256=_SHA256):
        raise VoiceModelError(
            f"{_PACKAGE} {_VERSION} has no intact {_MODEL.name} (missing, or not the pinned "
            f"{_SIZE} bytes / sha256); reinstall it with: pip install --force-reinstall "
            f'--no-deps "{_PACKAGE}=={_VERSION}"'
        )
    return path


def _mel_filters() -> npt.NDArray[np.float64]:
    """Whisper's filterbank: 80 triangles evenly spaced on the Slaney mel scale from 0 to 8 kHz,
    each normalised to unit area (shape 201 frequency bins x 80)."""
    import numpy as np

    def to_mel(hz: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        # Slaney: linear below 1 kHz (3 mels per 200 Hz), logarithmic above.
        return np.where(
            hz < 1000.0, hz * 3.0 / 200.0, 15.0 + np.log(hz / 1000.0) * 27.0 / np.log(6.4)
        )

    def to_hz(mel: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return np.where(
            mel < 15.0, mel * 200.0 / 3.0, 1000.0 * np.exp((mel - 15.0) * np.log(6.4) / 27.0)
        )

    edges = to_hz(np.linspace(0.0, float(to_mel(np.array(SAMPLE_RATE / 2.0))), _MELS + 2))
    bins = np.linspace(0.0, SAMPLE_RATE / 2, _N_FFT // 2 + 1)
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (bins[:, None] - lower) / (centre - lower)
    falling = (upper - bins[:, None]) / (upper - centre)
    triangles = np.maximum(0.0, np.minimum(rising, falling))
    return triangles * (2.0 / (upper - lower))


class _Features:
    """Whisper log-mel features of an 8 s window (the constants computed once)."""

    def __init__(self) -> None:
        import numpy as np

        self._filters = _mel_filters()
        # The periodic Hann window (torch.hann_window's, which Whisper uses).
        self._window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(_N_FFT) / _N_FFT)

    def __call__(self, pcm: bytes) -> npt.NDArray[np.float32]:
        """The model's input (1 x 80 x 800) for the end of `pcm` (mono s16le at 16 kHz)."""
        import numpy as np

        audio = np.frombuffer(pcm, dtype="<i2")[-_SAMPLES:].astype(np.float32) / 32768.0
        x = np.zeros(_SAMPLES, dtype=np.float32)
        x[_SAMPLES - audio.size :] = audio  # silence in front: the end is what is judged
        x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
        half = _N_FFT // 2
        padded = np.pad(x.astype(np.float64), half, mode="reflect")
        frames = np.lib.stride_tricks.sliding_window_view(padded, _N_FFT)[::_HOP]
        power = np.abs(np.fft.rfft(frames * self._window, axis=-1)) ** 2
        mel = np.log10(np.maximum(power @ self._filters, 1e-10))[:-1]  # Whisper drops the last
        mel = np.maximum(mel, mel.max() - 8.0)
        features: npt.NDArray[np.float32] = ((mel + 4.0) / 4.0).T[None].astype(np.float32)
        return features


class SmartTurnDetector:
    """Smart Turn v3.2 on onnxruntime (implements `TurnDetector`), loaded once per process.

    Example:
        detector = SmartTurnDetector.load()          # blocking, ~0.1 s; once per process
        p = detector.completion_probability(pcm)     # 16 kHz s16le; tens of ms on one core
    """

    _shared: ClassVar[SmartTurnDetector | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, session: Any) -> None:
        """Wrap a loaded ONNX Runtime session of the model (use `SmartTurnDetector.load()`)."""
        self._session = session
        self._features = _Features()

    @classmethod
    def load(cls) -> SmartTurnDetector:
        """The process's detector, loading the model on the first call (blocking).

        Raises:
            VoiceModelError: `pipecat-ai` (the file's package), `onnxruntime` or `numpy` is
                not installed (the message names the pip command), or the file is damaged.
        """
        with cls._lock:
            if cls._shared is None:
                cls._shared = cls(open_session(_model_path(), "Smart Turn"))
            return cls._shared

    @property
    def sample_rate(self) -> int:
        """16000."""
        return SAMPLE_RATE

    def completion_probability(self, pcm: bytes) -> float:
        """The probability that the turn ending `pcm` (mono s16le at 16 kHz) is complete;
        only its last 8 s are judged. Thread-safe."""
        (output,) = self._session.run(None, {"input_features": self._features(pcm)})
        return float(output.reshape(-1)[0])
