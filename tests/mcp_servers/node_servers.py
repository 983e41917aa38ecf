"""The official MCP servers from npm (`@modelcontextprotocol/server-everything` and
`server-filesystem`, pinned in node/package.json, installed by scripts/setup into
node/node_modules). A test that needs one and finds it missing is skipped, loudly; under CI
(`CI=true`) it fails instead, as a missing server there is a broken setup, not a choice."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

NODE = Path(__file__).parent / "node"
BIN = NODE / "node_modules" / ".bin"


def node_server(program: str) -> list[str]:
    """The command that starts `program` (e.g. `mcp-server-everything`) over stdio; skips the
    test when it is not installed (fails it under `CI=true`)."""
    path = BIN / program
    problem = None
    if shutil.which("node") is None:
        problem = "node is not on PATH (Debian: apt-get install nodejs npm)"
    elif not path.exists():
        problem = f"{path} is missing: run scripts/setup (npm install in {NODE})"
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"OFFICIAL MCP SERVER MISSING under CI: {problem}", pytrace=False)
        pytest.skip(f"OFFICIAL MCP SERVER NOT RUN: {problem}")
    return [str(path)]
