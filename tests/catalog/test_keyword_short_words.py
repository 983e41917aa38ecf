"""Keyword search counts every word (issue 17): numbers and two-letter codes score, as whole
words, and a tool holding the whole query outranks one that matches only some of its words."""

from __future__ import annotations

import json
import threading
from typing import Any

import anyio
import pytest

from llmrtc.catalog import LocalBackend, ToolCatalog, ToolInjection
from llmrtc.execution import ToolExecutor
from llmrtc.tools import Tool, ToolCall, ToolDefinition, define_tool

pytestmark = pytest.mark.anyio


def numbered_tools(count: int = 100) -> list[Tool]:
    """`mod0.action_000` ... : "Do thing number N." (the issue's catalog)."""
    return [
        define_tool(
            ToolDefinition(name=f"mod0.action_{n:03d}", description=f"Do thing number {n}."),
            lambda args, ctx: None,
        )
        for n in range(count)
    ]


async def names(catalog: ToolCatalog, query: str, limit: int = 5) -> list[str]:
    return [tool.definition.name for tool in await catalog.search(query, limit=limit)]


async def test_a_number_picks_its_tool_out_of_a_hundred_alike() -> None:
    catalog = ToolCatalog([LocalBackend(numbered_tools())], embedder=None)
    assert (await names(catalog, "thing number 42"))[0] == "mod0.action_042"
    assert (await names(catalog, "thing number 4"))[0] == "mod0.action_004"  # not 040-049
    assert (await names(catalog, "action 42"))[0] == "mod0.action_042"  # 42 finds 042
    assert (await names(catalog, "do thing number 99"))[0] == "mod0.action_099"
    hit = (await catalog.search_scored("thing number 42"))[0]
    assert hit.score > (await catalog.search_scored("thing number 42"))[1].score


async def test_a_number_is_a_whole_word_not_the_start_of_a_longer_one(make_tool: Any) -> None:
    tools = [make_tool(f"t.n{n}", f"Thing number {n}.") for n in (420, 142, 42)]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    assert await names(catalog, "thing number 42", limit=1) == ["t.n42"]
    assert await names(catalog, "42") == ["t.n42"]


async def test_search_tools_finds_the_number_while_the_semantic_index_builds() -> None:
    """Discovery's `search_tools` answers by keyword until the index is ready: that answer
    must already rank `action_042` first, not `action_000` ... `action_004`."""
    np = pytest.importorskip("numpy")  # the index is numpy vectors (the `semantic` extra)
    gate, entered = threading.Event(), threading.Event()

    class HeldEmbedder:
        def embed(self, texts: Any) -> Any:
            entered.set()
            assert gate.wait(30), "the test never let the index build"
            return np.ones((len(texts), 8), dtype=np.float32) / np.sqrt(8)

        def embed_one(self, text: str) -> Any:
            return self.embed([text])[0]

    catalog = ToolCatalog([LocalBackend(numbered_tools())], embedder=HeldEmbedder())
    try:
        injection = await ToolInjection.build(catalog, mode="discovery")
        await anyio.to_thread.run_sync(entered.wait, 30)  # the index is being built
        executor = ToolExecutor(injection.registry, timeout=30)
        with anyio.fail_after(20):
            result = await executor.execute_single(
                ToolCall("c1", "search_tools", json.dumps({"query": "thing number 42"}))
            )
        assert not gate.is_set()  # answered before the index was ready
    finally:
        gate.set()
    assert result.status == "ok"
    assert result.result["tools"][0]["name"] == "mod0.action_042"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("HR", "hr.add_note"),
        ("EU", "tax.vat_rate"),
        ("id", "crm.find_by_id"),
        ("EU VAT", "tax.vat_rate"),
        ("customer id", "crm.find_by_id"),
        ("note for HR", "hr.add_note"),
    ],
)
async def test_two_letter_codes_count_as_whole_words(
    make_tool: Any, query: str, expected: str
) -> None:
    tools = [
        # Decoys first (catalog order breaks ties): each holds the code inside a longer word.
        make_tool("media.play_video", "Play a video for the customer, three times."),
        make_tool("jobs.queue", "Queue a customer's note, neutral VAT."),
        make_tool("hr.add_note", "Add a note to an employee file."),
        make_tool("tax.vat_rate", "The VAT rate of an EU country."),
        make_tool("crm.find_by_id", "Find a customer by their id."),
    ]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    found = await names(catalog, query)
    assert found[0] == expected, found
    if len(query.split()) == 1:
        assert found == [expected]  # `video`, `three`, `queue`, `neutral` do not match


async def test_a_stop_word_in_capitals_is_a_code(make_tool: Any) -> None:
    tools = [
        make_tool("shipping.quote", "Price of shipping a parcel to a country."),
        make_tool("shipping.us_quote", "Price of shipping a parcel to the US."),
    ]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    assert (await names(catalog, "shipping to the US"))[0] == "shipping.us_quote"


async def test_the_whole_query_outranks_a_match_of_some_of_its_words(make_tool: Any) -> None:
    tools = [
        # 'report' in its name (60), 'monthly' nowhere: it matches only some of the words.
        make_tool("reports.export", "Export a document as PDF."),
        make_tool("notify.board", "Send the monthly report to the board."),
    ]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    hits = await catalog.search_scored("monthly report")
    assert [h.tool.definition.name for h in hits] == ["notify.board", "reports.export"]
    assert hits[0].score > hits[1].score
    assert "missing 'monthly'" in hits[1].why
    # Every word matched (not as one phrase) also outranks a partial match.
    hits = await catalog.search_scored("board report")
    assert [h.tool.definition.name for h in hits] == ["notify.board", "reports.export"]
