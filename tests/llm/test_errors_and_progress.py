"""A failed request is one line a person can act on; preparing the offline model reports
progress by bytes."""

from __future__ import annotations

import hashlib
import itertools
import socket
from pathlib import Path

import pytest

from llmrtc.llm import LLMError, LLMRequest, OpenAIProvider, RetryPolicy, UserMessage
from llmrtc.llm.local import LocalModelError, LocalModelSpec, ensure_model_file, weights
from llmrtc.packaged_models import Progress
from llmrtc.testing import ErrorReply, ScriptedOpenAIServer


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.anyio
async def test_an_unreachable_api_is_one_line_naming_the_url_and_what_to_do() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    llm = OpenAIProvider("m", base_url=url, api_key="k", retry=RetryPolicy(max_retries=1))
    with pytest.raises(LLMError) as info:
        await llm.complete(LLMRequest([UserMessage("hi")]))
    message = str(info.value)
    assert "\n" not in message
    assert f"cannot connect to {url} (connection refused)" in message
    assert "OPENAI_BASE_URL" in message
    assert info.value.url is not None and info.value.url.startswith(url)


@pytest.mark.anyio
async def test_an_http_error_names_status_url_model_and_advice() -> None:
    async with ScriptedOpenAIServer([ErrorReply(401, "bad key\nsecond line")]) as server:
        llm = OpenAIProvider("m", base_url=server.base_url, api_key="k")
        with pytest.raises(LLMError) as info:
            await llm.complete(LLMRequest([UserMessage("hi")]))
    message = str(info.value)
    assert "\n" not in message and "HTTP 401" in message and server.base_url in message
    assert "OPENAI_API_KEY" in message and info.value.status_code == 401


def _parts(tmp_path: Path, sizes: list[int]) -> tuple[list[Path], bytes]:
    parts, data = [], b""
    for index, size in enumerate(sizes):
        chunk = bytes([index + 1]) * size
        path = tmp_path / f"part{index}.bin"
        path.write_bytes(chunk)
        parts.append(path)
        data += chunk
    return parts, data


def _prepare_model(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    parts: list[Path],
    *,
    size_bytes: int,
    sha256: str,
    progress: Progress | None = None,
) -> Path:
    """`ensure_model_file` for a made-up model `m` whose chunk packages ship `parts`."""
    spec = LocalModelSpec("m", "test-part", len(parts), "1.0", size_bytes, sha256)
    monkeypatch.setitem(weights.LOCAL_MODELS, "test", spec)
    shipped = dict(zip(spec.packages, parts, strict=True))
    monkeypatch.setattr(weights, "_part_path", lambda package, version, spec: shipped[package])
    return ensure_model_file("test", cache_dir=tmp_path / "cache", progress=progress)


def test_joining_reports_increasing_fractions_by_bytes_up_to_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts, data = _parts(tmp_path, [5_000_000, 9_000_000, 3_000_000])  # 17 MB: 3 blocks
    seen: list[tuple[str, float | None]] = []
    target = _prepare_model(
        monkeypatch,
        tmp_path,
        parts,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        progress=lambda stage, fraction: seen.append((stage, fraction)),
    )
    assert target.read_bytes() == data
    fractions = [f for stage, f in seen if stage == "joining model"]
    assert len(fractions) >= 3 and fractions[0] == 0.0 and fractions[-1] == 1.0
    assert all(b > a for a, b in itertools.pairwise(fractions))


def test_a_wrong_digest_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts, data = _parts(tmp_path, [1000])
    target = tmp_path / "cache" / "m.gguf"
    with pytest.raises(LocalModelError, match="sha256"):
        _prepare_model(monkeypatch, tmp_path, parts, size_bytes=len(data), sha256="0" * 64)
    assert list(target.parent.iterdir()) == []
