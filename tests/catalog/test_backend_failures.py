"""A backend whose `list()` hangs is bounded by `backend_timeout`; a failed backend is asked
again `backend_retry` seconds later, in the background of the next access."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc.catalog import LocalBackend, ToolCatalog
from llmrtc.telemetry.events import ErrorEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools import Tool

pytestmark = pytest.mark.anyio


class Errors(Hooks):
    def __init__(self) -> None:
        self.errors: list[ErrorEvent] = []

    def on_error(self, event: ErrorEvent) -> None:
        self.errors.append(event)


class Hanging:
    def __init__(self, name: str) -> None:
        self.name = name

    async def list(self) -> list[Tool]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def get(self, tool_id: str) -> Tool | None:
        return None


class Flaky:
    """Fails its first `list()`, then lists `tools`."""

    name = "flaky"

    def __init__(self, tools: list[Tool]) -> None:
        self.tools = tools
        self.calls = 0

    async def list(self) -> list[Tool]:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("down")
        return self.tools

    async def get(self, tool_id: str) -> Tool | None:
        return None


async def test_a_hanging_backend_is_bounded_reported_and_skipped(make_tool: Any) -> None:
    good = make_tool("crm.lookup")
    hooks = Errors()
    catalog = ToolCatalog(
        [LocalBackend([good]), Hanging("remote"), Hanging("r2")],
        hooks=hooks,
        embedder=None,
        backend_timeout=0.2,
    )
    with anyio.fail_after(10):  # two hanging backends, listed at once: one timeout
        assert await catalog.get("crm.lookup") is good
    assert sorted(e.where for e in hooks.errors) == [
        "catalog backend 'r2'",
        "catalog backend 'remote'",
    ]
    assert all(isinstance(e.error, TimeoutError) for e in hooks.errors)
    assert "backend_timeout=0.2 s" in str(hooks.errors[0].error)


async def test_a_failed_backend_is_retried_after_the_delay(make_tool: Any) -> None:
    flaky = Flaky([make_tool("crm.lookup")])
    catalog = ToolCatalog([flaky], embedder=None, backend_retry=0.3)
    assert await catalog.list() == []
    assert await catalog.list() == []  # not yet: a failing backend is not hammered
    assert flaky.calls == 1
    await anyio.sleep(0.5)
    assert await catalog.list() == []  # served at once; the retry runs in the background
    with anyio.fail_after(5):
        while not await catalog.list():
            await anyio.sleep(0.01)
    assert [t.name for t in await catalog.list()] == ["crm.lookup"]
    assert flaky.calls == 2
    await catalog.list()
    assert flaky.calls == 2  # all backends answered: the cache stays


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_retry_never_stalls_a_lookup_for_the_backend_timeout(make_tool: Any) -> None:
    """A live turn's search must not wait `backend_timeout` each `backend_retry` for a
    backend that was already down: the retry runs in the background."""
    good = make_tool("crm.lookup")
    hanging = Hanging("remote")
    catalog = ToolCatalog(
        [LocalBackend([good]), hanging], embedder=None, backend_timeout=1.0, backend_retry=0.1
    )
    assert await catalog.get("crm.lookup") is good  # the first build waits the timeout
    for _ in range(3):
        await anyio.sleep(0.15)
        with anyio.fail_after(0.5):  # generous, and still half the timeout
            assert await catalog.get("crm.lookup") is good
            assert [t.name for t in await catalog.search("lookup")] == ["crm.lookup"]
    catalog.invalidate()  # an invalidation still rebuilds before answering
    with anyio.fail_after(5):
        assert await catalog.get("crm.lookup") is good


@pytest.mark.parametrize("options", [{"backend_timeout": 0}, {"backend_retry": -1}])
def test_timings_must_be_positive(options: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be seconds > 0"):
        ToolCatalog(embedder=None, **options)
