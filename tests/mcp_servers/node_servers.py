"""The official MCP servers from npm (`@modelcontextprotocol/server-everything` and
`server-filesystem`, pinned in node/package.json, installed by scripts/setup into
node/node_modules). A test that needs one and finds it missing is skipped; under `CI=true` it
fails instead, as a missing server there is a broken setup, not a choice (the `mcp_node`
requirement of tests/_requirements.py)."""

from __future__ import annotations

from pathlib import Path

from tests._requirements import require

NODE = Path(__file__).parent / "node"
BIN = NODE / "node_modules" / ".bin"


def node_server(program: str) -> list[str]:
    """The command that starts `program` (e.g. `mcp-server-everything`) over stdio; skips the
    test when it is not installed (fails it under `CI=true`)."""
    require("mcp_node")
    return [str(BIN / program)]
