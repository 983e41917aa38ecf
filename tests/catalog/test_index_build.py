"""The semantic index builds in the background, owned by no search: a search stops waiting
when cancelled, `search_tools` answers by keyword until it is ready, and overlapping builds of
successive snapshots never corrupt each other nor turn semantic search off."""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
import pytest

from llmrtc.catalog import LocalBackend, ToolCatalog, ToolInjection
from llmrtc.execution import ToolExecutor
from llmrtc.tools import Tool, ToolCall, ToolDefinition, define_tool
from tests._requirements import require

# The index is numpy vectors (the `semantic` extra); the lowest-versions run has no numpy.
require("numpy")
import numpy as np

pytestmark = pytest.mark.anyio


def _tool(name: str) -> Tool:
    return define_tool(ToolDefinition(name=name, description=f"does {name}"), lambda a, c: 1)


class GatedEmbedder:
    """Embeds texts as one-hot vectors; a batch holding a gated word waits for its gate."""

    def __init__(self) -> None:
        self.gates: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}

    def gate(self, word: str) -> threading.Event:
        self.entered[word] = threading.Event()
        self.gates[word] = threading.Event()
        return self.gates[word]

    def embed(self, texts: Any) -> Any:
        for word, gate in list(self.gates.items()):
            if any(word in text for text in texts):
                self.entered[word].set()
                assert gate.wait(30), "the test never opened the gate"
        out = np.zeros((len(texts), 16), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row, sum(map(ord, text)) % 16] = 1
        return out

    def embed_one(self, text: str) -> Any:
        return self.embed([text])[0]


async def test_a_cancelled_search_stops_waiting_for_the_index_and_the_build_goes_on() -> None:
    embedder = GatedEmbedder()
    gate = embedder.gate("files")
    catalog = ToolCatalog([LocalBackend([_tool("files.read")])], embedder=embedder)
    try:
        with anyio.move_on_after(0.3) as scope:  # a barge-in while the index builds
            await catalog.search("read")
        assert scope.cancelled_caught
    finally:
        gate.set()
    hits = await catalog.search_scored("read")  # the same build, finished: no second one
    assert hits and hits[0].similarity is not None


async def test_discovery_starts_the_index_and_search_tools_answers_by_keyword_meanwhile() -> None:
    embedder = GatedEmbedder()
    gate = embedder.gate("crm")
    tools = [_tool("files.read"), *(_tool(f"crm.action_{i}") for i in range(5))]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=embedder)
    try:
        injection = await ToolInjection.build(catalog, mode="discovery")
        # Started by build, before any search: the embedder is already busy.
        await anyio.to_thread.run_sync(embedder.entered["crm"].wait, 30)
        executor = ToolExecutor(injection.registry, timeout=30)
        with anyio.fail_after(20):  # would wait for the gate (30 s) without the fix
            result = await executor.execute_single(
                ToolCall("c1", "search_tools", json.dumps({"query": "files.read"}))
            )
        assert result.status == "ok"
        assert [t["name"] for t in result.result["tools"]] == ["files.read"]
    finally:
        gate.set()
    hits = await catalog.search_scored("read")
    assert hits[0].similarity is not None


async def test_overlapping_index_builds_keep_semantic_search_on() -> None:
    embedder = GatedEmbedder()
    tools = [_tool("a.a"), _tool("b.b")]

    class Mutable:
        name = "mutable"

        async def list(self) -> list[Tool]:
            return list(tools)

        async def get(self, tool_id: str) -> Tool | None:
            return None

    catalog = ToolCatalog([Mutable()], embedder=embedder)
    await catalog.search("a")  # first index: a, b
    first, second = embedder.gate("c.c"), embedder.gate("d.d")
    async with anyio.create_task_group() as tg:
        tools[:] = [_tool("a.a"), _tool("c.c")]
        catalog.invalidate()
        tg.start_soon(catalog.search, "a")  # embeds c (held)
        await anyio.to_thread.run_sync(embedder.entered["c.c"].wait, 30)
        tools[:] = [_tool("b.b"), _tool("d.d")]
        catalog.invalidate()
        tg.start_soon(catalog.search, "b")  # reuses b, embeds d (held)
        await anyio.to_thread.run_sync(embedder.entered["d.d"].wait, 30)
        first.set()  # the older build finishes first
        await anyio.sleep(0.2)
        second.set()
    hits = await catalog.search_scored("b")
    assert hits and hits[0].similarity is not None  # semantic search still on


class CountingEmbedder(GatedEmbedder):
    """Counts the texts it embeds (queries aside)."""

    def __init__(self) -> None:
        super().__init__()
        self.embedded: list[str] = []

    def embed(self, texts: Any) -> Any:
        self.embedded.extend(texts)
        return super().embed(texts)

    def embed_one(self, text: str) -> Any:
        return GatedEmbedder.embed(self, [text])[0]


class Down:
    name = "remote"

    async def list(self) -> list[Tool]:
        raise ConnectionError("down")

    async def get(self, tool_id: str) -> Tool | None:
        return None


def _index_threads() -> int:
    return sum(t.name.startswith("llmrtc-catalog-index") for t in threading.enumerate())


async def test_retries_of_a_failing_backend_reuse_the_index_build() -> None:
    """Each retry makes a new snapshot with the same tools: it must share the build (built
    or in flight), not start a full one that the next retry supersedes again."""
    embedder = CountingEmbedder()
    gate = embedder.gate("crm")
    tools = [_tool(f"crm.t{i}") for i in range(40)]
    catalog = ToolCatalog([LocalBackend(tools), Down()], embedder=embedder, backend_retry=0.05)
    try:
        await catalog.start_indexing()
        for _ in range(5):  # retries while the build is held
            await anyio.sleep(0.08)
            await catalog.search_scored("t1", wait=False)
            assert _index_threads() <= 1
    finally:
        gate.set()
    with anyio.fail_after(20):
        while not (await catalog.search_scored("t1", wait=False))[0].similarity:
            await anyio.sleep(0.05)
    assert len(embedder.embedded) == len(set(embedder.embedded)) == 40  # each text once


async def test_a_finished_build_is_reused_without_a_search_reading_it() -> None:
    embedder = CountingEmbedder()
    tools = [_tool(f"crm.t{i}") for i in range(10)]
    backend = LocalBackend(tools, name="local")
    catalog = ToolCatalog([backend], embedder=embedder)
    await catalog.start_indexing()  # no search ever reads this index
    with anyio.fail_after(20):
        while _index_threads():
            await anyio.sleep(0.02)
    catalog.add_backend(LocalBackend([_tool("files.read")], name="more"))
    await catalog.search("read")
    assert len(embedder.embedded) == 11  # the ten already embedded were reused


async def test_a_superseded_build_stops_at_its_next_chunk() -> None:
    embedder = CountingEmbedder()
    gate = embedder.gate("crm")
    tools = [_tool(f"crm.t{i}") for i in range(200)]
    catalog = ToolCatalog([LocalBackend(tools, name="local")], embedder=embedder)
    try:
        await catalog.start_indexing()
        await anyio.to_thread.run_sync(embedder.entered["crm"].wait, 30)
        catalog.remove_backend("local")
        catalog.add_backend(LocalBackend([_tool("files.read")], name="other"))
        await catalog.list()  # the new snapshot replaces the one being embedded
    finally:
        gate.set()
    with anyio.fail_after(20):
        while _index_threads():
            await anyio.sleep(0.02)
    assert len([t for t in embedder.embedded if "crm" in t]) < 200  # one chunk, not all
