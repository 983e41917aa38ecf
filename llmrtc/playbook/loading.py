"""Loading playbooks from YAML or JSON files, with errors that say the file, key path and line."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from llmrtc.catalog.toolkits import Toolkit
from llmrtc.playbook.models import Playbook
from llmrtc.playbook.validation import Finding, PlaybookError, validate_playbook
from llmrtc.tools._errors import format_path
from llmrtc.tools.ids import from_wire_name, parse_tool_id
from llmrtc.tools.loader import ToolsFile, load_tools_module
from llmrtc.tools.registry import ToolRegistry

__all__ = [
    "load_playbook",
    "load_playbook_toolkit_tools",
    "load_playbook_tools",
    "load_playbook_tools_file",
    "mcp_tool_server",
]


def _line_of(node: yaml.Node | None, path: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at `path` (or of its deepest existing parent)."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in path:
        child = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    child = value
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            child = node.value[part]
        if child is None:
            break
        node = child
        line = node.start_mark.line + 1
    return line


def _parse_path(path: str) -> tuple[Any, ...]:
    parts: list[Any] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        parts.append(int(index) if index else name)
    return tuple(parts)


def _data_loc(data: Any, loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """`loc` without the tags pydantic adds for discriminated unions (`condition.keyword.x` is
    `condition.x` in the file)."""
    parts: list[Any] = []
    for part in loc:
        if isinstance(data, dict) and part not in data and data.get("type") == part:
            continue  # the union's tag, not a key of the file
        parts.append(part)
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
            data = data[part]
        else:
            data = None
    return tuple(parts)


def load_playbook(
    path: str | Path,
    *,
    registry: ToolRegistry | None = None,
    toolkits: Sequence[Toolkit] = (),
) -> Playbook:
    """Read a playbook from a `.yaml`/`.yml` or `.json` file and check it.

    Args:
        path: The file.
        registry: Tools to check references against; by default the playbook's own
            `tools_file` (if it names one) is loaded for that. Stages may name a tool by its
            name, wire name or catalog id (`crm:lookup@1.2.0`).
        toolkits: Toolkits whose keys stages' `tools:` may name; when `registry` is None,
            the `Toolkit`s the playbook's `tools_file` defines at module level are added.

    Raises:
        FileNotFoundError: if the file is missing.
        PlaybookError: for shape errors and error findings, each with the file, the key path
            (`stages[2].tools[0]`) and, for YAML, the line.
    """
    file = Path(path)
    text = file.read_text(encoding="utf-8")
    node = None
    try:
        if file.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            node = yaml.compose(text)
            data = yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise PlaybookError(
            [Finding("error", f"cannot parse: {exc}", "(file)")], str(file)
        ) from None
    if not isinstance(data, dict):
        raise PlaybookError(
            [
                Finding(
                    "error", f"expected a mapping at the top, got {type(data).__name__}", "(root)"
                )
            ],
            str(file),
        )

    def at(path: str) -> str:
        line = _line_of(node, _parse_path(path)) if node is not None else None
        return f"{path} (line {line})" if line is not None else path

    try:
        playbook = Playbook.model_validate({**data, "source_path": str(file)})
    except ValidationError as exc:
        findings = [
            Finding("error", err["msg"], at(format_path(_data_loc(data, err["loc"])) or "(root)"))
            for err in exc.errors(include_url=False)
        ]
        raise PlaybookError(findings, str(file)) from None
    if registry is None and playbook.tools_file is not None:
        try:
            registry, found = load_playbook_toolkit_tools(playbook)
            toolkits = [*toolkits, *found]
        except (FileNotFoundError, ValueError, ImportError) as exc:
            raise PlaybookError([Finding("error", str(exc), at("tools_file"))], str(file)) from None
    findings = [
        Finding(f.severity, f.message, at(f.path))
        for f in validate_playbook(playbook, registry, toolkits=toolkits)
        if not _names_mcp_tool(f, playbook)
    ]
    if any(f.severity == "error" for f in findings):
        # Every finding, warnings too: fixing the errors should not reveal new ones.
        raise PlaybookError(findings, str(file))
    return playbook


_UNKNOWN_TOOL = re.compile(r"^unknown tool '([^']+)'")


def mcp_tool_server(name: str, playbook: Playbook) -> str | None:
    """The `mcp_servers` entry whose tools `name` designates (`mcp_weather.forecast`,
    `mcp_weather__forecast`, `mcp_weather:forecast@1.0.0`), or None."""
    try:
        parsed = parse_tool_id(from_wire_name(name) if ":" not in name else name)
    except ValueError:
        return None
    for server in playbook.mcp_servers:
        if parsed.namespace == f"mcp_{server.name}":
            return server.name
    return None


def _names_mcp_tool(finding: Finding, playbook: Playbook) -> bool:
    """Whether `finding` is an unknown-tool error about a tool of one of the playbook's MCP
    servers: those tools are known only once the servers are connected, where the playbook
    is checked again with them (`llmrtc.cli.bot.open_mcp_tools`)."""
    match = _UNKNOWN_TOOL.match(finding.message)
    return (
        finding.severity == "error"
        and match is not None
        and mcp_tool_server(match.group(1), playbook) is not None
    )


def load_playbook_tools(playbook: Playbook) -> ToolRegistry:
    """The tools of the playbook's `tools_file` (relative to the playbook file).

    Raises:
        ValueError: if the playbook names no tools file.
        FileNotFoundError: if the file is missing.
    """
    return load_playbook_toolkit_tools(playbook)[0]


def load_playbook_toolkit_tools(playbook: Playbook) -> tuple[ToolRegistry, list[Toolkit]]:
    """The tools of the playbook's `tools_file` (relative to the playbook file) and the
    `Toolkit`s it defines at module level (what stages' `tools:` may name by key), from one
    import of the file.

    Raises:
        ValueError: if the playbook names no tools file.
        FileNotFoundError: if the file is missing.
    """
    loaded = load_playbook_tools_file(playbook)
    return loaded.registry, [item for item in loaded.objects if isinstance(item, Toolkit)]


def load_playbook_tools_file(playbook: Playbook) -> ToolsFile:
    """Everything the playbook's `tools_file` (relative to the playbook file) defines, from
    one import: its tools, its module-level objects, its path and its `RESOURCE_LIMITS`.

    Raises:
        ValueError: if the playbook names no tools file, or the file's tools or
            `RESOURCE_LIMITS` are bad.
        FileNotFoundError: if the file is missing.
    """
    if playbook.tools_file is None:
        raise ValueError(f"playbook {playbook.id!r} names no tools_file")
    base = Path(playbook.source_path).parent if playbook.source_path else Path.cwd()
    return load_tools_module(base / playbook.tools_file)
