"""`ModelPool`: factories of every kind (sync, async, async context manager), opened lazily
once per provider (also under concurrent first use), closed in reverse order, providers
without credentials marked unavailable, and construction errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from llmrtc.catalog.llm_tools.model_pool import (
    MissingCredentialsError,
    ModelPool,
    PromptProvider,
    ToolPrompt,
    parse_model_id,
)
from llmrtc.llm import PromptCompleter
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio


class Closable(ScriptedLLM):
    def __init__(self, log: list[str], name: str) -> None:
        super().__init__(["hi"])
        self.log = log
        self.name = name

    async def aclose(self) -> None:
        self.log.append(f"close {self.name}")


async def test_sync_async_and_context_manager_factories_open_once_and_close_in_reverse() -> None:
    log: list[str] = []
    made: list[str] = []

    def sync_factory() -> Closable:
        made.append("sync")
        return Closable(log, "sync")

    async def async_factory() -> Closable:
        made.append("async")
        await anyio.sleep(0.05)  # slow: concurrent first calls must still open it once
        return Closable(log, "async")

    @asynccontextmanager
    async def managed() -> AsyncIterator[ScriptedLLM]:
        made.append("managed")
        log.append("enter managed")
        yield ScriptedLLM(["hi"])
        log.append("exit managed")

    pool = ModelPool({"s": sync_factory, "a": async_factory, "m": managed})
    async with pool:
        first = await pool.provider("s")
        assert await pool.provider("s") is first
        got: list[Any] = []
        async with anyio.create_task_group() as group:
            for _ in range(5):
                group.start_soon(lambda: _append(got, pool.provider("a")))
        assert len({id(p) for p in got}) == 1
        managed_provider = await pool.provider("m")
        assert isinstance(managed_provider, PromptProvider)
        assert log == ["enter managed"]
    assert made == ["sync", "async", "managed"]
    assert log == ["enter managed", "exit managed", "close async", "close sync"]
    with pytest.raises(RuntimeError, match="closed"):
        await pool.provider("s")


async def _append(into: list[Any], awaitable: Any) -> None:
    into.append(await awaitable)


async def test_missing_credentials_mark_a_provider_unavailable_for_good() -> None:
    calls = []

    def factory() -> Any:
        calls.append(1)
        raise MissingCredentialsError("X_API_KEY")

    async with ModelPool({"x": factory}) as pool:
        assert pool.unavailable("x") is None  # not known until it is tried
        for _ in range(2):
            with pytest.raises(MissingCredentialsError, match="missing X_API_KEY"):
                await pool.provider("x")
        assert calls == [1]
        reason = pool.unavailable("x")
        assert reason is not None and reason.keys == ("X_API_KEY",)
        assert "no factory for provider 'y'" in str(pool.unavailable("y"))


async def test_a_factory_that_fails_otherwise_is_tried_again() -> None:
    attempts = []

    def flaky() -> ScriptedLLM:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("server still starting")
        return ScriptedLLM([])

    async with ModelPool({"f": flaky}) as pool:
        with pytest.raises(ConnectionError):
            await pool.provider("f")
        assert pool.unavailable("f") is None
        assert isinstance(await pool.provider("f"), ScriptedLLM)


async def test_a_provider_without_complete_prompt_is_refused_and_prompt_completer_wraps_it() -> (
    None
):
    class StreamOnly:
        def __init__(self) -> None:
            self.inner = ScriptedLLM(["wrapped answer"])

        async def stream(self, request: Any, *, abort_signal: Any = None) -> Any:
            async for event in self.inner.stream(request, abort_signal=abort_signal):
                yield event

        async def complete(self, request: Any, *, abort_signal: Any = None) -> Any:
            return await self.inner.complete(request, abort_signal=abort_signal)

    async with ModelPool({"raw": StreamOnly, "ok": lambda: PromptCompleter(StreamOnly())}) as pool:
        with pytest.raises(TypeError, match="PromptCompleter"):
            await pool.provider("raw")
        wrapped = await pool.provider("ok")
        answer = await wrapped.complete_prompt(ToolPrompt(system="s", user="u", model="m"))
    assert answer.text == "wrapped answer"


def test_construction_errors() -> None:
    with pytest.raises(ValueError, match="provider/model"):
        ModelPool({"a": ScriptedLLM}, default_model="no-slash")
    with pytest.raises(ValueError, match="no factory for provider 'b'"):
        ModelPool({"a": ScriptedLLM}, default_model="b/x")
    with pytest.raises(ValueError, match=r"compat\['t:x'\]"):
        ModelPool({"a": ScriptedLLM}, compat={"t:x": "a/m"})
    with pytest.raises(ValueError, match="callable"):
        ModelPool({"a": "not a factory"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="without '/'"):
        ModelPool({"a/b": ScriptedLLM})
    assert parse_model_id("local/qwen/2.5") == ("local", "qwen/2.5")
