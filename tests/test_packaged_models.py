"""`llmrtc.packaged_models`: the mechanics every model shipped inside a PyPI package shares —
found without importing the package, joined atomically, hashed once per process."""

from __future__ import annotations

import hashlib
import importlib.metadata
import itertools
import os
from pathlib import Path

import pytest

from llmrtc import packaged_models
from llmrtc.packaged_models import (
    PackagedModelError,
    PackageNotInstalledError,
    PackageVersionError,
    cache_dir_for,
    copy_verified,
    distribution_files,
    join_parts,
    missing_distributions,
    package_dir,
    verified_once,
)


def test_files_of_an_installed_distribution_are_found_without_importing_it() -> None:
    files = distribution_files("pytest")
    on_disk = [path for name, path in files.items() if name.name == "__init__.py"]
    assert on_disk and all(path.is_file() for path in on_disk)
    version = importlib.metadata.version("pytest")
    assert distribution_files("pytest", version=version) == files


def test_a_missing_or_other_version_distribution_is_a_typed_error() -> None:
    with pytest.raises(PackageNotInstalledError) as missing:
        distribution_files("llmrtc-no-such-model-package")
    assert missing.value.package == "llmrtc-no-such-model-package"
    assert isinstance(missing.value, PackagedModelError)
    with pytest.raises(PackageVersionError) as other:
        distribution_files("pytest", version="0.0.0")
    assert (other.value.package, other.value.expected) == ("pytest", "0.0.0")
    assert other.value.installed == importlib.metadata.version("pytest")
    assert missing_distributions(["pytest", "llmrtc-no-such-model-package"]) == [
        "llmrtc-no-such-model-package"
    ]


def test_a_package_directory_is_found_without_running_its_code() -> None:
    assert package_dir("llmrtc_no_such_model_package") is None
    found = package_dir("pytest")
    assert found is not None and (found / "__init__.py").is_file()


def test_the_cache_directory_follows_the_parameter_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LLMRTC_CACHE_DIR", raising=False)
    assert cache_dir_for(None) == Path.home() / ".cache" / "llmrtc" / "models"
    monkeypatch.setenv("LLMRTC_CACHE_DIR", str(tmp_path))
    assert cache_dir_for(None) == tmp_path / "models"
    assert cache_dir_for(tmp_path / "mine") == tmp_path / "mine"


def _parts(tmp_path: Path, sizes: list[int]) -> tuple[list[Path], bytes]:
    parts, data = [], b""
    for index, size in enumerate(sizes):
        chunk = bytes([index + 1]) * size
        path = tmp_path / f"part{index}.bin"
        path.write_bytes(chunk)
        parts.append(path)
        data += chunk
    return parts, data


def test_parts_are_joined_in_order_with_progress_and_count_as_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packaged_models, "_VERIFIED", {})
    parts, data = _parts(tmp_path, [5_000_000, 9_000_000, 3_000_000])
    digest = hashlib.sha256(data).hexdigest()
    seen: list[tuple[str, float | None]] = []
    target = join_parts(
        parts,
        tmp_path / "cache" / "m.bin",
        size_bytes=len(data),
        sha256=digest,
        progress=lambda stage, fraction: seen.append((stage, fraction)),
    )
    assert target.read_bytes() == data
    fractions = [f for stage, f in seen if stage == "joining model"]
    assert fractions[0] == 0.0 and fractions[-1] == 1.0
    assert all(b > a for a, b in itertools.pairwise(fractions))
    seen.clear()  # joined here: not hashed again in this process
    assert verified_once(target, size=len(data), sha256=digest, progress=lambda *a: seen.append(a))
    assert seen == []


def test_a_wrong_join_leaves_no_file_and_names_the_fix(tmp_path: Path) -> None:
    parts, data = _parts(tmp_path, [1000])
    target = tmp_path / "cache" / "m.bin"
    with pytest.raises(PackagedModelError, match=r"has 1000 bytes, expected 999; do this"):
        join_parts(parts, target, size_bytes=999, sha256="0" * 64, fix_hint="; do this")
    with pytest.raises(PackagedModelError, match="sha256"):
        join_parts(parts, target, size_bytes=len(data), sha256="0" * 64)
    assert list(target.parent.iterdir()) == []


def test_a_file_is_hashed_once_per_process_until_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packaged_models, "_VERIFIED", {})
    path = tmp_path / "model.bin"
    path.write_bytes(b"weights")
    digest = hashlib.sha256(b"weights").hexdigest()
    stages: list[object] = []

    def progress(stage: str, fraction: float | None) -> None:
        stages.append(stage)

    assert verified_once(path, size=7, sha256=digest, progress=progress)
    assert stages and set(stages) == {"verifying model"}
    stages.clear()
    assert verified_once(path, size=7, sha256=digest, progress=progress)
    assert stages == []
    before = path.stat().st_mtime_ns
    path.write_bytes(b"wEights")  # same size, new content and mtime: hashed again, rejected
    os.utime(path, ns=(before + 10**9, before + 10**9))  # even on coarse-mtime file systems
    assert not verified_once(path, size=7, sha256=digest, progress=progress)
    assert not verified_once(path, size=8, sha256=digest)
    assert not verified_once(tmp_path / "absent.bin", size=7, sha256=digest)


def test_a_small_file_is_copied_only_when_its_digest_matches(tmp_path: Path) -> None:
    source = tmp_path / "config.json"
    source.write_text("{}")
    target = tmp_path / "cache" / "config.json"
    target.parent.mkdir()
    with pytest.raises(PackagedModelError, match=r"config\.json from the weights packages"):
        copy_verified(source, target, sha256="0" * 64)
    assert list(target.parent.iterdir()) == []
    copy_verified(source, target, sha256=hashlib.sha256(b"{}").hexdigest())
    assert target.read_text() == "{}"
