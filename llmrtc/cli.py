"""The `llmrtc` command line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

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


def _cmd_validate(args: argparse.Namespace) -> int:
    from llmrtc.playbook import (
        Playbook,
        PlaybookError,
        load_playbook_tools,
        to_mermaid,
        validate_playbook,
    )
    from llmrtc.playbook.loading import load_playbook

    try:
        playbook: Playbook = load_playbook(args.playbook)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except PlaybookError as exc:
        print(exc, file=sys.stderr)
        return 1
    registry = load_playbook_tools(playbook) if playbook.tools_file else None
    findings = validate_playbook(playbook, registry)
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


def _cmd_chat(args: argparse.Namespace) -> int:
    import anyio

    from llmrtc.playbook import PlaybookError, load_playbook, load_playbook_tools

    playbook = None
    registry = None
    try:
        if args.playbook is not None:
            playbook = load_playbook(args.playbook)
            if playbook.tools_file and args.tools is None:
                registry = load_playbook_tools(playbook)
        if args.tools is not None:
            registry = load_tools_file(args.tools)
    except (FileNotFoundError, ValueError) as exc:  # PlaybookError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        anyio.run(_chat, args, registry, playbook)
    except KeyboardInterrupt:
        print()
    except PlaybookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


async def _chat(args: argparse.Namespace, registry: Any, playbook: Any) -> None:
    import anyio

    from llmrtc import (
        PlaybookOrchestrator,
        StageChanged,
        TextDelta,
        ToolCallFinished,
        ToolCallStarted,
        ToolExecutor,
        ToolRegistry,
        TurnCompleted,
        TurnRunner,
        open_default_provider,
    )

    interactive = sys.stdin.isatty()
    say = sys.stdout.write
    async with open_default_provider() as llm:
        tools = registry if registry is not None else ToolRegistry()
        runner: Any
        if playbook is not None:
            runner = PlaybookOrchestrator(playbook, llm, tools)
            say(f"[playbook {playbook.id}: stage {runner.engine.current_stage.id}]\n")
        else:
            runner = TurnRunner(llm, ToolExecutor(tools), system_prompt=args.system)
        if interactive:
            say(f"llmrtc chat with {llm.model} ({len(tools)} tools). /quit ends.\n")
        while True:
            if interactive:
                say("you> ")
                sys.stdout.flush()
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            if not line:
                break
            text = line.strip()
            if text in ("/quit", "/exit"):
                break
            if not text:
                continue
            say("bot> ")
            async for event in runner.run_turn(text):
                if isinstance(event, TextDelta):
                    say(event.text)
                elif isinstance(event, ToolCallStarted):
                    arguments = event.call.arguments
                    shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
                    say(f"\n  -> {event.call.name}({shown})")
                elif isinstance(event, ToolCallFinished):
                    result = event.result
                    outcome = result.to_content() if result.success else result.error
                    say(
                        f"\n  <- {result.tool_name} {result.status} "
                        f"{result.duration_ms:.0f} ms: {outcome}\nbot> "
                    )
                elif isinstance(event, StageChanged):
                    say(
                        f"\n  [stage {event.from_stage} -> {event.to_stage}"
                        f" ({event.transition_id})]\nbot> "
                    )
                elif isinstance(event, TurnCompleted):
                    say("\n")
                sys.stdout.flush()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `llmrtc` command."""
    parser = argparse.ArgumentParser(prog="llmrtc", description=llmrtc.__doc__)
    parser.add_argument("--version", action="version", version=f"llmrtc {llmrtc.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    tools = commands.add_parser("tools", help="list the tools a Python file defines")
    tools.add_argument("file", help="a Python file defining tools with @tool or define_tool")
    tools.add_argument("--json", action="store_true", help="print the OpenAI tool schemas")
    tools.set_defaults(handler=_cmd_tools)
    chat = commands.add_parser(
        "chat",
        help="chat in the terminal (OPENAI_API_KEY/OPENAI_BASE_URL, else the offline model)",
    )
    chat.add_argument(
        "playbook", nargs="?", help="a playbook (.yaml/.json) to run, e.g. playbooks/support.yaml"
    )
    chat.add_argument("--tools", help="a Python file defining the tools the bot may call")
    chat.add_argument(
        "--system",
        default="You are a helpful assistant. Use the tools when they help. Answer briefly.",
        help="the system prompt",
    )
    chat.set_defaults(handler=_cmd_chat)
    validate = commands.add_parser("validate", help="check a playbook and print its findings")
    validate.add_argument("playbook", help="a playbook file (.yaml, .yml or .json)")
    validate.add_argument("--graph", action="store_true", help="print a Mermaid state diagram")
    validate.set_defaults(handler=_cmd_validate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `llmrtc` console script."""
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
