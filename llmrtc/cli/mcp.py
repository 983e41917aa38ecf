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

from llmrtc.cli.arguments import seconds
from llmrtc.cli.errors import CLIError

if TYPE_CHECKING:
    from llmrtc.catalog import ModelPool
    from llmrtc.execution import ToolExecutor
    from llmrtc.tools import ToolCallResult, ToolRegistry

__all__ = ["add_mcp_parser", "build_mcp_server", "mcp_command", "serve_mcp_stdio"]

DESCRIPTION = """\
Serve the tools a Python file defines to any MCP client, over stdio.

Each tool is offered under its wire name (crm.lookup as crm__lookup) with its JSON Schema;
calls run through llmrtc's ToolExecutor (validation, --timeout, one result per call).
Configure an MCP client with the command, e.g.:

  {"command": "llmrtc", "args": ["mcp", "/path/to/tools.py"]}

stdout carries the protocol: log lines, and anything the tools file prints, go to stderr.
LLM-backed tools (define_llm_tool, llmrtc.catalog.UTIL_TOOLS) run on the default model:
OPENAI_API_KEY / OPENAI_BASE_URL (and LLMRTC_MODEL) as for chat, else the offline model,
opened when the server starts.
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
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="seconds a call may run unless the tool sets its own (default 30)",
    )
    parser.set_defaults(handler=mcp_command)


def mcp_command(args: argparse.Namespace) -> int:
    """Run `llmrtc mcp` with parsed `args` until the client leaves; the exit status.

    Raises:
        CLIError: the mcp package is missing, or the tools file cannot be loaded.
    """
    import anyio

    from llmrtc.cli.bot import load_tools
    from llmrtc.tools.loader import load_tools_file

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise CLIError("llmrtc mcp needs the mcp package: pip install 'llmrtc[mcp]'") from None
    with _protocol_stdout() as protocol:
        try:
            registry = load_tools(load_tools_file, args.tools, failure="cannot load the tools file")
        except CLIError:
            raise
        except Exception as exc:  # whatever else loading raised: its message, on one line
            raise CLIError(str(exc)) from exc
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

    LLM-backed tools in `registry` run on `default_model_pool()`, opened in the background as
    serving starts and closed when it ends.

    Args:
        registry: The tools to offer.
        name: The server name MCP clients see.
        timeout: Seconds a call may run unless the tool sets its own.
        stdout: The stream the protocol is written to (an `anyio` async text file); None:
            the SDK's handling of this process's stdout.
    """
    from contextlib import AsyncExitStack

    import anyio
    from mcp.server.stdio import stdio_server

    from llmrtc.cli.models import default_model_pool, has_llm_tools
    from llmrtc.execution import ToolExecutor

    async with AsyncExitStack() as stack:
        models = None
        if has_llm_tools(registry):
            models = await stack.enter_async_context(default_model_pool())
        executor = ToolExecutor(registry, timeout=timeout, models=models)
        server = build_mcp_server(executor, name)
        read_stream, write_stream = await stack.enter_async_context(stdio_server(stdout=stdout))
        async with anyio.create_task_group() as group:
            if models is not None:
                # Open the model now, not in the first call: the offline model takes longer
                # to load than a call may run, and a call's timeout would cancel each attempt.
                group.start_soon(_warm_up, models)
            await server.run(read_stream, write_stream, server.create_initialization_options())
            group.cancel_scope.cancel()


async def _warm_up(models: ModelPool) -> None:
    try:
        await models.provider("default")
    except Exception as exc:  # the calls report it (and try again); say why here, once
        print(f"llmrtc mcp: the default model cannot be opened: {exc}", file=sys.stderr)


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
