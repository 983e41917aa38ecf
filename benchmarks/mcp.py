"""Benchmark of MCP tool calls: per-call cost over stdio and streamable HTTP, against a local
handler, in the same run.

Run:  .venv/bin/python benchmarks/mcp.py [--quick]
(full run ~1 min, --quick ~15 s). It is a measurement, not a test: it exits 0 unless it
crashes. Needs the `mcp` extra.

What it measures: sequential `await executor.execute_single(call)` of an `add(a, b)` tool,
one call at a time (a voice turn's usual case), on these sides:

  local            the same `add` as an llmrtc `@tool` in this process (the baseline);
  sdk stdio        the raw SDK `Client.call_tool` to an SDK `MCPServer` over stdio, after
                   one `list_tools()` as the backend does (no llmrtc: the SDK's own floor);
  backend stdio    `MCPBackend` (stdio) to that server, through `ToolExecutor`;
  sdk http         the raw SDK client to the same server over streamable HTTP on 127.0.0.1;
  backend http     `MCPBackend` (url) to it, through `ToolExecutor`;
  llmrtc mcp       `MCPBackend` (stdio) to `llmrtc mcp TOOLS.py` serving the local `add`
                   (both directions of this library end to end).

Sides are interleaved round by round (A, B, C, ... A, B, ...) so machine noise hits them
alike; a round times `--calls` back-to-back calls, its per-call figure is round time /
calls; p50 and p90 are across rounds. "x local" is p50(side) / p50(local); "+us" is
p50(side) - p50(local), the MCP overhead per call. "llmrtc over sdk" is backend p50 -
sdk p50: what MCPBackend and the executor add on top of the SDK.

Each server is a separate process on the same (shared, 2-core) machine, so the figures
include a process hop and the other process's scheduling: compare within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

# This file is named mcp.py: run as a script, its folder comes first on sys.path and would
# shadow the `mcp` package. Drop the folder (nothing else from it is imported).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import anyio  # noqa: E402

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool  # noqa: E402
from llmrtc.catalog.mcp import MCPBackend  # noqa: E402

SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench", version="1.0.0")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


if __name__ == "__main__":
    if len(sys.argv) == 3:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
'''

TOOLS = '''
from llmrtc import tool


@tool
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b
'''


@tool
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def http_server(script: Path) -> Iterator[str]:
    """The SDK server over streamable HTTP (started here, killed by its PID)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(script), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the HTTP server exited with {process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the HTTP server did not listen within 60 s")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=10)


Side = Callable[[int], Awaitable[None]]


def executor_side(executor: ToolExecutor, name: str) -> Side:
    async def run(calls: int) -> None:
        for i in range(calls):
            result = await executor.execute_single(ToolCall(str(i), name, {"a": i, "b": 1}))
            if result.status != "ok":
                raise RuntimeError(f"{name}: {result.status}: {result.error}")

    return run


def sdk_side(client: object) -> Side:
    async def run(calls: int) -> None:
        for i in range(calls):
            result = await client.call_tool("add", {"a": i, "b": 1})  # type: ignore[attr-defined]
            if result.is_error:
                raise RuntimeError("sdk call failed")

    return run


async def measure(sides: dict[str, Side], rounds: int, calls: int) -> dict[str, list[float]]:
    for side in sides.values():  # warm every path (imports, first requests, caches)
        await side(5)
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, side in sides.items():
            started = time.perf_counter()
            await side(calls)
            samples[name].append((time.perf_counter() - started) / calls * 1e6)
    return samples


def report(samples: dict[str, list[float]]) -> None:
    base = statistics.median(samples["local"])
    print(f"{'side':<16}{'p50 us':>10}{'p90 us':>10}{'x local':>10}{'+us':>10}")
    for name, values in samples.items():
        p50 = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else p50
        print(f"{name:<16}{p50:>10.0f}{p90:>10.0f}{p50 / base:>10.1f}{p50 - base:>10.0f}")
    for transport in ("stdio", "http"):
        ours = statistics.median(samples[f"backend {transport}"])
        floor = statistics.median(samples[f"sdk {transport}"])
        print(f"llmrtc over sdk ({transport}): {ours - floor:+.0f} us per call")


async def main(quick: bool) -> None:
    from mcp import Client, StdioServerParameters

    rounds, calls = (8, 10) if quick else (30, 20)
    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, {platform.machine()}")
    print(f"{rounds} rounds x {calls} sequential calls per side, interleaved\n")
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "bench_server.py"
        script.write_text(textwrap.dedent(SERVER))
        tools_file = Path(folder) / "bench_tools.py"
        tools_file.write_text(textwrap.dedent(TOOLS))
        stdio = StdioServerParameters(command=sys.executable, args=[str(script)])
        with http_server(script) as url:
            async with (
                Client(stdio) as sdk_stdio,
                Client(url) as sdk_http,
                MCPBackend("stdio", command=[sys.executable, str(script)]) as b_stdio,
                MCPBackend("http", url=url) as b_http,
                MCPBackend(
                    "ours", command=[sys.executable, "-m", "llmrtc.cli", "mcp", str(tools_file)]
                ) as b_ours,
            ):
                # Listed like the backends list: the SDK then checks each result against the
                # tool's output schema on both sides.
                await sdk_stdio.list_tools()
                await sdk_http.list_tools()
                sides: dict[str, Side] = {
                    "local": executor_side(ToolExecutor(ToolRegistry([add])), "add"),
                    "sdk stdio": sdk_side(sdk_stdio),
                    "backend stdio": executor_side(
                        ToolExecutor(ToolRegistry(await b_stdio.list())), "mcp_stdio.add"
                    ),
                    "sdk http": sdk_side(sdk_http),
                    "backend http": executor_side(
                        ToolExecutor(ToolRegistry(await b_http.list())), "mcp_http.add"
                    ),
                    "llmrtc mcp": executor_side(
                        ToolExecutor(ToolRegistry(await b_ours.list())), "mcp_ours.add"
                    ),
                }
                samples = await measure(sides, rounds, calls)
    report(samples)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (~15 s)")
    anyio.run(main, parser.parse_args().quick)
