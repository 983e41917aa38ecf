"""A real MCP server (the `mcp` SDK's `MCPServer`) the MCP tests start over stdio or HTTP.

Run: `python tools_server.py` (stdio) or `python tools_server.py --http PORT`. Set
`MCP_TEST_MARKS` to a directory: `slow` writes `cancelled` there when the client cancels it,
and `started` when it starts.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("test-tools", version="2.1")


def _mark(name: str) -> None:
    marks = os.environ.get("MCP_TEST_MARKS")
    if marks:
        (Path(marks) / name).write_text(name)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(name="text.shout")
def shout(text: str) -> str:
    """Upper-case a text (a dotted MCP name: the catalog sanitises it)."""
    return text.upper()


@server.tool()
async def slow(seconds: float) -> str:
    """Wait `seconds`, then answer; records a cancellation."""
    _mark("started")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _mark("cancelled")
        raise
    return "done"


@server.tool()
def refuse(reason: str) -> str:
    """Fail with a message written for the model."""
    raise ToolError(f"refused: {reason}")


@server.tool()
def crash() -> str:
    """Kill the server process in the middle of the call."""
    _mark("crashed")
    os._exit(3)


@server.tool()
def env_var(name: str) -> str:
    """The value of one of this process's environment variables ('' when unset)."""
    return os.environ.get(name, "")


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of one header of the HTTP request carrying this call ('' when absent)."""
    return (ctx.headers or {}).get(name.lower(), "")


@server.tool()
def exit_soon() -> str:
    """Answer, then end the server process 0.3 s later (a server dying between calls)."""
    threading.Timer(0.3, os._exit, args=(4,)).start()
    return "bye"


@server.tool()
async def grow(ctx: Context) -> str:
    """Add a tool `fresh` and tell the client the tool list changed."""
    server.add_tool(lambda: "fresh", name="fresh", description="A tool added at run time.")
    await ctx.notify_tools_changed()  # a 2026-07-28 client listening
    with contextlib.suppress(Exception):  # a 2026-07-28 session has no unasked notifications
        await ctx.session.send_tool_list_changed()  # a handshake-era client
    return "grown"


@server.tool()
async def chatty(steps: int, seconds: float, message_chars: int, ctx: Context) -> str:
    """Report progress `steps` times over `seconds`, each with a message this long."""
    for step in range(1, steps + 1):
        await anyio.sleep(seconds / steps)
        await ctx.report_progress(step, steps, f"step {step} " + "m" * message_chars)
    return "talked"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
