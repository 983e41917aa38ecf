"""`llmrtc serve TARGET`: the WebRTC voice server with the web client (placeholder)."""

from __future__ import annotations

from typing import Any

__all__ = ["add_serve_parser"]


def add_serve_parser(commands: Any) -> None:
    """Add the `serve` subcommand to `commands` (an argparse subparsers object)."""
