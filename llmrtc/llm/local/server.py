"""`LocalModelServer`: llama.cpp's OpenAI-compatible server (``xllamacpp``) for a local Qwen
model, running in native threads of this process on 127.0.0.1."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

from llmrtc.llm.local.metadata import chat_template_for_tools
from llmrtc.llm.local.weights import (
    DEFAULT_MODEL_SIZE,
    LocalModelError,
    Progress,
    ensure_model_file,
    spec_for,
)

if TYPE_CHECKING:
    from typing import Self

__all__ = ["LocalModelServer"]

logger = logging.getLogger(__name__)


_CACHE_RAM_MIB: Final = 256
"""Host-RAM prompt cache: holds ~2 full 4k-token KV caches of the 1.5B model, enough to keep an
idle conversation's prefix while another request uses the slot."""


class LocalModelServer:
    """llama.cpp's OpenAI-compatible server for a local Qwen model, on 127.0.0.1 in this process.

    The server runs in native threads (the GIL is released while generating), listens on a free
    loopback port and requires a random API key, so only this process can use it. Point any
    OpenAI client at :attr:`base_url` with :attr:`api_key` and ``model=`` :attr:`model`; use
    ``max_retries=0`` because an HTTP 500 from this server (e.g. a call to an undeclared tool) is
    deterministic at temperature 0 and retrying it only adds latency.

    Use it as an async context manager, which loads the model in a worker thread and sends a
    1-token warm-up request before returning::

        async with LocalModelServer() as server:
            client = openai.AsyncOpenAI(
                base_url=server.base_url, api_key=server.api_key, max_retries=0
            )

    or call the blocking :meth:`start` and :meth:`stop` yourself. A stopped server can be started
    again.

    Args:
        size: Model size label, a key of :data:`LOCAL_MODELS`.
        cache_dir: Directory for the joined GGUF file (see :func:`ensure_model_file`).
        n_ctx: Context length in tokens per request slot. The model's own 32k would take 2.65 GB
            of KV cache; 2048-4096 is plenty for a voice turn with a few tools.
        n_threads: CPU threads for prompt processing and generation; defaults to
            ``os.cpu_count()``.
        n_parallel: Number of request slots that can generate at the same time (each gets
            ``n_ctx`` tokens).
    """

    def __init__(
        self,
        size: str = DEFAULT_MODEL_SIZE,
        *,
        cache_dir: str | Path | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_parallel: int = 1,
        progress: Progress | None = None,
    ) -> None:
        self.spec: Final = spec_for(size)
        if n_ctx < 256:
            raise ValueError(f"n_ctx must be at least 256 tokens, got {n_ctx}")
        if n_threads is not None and n_threads < 1:
            raise ValueError(f"n_threads must be at least 1, got {n_threads}")
        if n_parallel < 1:
            raise ValueError(f"n_parallel must be at least 1, got {n_parallel}")
        self.size: Final = size
        self.cache_dir: Final = cache_dir
        self.n_ctx: Final = n_ctx
        self.n_threads: Final = n_threads if n_threads is not None else (os.cpu_count() or 1)
        self.n_parallel: Final = n_parallel
        self.progress = progress
        """Called with ("joining model" | "verifying model", fraction), ("loading model",
        None) and ("warming up", None) while the server is prepared, from the thread doing it."""
        self.model: Final[str] = self.spec.name
        """Model name to send as ``model=`` (the server also accepts any other name)."""
        self.base_url: str | None = None
        """``http://127.0.0.1:PORT/v1`` while running, else None."""
        self.api_key: str | None = None
        """Bearer token the server requires while running (new on every start), else None."""
        self.load_seconds: float | None = None
        """Wall time the last :meth:`start` took to load the model and open the port."""
        self._server: Any = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        """Whether the server is started and not yet stopped."""
        return self._server is not None

    def start(self) -> None:
        """Join the model file if needed, load it and start listening (blocking, 3-5 s).

        Raises:
            RuntimeError: The server is already running.
            LocalModelError: The model file cannot be prepared or the server does not start.
            ImportError: ``xllamacpp`` is not installed (``pip install 'llmrtc[local]'``).
        """
        with self._lock:
            if self._server is not None:
                raise RuntimeError("LocalModelServer is already running; call stop() first")
            model_path = ensure_model_file(
                self.size, cache_dir=self.cache_dir, progress=self.progress
            )
            self._report("loading model", None)
            template = chat_template_for_tools(model_path)
            try:
                # Imported by name: xllamacpp ships no type information.
                xllamacpp: Any = importlib.import_module("xllamacpp")
            except ImportError as exc:
                raise ImportError(
                    "the local model needs xllamacpp: pip install 'llmrtc[local]' "
                    "(and libgomp1 on Debian/Ubuntu)"
                ) from exc

            params = xllamacpp.CommonParams()
            params.model.path = str(model_path)
            params.model_alias = {self.model}
            params.chat_template = template
            params.use_jinja = True
            params.hostnames = ["127.0.0.1"]
            params.port = 0
            params.n_ctx = self.n_ctx * self.n_parallel  # llama.cpp splits n_ctx across slots
            params.n_parallel = self.n_parallel
            params.cpuparams.n_threads = self.n_threads
            params.cpuparams_batch.n_threads = self.n_threads
            params.cache_ram_mib = _CACHE_RAM_MIB
            api_key = secrets.token_urlsafe(24)
            params.api_keys = [api_key]
            params.ui = False
            # llama.cpp logs to stderr on its own; keep it to errors unless we are debugging.
            params.verbosity = 3 if logger.isEnabledFor(logging.DEBUG) else 1

            started = time.perf_counter()
            try:
                server = xllamacpp.Server(params)
            except Exception as exc:
                raise LocalModelError(f"llama.cpp server failed to start: {exc}") from exc
            address = str(server.listening_address).rstrip("/")
            if not address.startswith("http"):
                address = f"http://{address}"
            self._server = server
            self.base_url = f"{address}/v1"
            self.api_key = api_key
            self.load_seconds = time.perf_counter() - started
            logger.info(
                "local model %s listening on %s (loaded in %.1f s)",
                self.model,
                self.base_url,
                self.load_seconds,
            )

    def stop(self) -> None:
        """Stop the server and free the model; does nothing if it is not running.

        xllamacpp has no stop call: dropping the last reference to its ``Server`` shuts the HTTP
        server down and frees the weights. This waits (up to 5 s) until the port refuses
        connections, so a following :meth:`start` never races the old listener.
        """
        with self._lock:
            server, self._server = self._server, None
            base_url = self.base_url
            self.base_url = None
            self.api_key = None
            if server is None:
                return
            del server  # the last reference: the destructor joins the server's threads
            if base_url is not None:
                _wait_port_closed(base_url)
            logger.info("local model %s stopped", self.model)

    async def warm_up(self) -> None:
        """Send a 1-token chat request so the first real request does not pay first-use costs.

        Raises:
            RuntimeError: The server is not running.
        """
        import openai

        if self.base_url is None or self.api_key is None:
            raise RuntimeError("LocalModelServer is not running; call start() first")
        self._report("warming up", None)
        async with openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key, max_retries=0
        ) as client:
            await client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": "Hi"}],
                max_tokens=1,
                temperature=0,
            )

    def _report(self, stage: str, fraction: float | None) -> None:
        if self.progress is not None:
            self.progress(stage, fraction)

    async def __aenter__(self) -> Self:
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.start)
        try:
            await self.warm_up()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.stop)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import anyio.to_thread

        # Shielded: the server must be freed even when the surrounding scope is cancelled.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop)

    def __repr__(self) -> str:
        state = self.base_url if self.base_url is not None else "stopped"
        return f"<LocalModelServer {self.model} {state}>"


def _wait_port_closed(base_url: str, *, timeout: float = 5.0) -> None:
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port
    if port is None:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.2):
            time.sleep(0.05)
            continue
        return
    logger.warning("port %s:%s still accepts connections %.0f s after stop", host, port, timeout)
