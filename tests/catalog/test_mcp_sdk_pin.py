"""Pins the `mcp` SDK internal that `llmrtc.catalog.mcp.connection.Connection.alive()` reads
(review R12): the client session's `_dispatcher._closed`, False while the transport is open
and True once a stdio server exited. The SDK has no public signal for this; if a new SDK
renames or drops it, `alive()` silently answers True (a dead idle server is then noticed only
by the next call failing), so this test fails loudly instead. Also: `alive()` on a connection
whose client already left its context (`auto`: the listen stream saw the server go and the
session ended) says False instead of raising the SDK's RuntimeError."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from tests._requirements import require

require("mcp")

sys.path.insert(0, str(Path(__file__).parents[1] / "mcp_servers"))
from mcp_helpers import stdio_command

from llmrtc import ToolCall, ToolExecutor, ToolRegistry
from llmrtc.catalog.mcp import MCPBackend

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_alive_reads_the_sdk_dispatcher_closed_flag(protocol: str) -> None:
    async with MCPBackend("tt", command=stdio_command(), protocol=protocol) as backend:
        tools = await backend.list()
        connection = backend._connection
        assert connection is not None
        dispatcher = connection.client.session._dispatcher
        assert type(dispatcher._closed) is bool, "mcp SDK changed: see Connection.alive()"
        assert dispatcher._closed is False and connection.alive()

        executor = ToolExecutor(ToolRegistry(tools), timeout=60.0)
        bye = await executor.execute_single(ToolCall("c1", "mcp_tt.exit_soon", {}))
        assert bye.status == "ok"  # the server process exits 0.3 s after answering
        with anyio.fail_after(30):
            while not dispatcher._closed:
                await anyio.sleep(0.05)
        assert not connection.alive()
    # After the session ended (the client left its context) alive() answers, not raises.
    assert not connection.alive()


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_cancel_reasons_wrap_the_sdk_dispatchers_notify(protocol: str) -> None:
    """`_send_cancel_reasons` replaces the session dispatcher's `notify` (the SDK sends its
    courtesy `notifications/cancelled` through `self.notify`, worded "caller cancelled").
    If a new SDK moves that, the abort's reason silently stops reaching servers: fail here.
    (That the reason arrives: test_mcp_official_servers.py, on server-everything's wire.)"""
    import inspect

    from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

    source = inspect.getsource(JSONRPCDispatcher._cancel_outbound)
    assert "self.notify(" in source and '"notifications/cancelled"' in source
    assert '"caller cancelled"' in inspect.getsource(JSONRPCDispatcher.send_raw_request)
    async with MCPBackend("tt", command=stdio_command(), protocol=protocol) as backend:
        connection = backend._connection
        assert connection is not None
        dispatcher = connection.client.session._dispatcher
        assert isinstance(dispatcher, JSONRPCDispatcher), "mcp SDK changed: see cancel_reason()"
        assert dispatcher.notify.__name__ == "notify_with_reason"
