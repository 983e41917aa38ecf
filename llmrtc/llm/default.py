"""`open_default_provider`: a model without configuration — the environment's, else offline."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from llmrtc.llm.openai_provider import OpenAIProvider

if TYPE_CHECKING:
    from llmrtc.llm.local.server import LocalModelServer

__all__ = ["DEFAULT_OPENAI_MODEL", "local_provider", "open_default_provider"]

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
"""The model used with `OPENAI_API_KEY` when `LLMRTC_MODEL` names none."""


def local_provider(server: LocalModelServer) -> OpenAIProvider:
    """An `OpenAIProvider` for a running `LocalModelServer` (see
    `llmrtc.llm.local.profile.local_provider`)."""
    from llmrtc.llm.local.profile import local_provider as make

    return make(server)


@asynccontextmanager
async def open_default_provider(
    *,
    local_size: str | None = None,
    cache_dir: str | Path | None = None,
    progress: Callable[[str, float | None], None] | None = None,
) -> AsyncIterator[OpenAIProvider]:
    """Open the model llmrtc uses when nothing is configured, and close what it started.

    With `OPENAI_API_KEY` or `OPENAI_BASE_URL` in the environment it talks to that API
    (`LLMRTC_MODEL` names the model, default `gpt-4o-mini`). Otherwise it starts the offline
    default: Qwen2.5-Coder-1.5B-Instruct served on 127.0.0.1 in this process (needs
    `pip install "llmrtc[local]"`; `LLMRTC_MODEL=0.5b` picks the faster, weaker 0.5B model).

    Example:
        async with llmrtc.open_default_provider() as llm:
            runner = TurnRunner(llm, executor, system_prompt="...")

    Args:
        local_size: Overrides the local model size (`"1.5b"` or `"0.5b"`).
        cache_dir: Where the local model file is assembled (default `~/.cache/llmrtc/models`).
        progress: Called as `progress(stage, fraction)` while the offline model is prepared
            (the first use joins ~1 GB and loads it: seconds of nothing to see otherwise):
            stages "joining model" and "verifying model" with the fraction of bytes done,
            "loading model" and "warming up" with None. Called from the thread doing the
            work; never called for a remote API.
    """
    api_key = os.environ.get("OPENAI_API_KEY")
    base_url = os.environ.get("OPENAI_BASE_URL")
    model = os.environ.get("LLMRTC_MODEL")
    if api_key or base_url:
        yield OpenAIProvider(model or DEFAULT_OPENAI_MODEL, base_url=base_url, api_key=api_key)
        return
    from llmrtc.llm.local import LOCAL_MODELS, LocalModelServer

    size = local_size or (model if model in LOCAL_MODELS else None) or "1.5b"
    async with LocalModelServer(size, cache_dir=cache_dir, progress=progress) as server:
        yield local_provider(server)
