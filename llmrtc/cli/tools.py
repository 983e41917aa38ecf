"""`llmrtc tools FILE`: list the tools a Python file defines (or their OpenAI schemas, or,
with `--search`, rank them for a query as a catalog search would). Only argparse is imported
at load time."""

from __future__ import annotations

import argparse
import json
from typing import Any

from llmrtc.cli.arguments import count
from llmrtc.cli.errors import CLIError

__all__ = ["add_tools_parser"]


def add_tools_parser(commands: Any) -> None:
    """Add the `tools` subcommand to `commands` (an argparse subparsers object)."""
    tools = commands.add_parser(
        "tools",
        help="list the tools a Python file defines",
        description="List the tools a Python file defines (module-level @tool / define_tool).",
    )
    tools.add_argument("file", help="a Python file defining tools with @tool or define_tool")
    tools.add_argument("--json", action="store_true", help="print the OpenAI tool schemas")
    tools.add_argument("--search", metavar="QUERY", help="rank the file's tools for QUERY")
    tools.add_argument("--limit", type=count, default=10, help="results with --search (default 10)")
    tools.set_defaults(handler=tools_command)


def tools_command(args: argparse.Namespace) -> int:
    """Run `llmrtc tools`; the exit status.

    Raises:
        CLIError: the file cannot be loaded (missing, no tools, or what it raised).
    """
    from llmrtc.cli.bot import load_tools
    from llmrtc.tools.loader import load_tools_file

    try:
        registry = load_tools(
            load_tools_file, args.file, failure=f"cannot load the tools file {args.file}"
        )
    except (FileNotFoundError, ValueError) as exc:
        raise CLIError(str(exc)) from exc
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
