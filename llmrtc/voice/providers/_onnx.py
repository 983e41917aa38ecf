"""Opening an offline ONNX model (Silero VAD, Smart Turn) on onnxruntime, one way for all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrtc.voice.providers._whisper_model import INSTALL_HINT, VoiceModelError

__all__ = ["open_session"]


def open_session(path: Path, engine: str) -> Any:
    """An onnxruntime session for the model at `path` on one CPU thread.

    One thread: each call is a short burst (a 32 ms VAD window, one end-of-turn decision),
    calls from many sessions already run side by side, and a thread pool would only add
    wake-ups and contend with the STT's and the LLM's threads.

    Args:
        path: The `.onnx` file.
        engine: Its name in error messages, e.g. `Silero VAD`.

    Raises:
        VoiceModelError: onnxruntime or numpy is missing (checked here, not on first use), or
            the model does not load.
    """
    try:
        import numpy  # noqa: F401  (the engines need it to feed the model)
        import onnxruntime  # type: ignore[import-untyped]
    except ImportError as exc:
        raise VoiceModelError(
            f"{engine} needs onnxruntime and numpy ({exc.name} is missing); install the voice "
            f"extra with: {INSTALL_HINT}"
        ) from None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    try:
        return onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:  # onnxruntime raises its own, non-public exception classes
        raise VoiceModelError(f"cannot load the {engine} model {path}: {exc}") from exc
