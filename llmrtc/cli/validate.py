"""`llmrtc validate PLAYBOOK`: check a playbook and print every finding (exit status 1 on
errors), optionally its Mermaid state diagram. Only argparse is imported at load time."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from llmrtc.cli.errors import CLIError, playbook_failure

if TYPE_CHECKING:
    from llmrtc.catalog.toolkits import Toolkit
    from llmrtc.tools import ToolRegistry

__all__ = ["add_validate_parser"]


def add_validate_parser(commands: Any) -> None:
    """Add the `validate` subcommand to `commands` (an argparse subparsers object)."""
    validate = commands.add_parser(
        "validate",
        help="check a playbook and print its findings",
        description="Check a playbook and print every finding (exit status 1 on errors).",
    )
    validate.add_argument("playbook", help="a playbook file (.yaml, .yml or .json)")
    validate.add_argument("--graph", action="store_true", help="print a Mermaid state diagram")
    validate.set_defaults(handler=validate_command)


def validate_command(args: argparse.Namespace) -> int:
    """Run `llmrtc validate`; the exit status (1 when the playbook has errors).

    Raises:
        CLIError: the playbook or its tools file cannot be loaded.
    """
    from llmrtc.cli.bot import load_tools
    from llmrtc.playbook import PlaybookError, to_mermaid, validate_playbook
    from llmrtc.playbook.loading import load_playbook, load_playbook_toolkit_tools

    registry: ToolRegistry | None = None
    toolkits: list[Toolkit] = []
    try:
        playbook = load_playbook(args.playbook)
        if playbook.tools_file:
            # Its Toolkits too: stages may name them by key.
            registry, toolkits = load_tools(
                load_playbook_toolkit_tools,
                playbook,
                failure="cannot load the playbook's tools file",
            )
    except PlaybookError as exc:
        raise playbook_failure(exc, args.playbook) from exc
    except (FileNotFoundError, ValueError) as exc:
        raise CLIError(str(exc)) from exc
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
