"""The `llmrtc` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import llmrtc
from llmrtc.tools.loader import load_tools_file


def _cmd_tools(args: argparse.Namespace) -> int:
    try:
        registry = load_tools_file(args.file)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `llmrtc` command."""
    parser = argparse.ArgumentParser(prog="llmrtc", description=llmrtc.__doc__)
    parser.add_argument("--version", action="version", version=f"llmrtc {llmrtc.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    tools = commands.add_parser("tools", help="list the tools a Python file defines")
    tools.add_argument("file", help="a Python file defining tools with @tool or define_tool")
    tools.add_argument("--json", action="store_true", help="print the OpenAI tool schemas")
    tools.set_defaults(handler=_cmd_tools)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `llmrtc` console script."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
