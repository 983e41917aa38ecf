"""`llmrtc mcp TOOLS.py`: serve llmrtc tools to MCP clients over stdio (placeholder)."""

from __future__ import annotations

from typing import Any

__all__ = ["add_mcp_parser"]


def add_mcp_parser(commands: Any) -> None:
    """Add the `mcp` subcommand to `commands` (an argparse subparsers object)."""
