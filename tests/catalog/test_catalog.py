"""ToolCatalog: backends, versioned lookup, the one-rebuild cache, failing backends, views."""

from __future__ import annotations

import logging
import re
from typing import Any

import anyio
import pytest

from llmrtc.catalog.backend import LocalBackend, ToolBackend
from llmrtc.catalog.catalog import ToolCatalog
from llmrtc.telemetry.events import ErrorEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.tools import Tool

pytestmark = pytest.mark.anyio


class SlowBackend:
    """Lists its tools only when the test lets it; counts how often it was asked."""

    def __init__(self, tools: list[Tool], name: str = "slow") -> None:
        self.name = name
        self.tools = tools
        self.calls = 0
        self.release = anyio.Event()
        self.started = anyio.Event()

    async def list(self) -> list[Tool]:
        self.calls += 1
        self.started.set()
        await self.release.wait()
        return list(self.tools)

    async def get(self, tool_id: str) -> Tool | None:
        return next((t for t in self.tools if t.definition.tool_id == tool_id), None)


class BrokenBackend:
    """A backend whose list() raises (a remote catalog that is down)."""

    name = "broken"

    def __init__(self) -> None:
        self.calls = 0

    async def list(self) -> list[Tool]:
        self.calls += 1
        raise ConnectionError("catalog service unreachable")

    async def get(self, tool_id: str) -> Tool | None:
        raise ConnectionError("catalog service unreachable")


def ids(tools: list[Tool]) -> list[str]:
    return [t.definition.tool_id for t in tools]


async def test_local_backend_is_a_tool_backend(make_tool: Any) -> None:
    lookup = make_tool("crm.lookup")
    backend = LocalBackend([lookup], name="mine")
    assert isinstance(backend, ToolBackend)
    assert backend.name == "mine"
    assert await backend.list() == [lookup]
    assert await backend.get("crm:lookup@1.0.0") is lookup
    assert await backend.get("crm:lookup@2.0.0") is None
    assert await backend.get("not an id") is None


def test_local_backend_refuses_two_tools_with_one_id(make_tool: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("two tools have the id 'crm:lookup@1.0.0'")):
        LocalBackend([make_tool("crm.lookup"), make_tool("crm.lookup")])


async def test_get_by_exact_id_name_dotted_wire_or_bare(make_tool: Any) -> None:
    tools = [
        make_tool("crm.lookup", version="1.2.0"),
        make_tool("crm.lookup", version="1.10.0"),
        make_tool("crm.lookup", version="1.9.3"),
        make_tool("ping", version="0.1.0"),
        make_tool("ping", version="0.2.0"),
    ]
    catalog = ToolCatalog([LocalBackend(tools)])
    exact = await catalog.get("crm:lookup@1.2.0")
    assert exact is not None and exact.definition.version == "1.2.0"
    for name in ("crm:lookup", "crm.lookup", "crm__lookup"):
        found = await catalog.get(name)
        assert found is not None and found.definition.version == "1.10.0", name
    bare = await catalog.get("ping")
    assert bare is not None and bare.definition.version == "0.2.0"
    assert await catalog.get("crm:lookup@3.0.0") is None
    assert await catalog.get("crm:missing") is None
    assert await catalog.get("lookup") is None  # a bare name means a tool without namespace
    assert await catalog.get("crm:lookup@1.2") is None  # malformed: None, like unknown
    assert (await catalog.get("crm__lookup@1.9.3")) is tools[2]


async def test_a_name_with_a_double_underscore_is_tried_as_it_is_first(make_tool: Any) -> None:
    literal, dotted = make_tool("my__tool"), make_tool("my.tool")
    catalog = ToolCatalog([LocalBackend([literal, dotted])])
    assert await catalog.get("my__tool") is literal
    assert await catalog.get("my.tool") is dotted
    assert await catalog.get("my__tool@1.0.0") is literal


async def test_list_find_and_namespaces(make_tool: Any) -> None:
    tools = [
        make_tool("crm.lookup", tags=["customers"]),
        make_tool("crm.update", tags=["customers", "writes"]),
        make_tool("billing.refund", tags=["writes"]),
        make_tool("ping"),
    ]
    catalog = ToolCatalog([LocalBackend(tools)])
    assert await catalog.list() == tools
    assert ids(await catalog.find(namespace="crm")) == ["crm:lookup@1.0.0", "crm:update@1.0.0"]
    assert ids(await catalog.find(tag="writes")) == ["crm:update@1.0.0", "billing:refund@1.0.0"]
    assert ids(await catalog.find(namespace="crm", tag="writes")) == ["crm:update@1.0.0"]
    assert ids(await catalog.find(prefix="crm:look")) == ["crm:lookup@1.0.0"]
    assert ids(await catalog.find(prefix="billing.")) == ["billing:refund@1.0.0"]
    assert await catalog.find(namespace="nope") == []
    assert await catalog.namespaces() == ["billing", "crm"]


async def test_first_added_backend_wins_an_id_conflict_logged_once(
    make_tool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = make_tool("crm.lookup", "first"), make_tool("crm.lookup", "second")
    catalog = ToolCatalog([LocalBackend([first], name="a"), LocalBackend([second], name="b")])
    with caplog.at_level(logging.WARNING, logger="llmrtc.catalog"):
        assert await catalog.get("crm:lookup@1.0.0") is first
        catalog.invalidate()
        assert await catalog.list() == [first]
    conflicts = [r for r in caplog.records if "offered by backends" in r.getMessage()]
    assert len(conflicts) == 1
    assert "'a' wins" in conflicts[0].getMessage()
    # Removing the winner lets the other backend's tool through.
    assert catalog.remove_backend("a") is True
    assert await catalog.list() == [second]


async def test_backend_names_are_unique_and_removal_reports_presence(make_tool: Any) -> None:
    catalog = ToolCatalog([LocalBackend([make_tool("a")], name="local")])
    with pytest.raises(ValueError, match="a backend named 'local' is already in the catalog"):
        catalog.add_backend(LocalBackend([], name="local"))
    with pytest.raises(ValueError, match="already in the catalog"):
        ToolCatalog([LocalBackend([], name="x"), LocalBackend([], name="x")])
    with pytest.raises(TypeError, match="add_backend\\(\\) takes a ToolBackend"):
        catalog.add_backend(object())  # type: ignore[arg-type]
    assert catalog.remove_backend("missing") is False
    assert [b.name for b in catalog.backends] == ["local"]


async def test_adding_a_backend_shows_its_tools_at_once(make_tool: Any) -> None:
    catalog = ToolCatalog([LocalBackend([make_tool("a")], name="one")])
    assert ids(await catalog.list()) == ["a@1.0.0"]
    catalog.add_backend(LocalBackend([make_tool("b")], name="two"))
    assert ids(await catalog.list()) == ["a@1.0.0", "b@1.0.0"]


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_many_concurrent_callers_wait_on_one_rebuild(
    make_tool: Any, anyio_backend: str
) -> None:
    slow = SlowBackend([make_tool("crm.lookup"), make_tool("crm.update")])
    catalog = ToolCatalog([slow])
    results: list[Any] = []

    async def caller(i: int) -> None:
        if i % 2:
            results.append(await catalog.get("crm.lookup"))
        else:
            results.append(ids(await catalog.list()))

    async with anyio.create_task_group() as tg:
        for i in range(40):
            tg.start_soon(caller, i)
        await slow.started.wait()
        await anyio.sleep(0.05)  # every caller is now waiting on the rebuild
        assert results == []
        slow.release.set()
    assert slow.calls == 1
    assert len(results) == 40
    assert all(r is slow.tools[0] for r in results if isinstance(r, Tool))
    assert all(
        r == ["crm:lookup@1.0.0", "crm:update@1.0.0"] for r in results if isinstance(r, list)
    )


async def test_a_get_during_a_rebuild_sees_a_complete_cache(make_tool: Any) -> None:
    fast = LocalBackend([make_tool("a.one")], name="fast")
    slow = SlowBackend([make_tool("b.two")])
    slow.release.set()
    catalog = ToolCatalog([fast, slow])
    assert ids(await catalog.list()) == ["a:one@1.0.0", "b:two@1.0.0"]
    # Rebuild with a new slow listing; readers during it never see only the fast backend's half.
    slow.release, slow.started = anyio.Event(), anyio.Event()
    slow.tools = [make_tool("b.two"), make_tool("b.three")]
    catalog.invalidate()
    seen: list[list[str]] = []

    async def reader() -> None:
        seen.append(ids(await catalog.list()))

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        await slow.started.wait()
        for _ in range(10):
            tg.start_soon(reader)
        await anyio.sleep(0.02)
        slow.release.set()
    assert slow.calls == 2
    assert seen == [["a:one@1.0.0", "b:two@1.0.0", "b:three@1.0.0"]] * 11


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_cancelled_rebuilder_hands_the_rebuild_to_the_next_caller(
    make_tool: Any, anyio_backend: str
) -> None:
    slow = SlowBackend([make_tool("a")])
    catalog = ToolCatalog([slow])
    with anyio.move_on_after(0.05):
        await catalog.list()
    assert slow.calls == 1
    slow.release.set()
    assert ids(await catalog.list()) == ["a@1.0.0"]
    assert slow.calls == 2


async def test_invalidate_makes_the_next_access_rebuild(make_tool: Any) -> None:
    slow = SlowBackend([make_tool("a")])
    slow.release.set()
    catalog = ToolCatalog([slow])
    await catalog.list()
    await catalog.get("a")
    assert slow.calls == 1
    slow.tools = [make_tool("a"), make_tool("b")]
    assert ids(await catalog.list()) == ["a@1.0.0"]  # cached until invalidated
    catalog.invalidate()
    assert ids(await catalog.list()) == ["a@1.0.0", "b@1.0.0"]
    assert slow.calls == 2


class RecordingHooks(Hooks):
    def __init__(self) -> None:
        self.errors: list[ErrorEvent] = []

    def on_error(self, event: ErrorEvent) -> None:
        self.errors.append(event)


async def test_a_failing_backend_is_reported_and_skipped(
    make_tool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    broken = BrokenBackend()
    hooks = RecordingHooks()
    good = make_tool("crm.lookup")
    catalog = ToolCatalog([broken, LocalBackend([good])], hooks=hooks)
    with caplog.at_level(logging.WARNING, logger="llmrtc.catalog"):
        assert await catalog.list() == [good]
        assert await catalog.get("crm.lookup") is good
        assert await catalog.search("lookup", mode="keyword") == [good]
    assert broken.calls == 1
    assert "'broken' failed to list its tools" in caplog.text
    assert len(hooks.errors) == 1
    assert isinstance(hooks.errors[0].error, ConnectionError)
    assert hooks.errors[0].where == "catalog backend 'broken'"
    catalog.invalidate()  # the next rebuild asks the failed backend again
    await catalog.list()
    assert broken.calls == 2


async def test_a_backend_listing_junk_is_skipped_item_by_item(make_tool: Any) -> None:
    good = make_tool("a")

    class Junk:
        name = "junk"

        async def list(self) -> list[Any]:
            return ["not a tool", good]

        async def get(self, tool_id: str) -> Tool | None:
            return None

    class NotAList(Junk):
        name = "not-a-list"

        async def list(self) -> Any:
            return None

    catalog = ToolCatalog([NotAList(), Junk()])
    assert await catalog.list() == [good]


async def test_restricted_views_hide_refused_tools_everywhere(make_tool: Any) -> None:
    tools = [
        make_tool("billing.refund", "Give money back", version="1.0.0", tags=["money"]),
        make_tool("billing.refund", "Give money back", version="2.0.0", tags=["money"]),
        make_tool("billing.invoice", "Show an invoice", tags=["money"]),
        make_tool("crm.lookup", "Find a customer"),
    ]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    no_v2 = catalog.restricted(lambda t: t.definition.tool_id != "billing:refund@2.0.0")
    no_billing = no_v2.restricted(lambda t: t.definition.namespace != "billing")

    assert (await catalog.get("billing.refund")) is tools[1]
    assert (await no_v2.get("billing.refund")) is tools[0]  # the highest version it may see
    assert await no_v2.get("billing:refund@2.0.0") is None
    assert await no_v2.search("refund") == [tools[0]]
    assert tools[1] not in await no_v2.list()

    # A view of a view applies both rules.
    assert await no_billing.list() == [tools[3]]
    assert await no_billing.get("billing:refund@1.0.0") is None
    assert await no_billing.find(tag="money") == []
    assert await no_billing.search("money") == []
    assert await no_billing.namespaces() == ["crm"]
    assert not no_billing.allows(tools[0]) and no_billing.allows(tools[3])
    # Views share the backends and cache with the catalog they come from.
    catalog.add_backend(LocalBackend([make_tool("crm.update")], name="more"))
    assert ids(await no_billing.list()) == ["crm:lookup@1.0.0", "crm:update@1.0.0"]
