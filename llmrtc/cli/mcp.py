"""`llmrtc mcp TOOLS.py`: serve a tools file's tools to any MCP client over stdio.

The other direction of `MCPBackend`: Claude Desktop, an IDE or another agent lists the
file's tools and calls them; every call runs through a `ToolExecutor` (argument validation,
timeouts, one result per call, internal errors never shown), and an MCP client's
`notifications/cancelled` cancels the call's handler.

Module imports stay light (argparse only): `llmrtc --help` does not load the SDK.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from llmrtc.execution import ToolExecutor
    from llmrtc.tools import ToolCallResult, ToolRegistry

__all__ = ["add_mcp_parser", "build_mcp_server", "serve_mcp_stdio"]

DESCRIPTION = """\
Serve the tools a Python file defines to any MCP client, over stdio.

Each tool is offered under its wire name (crm.lookup as crm__lookup) with its JSON Schema;
calls run through llmrtc's ToolExecutor (validation, --timeout, one result per call).
Configure an MCP client with the command, e.g.:

  {"command": "llmrtc", "args": ["mcp", "/path/to/tools.py"]}

stdout carries the protocol: log lines, and anything the tools file prints, go to stderr.
"""


def add_mcp_parser(commands: Any) -> None:
    """Add the `mcp` subcommand to `commands` (an argparse subparsers object)."""
    parser = commands.add_parser(
        "mcp",
        help="serve a tools file's tools to MCP clients over stdio",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("tools", metavar="TOOLS.py", help="a Python file defining tools")
    parser.add_argument(
        "--name", help="the server name MCP clients see (default: the file's name without .py)"
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="seconds a call may run unless the tool sets its own (default 30)",
    )
    parser.set_defaults(handler=_cmd_mcp)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be seconds > 0, got {text!r}")
    return value


def _cmd_mcp(args: argparse.Namespace) -> int:
    import anyio

    from llmrtc.cli.errors import describe_tools_file_error
    from llmrtc.tools.loader import IMPORT_NOTE, load_tools_file

    try:
        import mcp  # noqa: F401
    except ImportError:
        print("error: llmrtc mcp needs the mcp package: pip install 'llmrtc[mcp]'", file=sys.stderr)
        return 1
    with _protocol_stdout() as protocol:
        try:
            registry = load_tools_file(args.tools)
        except Exception as exc:  # the file's own errors, shown as the tools command shows them
            notes = getattr(exc, "__notes__", ())
            if any(str(note).startswith(IMPORT_NOTE) for note in notes):
                detail = describe_tools_file_error(exc).replace("\n", "\n  ")
                print(f"error: cannot load the tools file:\n  {detail}", file=sys.stderr)
            else:
                print(f"error: {exc}", file=sys.stderr)
            return 1
        name = args.name or Path(args.tools).stem
        try:
            anyio.run(_serve, registry, name, args.timeout, protocol)
        except KeyboardInterrupt:
            return 130
    return 0


@contextmanager
def _protocol_stdout() -> Iterator[BinaryIO]:
    """Keep the real stdout for the protocol alone: yield it (a duplicate of fd 1) while fd 1
    and `sys.stdout` point at stderr, so a tools file's print() (at import, in a handler, in
    a child process) lands on stderr instead of corrupting the JSON-RPC stream."""
    sys.stdout.flush()
    saved_fd = os.dup(1)  # to restore fd 1; the protocol gets its own copy (the SDK closes it)
    protocol = os.fdopen(os.dup(1), "wb", buffering=0)
    saved_stdout = sys.stdout
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        yield protocol
    finally:
        sys.stdout = saved_stdout
        os.dup2(saved_fd, 1)
        os.close(saved_fd)
        if not protocol.closed:
            protocol.close()


async def _serve(registry: ToolRegistry, name: str, timeout: float, protocol: BinaryIO) -> None:
    import anyio

    out = anyio.wrap_file(io.TextIOWrapper(protocol, encoding="utf-8", write_through=True))
    await serve_mcp_stdio(registry, name, timeout, stdout=out)


async def serve_mcp_stdio(
    registry: ToolRegistry, name: str, timeout: float = 30.0, *, stdout: Any = None
) -> None:
    """Serve `registry`'s tools over this process's stdin/stdout until the client leaves.

    Args:
        registry: The tools to offer.
        name: The server name MCP clients see.
        timeout: Seconds a call may run unless the tool sets its own.
        stdout: The stream the protocol is written to (an `anyio` async text file); None:
            the SDK's handling of this process's stdout.
    """
    from mcp.server.stdio import stdio_server

    from llmrtc.execution import ToolExecutor

    server = build_mcp_server(ToolExecutor(registry, timeout=timeout), name)
    async with stdio_server(stdout=stdout) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def build_mcp_server(executor: ToolExecutor, name: str) -> Any:
    """An MCP low-level `Server` offering `executor.registry`'s tools (by wire name) and
    running their calls through `executor`.

    Run it over any transport the SDK has (`server.run(read, write, options)`, or its
    streamable HTTP app).
    """
    from mcp import types
    from mcp.server.lowlevel import Server

    from llmrtc import __version__
    from llmrtc.tools import ToolCall

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=definition.wire_name,
                    title=definition.name,
                    description=definition.description or None,
                    input_schema=dict(definition.parameters),  # type: ignore[arg-type]
                )
                for definition in executor.registry.definitions()
            ]
        )

    async def call_tool(ctx: Any, params: Any) -> Any:
        call = ToolCall(
            call_id=str(ctx.request_id) if ctx.request_id is not None else "mcp",
            name=params.name,
            arguments=dict(params.arguments or {}),
        )
        return _to_mcp_result(await executor.execute_single(call))

    return Server(name, version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)


def _to_mcp_result(result: ToolCallResult) -> Any:
    """A `ToolCallResult` as an MCP `CallToolResult`: the JSON the model would get as text;
    a dict result also as `structuredContent`; a failed call as `isError` with the
    executor's message (internal errors are already a generic sentence there)."""
    from mcp import types

    if not result.success:
        text = result.error or f"the call ended with status {result.status}"
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=True
        )
    content = result.to_content()
    structured = json.loads(content) if isinstance(result.result, dict) else None
    text = result.result if isinstance(result.result, str) else content
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )
