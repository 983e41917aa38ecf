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
from tests._requirements import require

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
    require("numpy")  # the index is numpy vectors (the `semantic` extra)
    import numpy as np

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


# -- review findings (issue 17 items 1-2, second round) --------------------------------------


async def test_a_long_query_compiles_each_word_once_and_scores_only_its_first_words(
    make_tool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 two-letter codes over 200 tools: a matcher per word per search (not per tool: that
    froze the event loop for seconds), and only the first MAX_QUERY_WORDS words count."""
    import re

    tools = [make_tool(f"t.tool_{n:03d}", f"Customer record {n} of zone ab.") for n in range(200)]
    tools.append(make_tool("t.last_word", "Handles code zz only."))
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    codes = [a + b for a in "abcdefghijklmnopqrstuvwxy" for b in "abcdefghijklm"][:300]
    query = "customer " + " ".join(codes) + " zz"
    await catalog.search("warm", mode="keyword")
    compiled: list[str] = []
    real = re.compile

    def counting(pattern: Any, flags: int = 0) -> Any:
        compiled.append(pattern)
        return real(pattern, flags)

    monkeypatch.setattr(re, "compile", counting)
    found = await names(catalog, query, limit=3)
    # At most a matcher per scored word and one for the phrase (MAX_QUERY_WORDS is 32); the
    # reviewed code compiled 300 words x 200 tools.
    assert len(compiled) <= 33, len(compiled)
    assert found[0].startswith("t.tool_")  # `customer` and `ab` count
    assert "t.last_word" not in await names(catalog, query, limit=300)  # `zz` is word 302


async def test_search_tools_refuses_a_query_longer_than_its_limit() -> None:
    from llmrtc.catalog.meta_tools import MAX_QUERY_CHARS

    catalog = ToolCatalog([LocalBackend(numbered_tools(10))], embedder=None)
    injection = await ToolInjection.build(catalog, mode="discovery")
    executor = ToolExecutor(injection.registry, timeout=30)
    ok = await executor.execute_single(
        ToolCall("c1", "search_tools", json.dumps({"query": "thing number 4"}))
    )
    assert ok.status == "ok" and ok.result["tools"][0]["name"] == "mod0.action_004"
    long = await executor.execute_single(
        ToolCall("c2", "search_tools", json.dumps({"query": "thing " * MAX_QUERY_CHARS}))
    )
    assert long.status == "invalid_arguments"
    assert "query" in str(long.error) and "too long" in str(long.error)


ARGUMENT_VALUE_TOOLS = [
    ("orders.lookup", "Find an order by its number and show its status."),
    ("weather.forecast", "Weather forecast for a city."),
    ("crm.call_contact", "Phone a contact from the address book."),
    ("billing.pay_invoice", "Pay an invoice."),
    ("billing.list_invoices", "List the invoices of the last 30 days."),
]


async def test_a_word_no_tool_holds_is_not_a_missing_word(make_tool: Any) -> None:
    """Argument values (a city, a name, an order number) describe no tool: they cannot tell
    tools apart, so they do not sink the tool the other words name (seed 000's mean)."""
    tools = [make_tool(name, description) for name, description in ARGUMENT_VALUE_TOOLS]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    hits = await catalog.search_scored("weather in Paris", mode="keyword")
    assert [(h.tool.definition.name, h.score) for h in hits] == [("weather.forecast", 40.0)]
    assert "missing" not in hits[0].why
    hits = await catalog.search_scored("where is order 1234", mode="keyword")
    assert [(h.tool.definition.name, h.score) for h in hits] == [("orders.lookup", 40.0)]
    top = (await catalog.search_scored("call contact John Smith", mode="keyword"))[0]
    assert top.tool.definition.name == "crm.call_contact" and top.score > 20


async def test_an_order_number_does_not_outrank_the_order_tool(make_tool: Any, minilm: Any) -> None:
    """Where is order 42, among a hundred numbered tools: `action_042` shares only the
    number; `orders.lookup` is what the words ask for, by keyword and in the hybrid blend."""
    tools = numbered_tools()
    tools += [make_tool(name, description) for name, description in ARGUMENT_VALUE_TOOLS]
    keyword = ToolCatalog([LocalBackend(tools)], embedder=None)
    assert (await names(keyword, "where is order 42"))[0] == "orders.lookup"
    assert (await names(keyword, "thing number 42"))[0] == "mod0.action_042"
    hybrid = ToolCatalog([LocalBackend(tools)], embedder=minilm)
    assert (await names(hybrid, "where is order 42"))[0] == "orders.lookup"
    assert (await names(hybrid, "thing number 42"))[0] == "mod0.action_042"
    assert (await names(hybrid, "invoice 30"))[0] == "billing.pay_invoice"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("REFUND MY ORDER", "billing.refund_order"),
        ("CAN YOU REFUND THE ORDER", "billing.refund_order"),
        ("look up order", "orders.lookup"),
        ("ok refund order", "billing.refund_order"),
    ],
)
async def test_capitals_and_fillers_are_not_codes(
    make_tool: Any, query: str, expected: str
) -> None:
    tools = [
        make_tool("calendar.set_up_meeting", "Set up a meeting."),
        make_tool("account.my_profile", "Show my profile and my order history."),
        make_tool("weather.forecast", "Weather forecast for a city."),
        make_tool("orders.lookup", "Find an order by its number."),
        make_tool("billing.refund_order", "Refund a customer's order."),
    ]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    hits = await catalog.search_scored(query, mode="keyword")
    assert hits[0].tool.definition.name == expected
    assert hits[0].score >= 70  # every content word held: no missing-word penalty
    assert "weather.forecast" not in [h.tool.definition.name for h in hits]  # `THE`


async def test_leading_zeros_are_ignored_both_ways(make_tool: Any) -> None:
    tools = [make_tool("rooms.book_a", "Book room 42."), make_tool("rooms.book_b", "Book room 7.")]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    assert await names(catalog, "042") == ["rooms.book_a"]
    assert (await names(catalog, "room 042"))[0] == "rooms.book_a"
    assert (await names(catalog, "book room 007"))[0] == "rooms.book_b"
    assert await names(catalog, "0042") == ["rooms.book_a"]
    assert await names(catalog, "420") == []
