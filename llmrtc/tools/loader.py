"""Load the tools a Python file defines (for `llmrtc tools`, `llmrtc chat --tools`, playbooks)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType

from llmrtc.tools.definition import RESOURCE_NAME_PATTERN
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool

__all__ = [
    "IMPORT_NOTE",
    "RESOURCE_LIMITS_NAME",
    "ToolsFile",
    "load_tools_file",
    "load_tools_module",
]

IMPORT_NOTE = "while importing tools file"
"""The start of the note added to anything a tools file raises while it is imported."""

RESOURCE_LIMITS_NAME = "RESOURCE_LIMITS"
"""The module-level name under which a tools file gives its resources' limits
(`RESOURCE_LIMITS = {"crm": 2}`: what `ToolExecutor(resource_limits=...)` takes), for the
commands that build the executor themselves (`llmrtc chat`, `voice`, `serve`)."""


@dataclass(frozen=True)
class ToolsFile:
    """What a tools file defines: its tools, and every module-level object (where a higher
    floor finds what it knows, e.g. the catalog's `Toolkit`s, which this floor cannot name)."""

    registry: ToolRegistry
    objects: tuple[object, ...]
    """The module's top-level values, in file order, each object once."""
    path: Path
    """The file, resolved."""
    resource_limits: Mapping[str, int] | None = None
    """The file's `RESOURCE_LIMITS` (read-only; None: it defines none)."""


def load_tools_file(path: str | Path) -> ToolRegistry:
    """Import a Python file and register every `Tool` it defines at module level, in file order.

    If the file defines a `ToolRegistry` named `registry`, that registry is returned instead.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if it defines no tools, or two tools share a name.
        Exception: whatever the file itself raises on import, with the file named in the note.
    """
    return load_tools_module(path).registry


def load_tools_module(path: str | Path) -> ToolsFile:
    """Import a Python file once: its tools (as `load_tools_file`) and its top-level objects.

    Raises:
        FileNotFoundError: if the file does not exist.
        ValueError: if it defines no tools, two tools share a name, or a `RESOURCE_LIMITS`
            that is not a mapping of resource names to integers >= 1.
        Exception: whatever the file itself raises on import, with the file named in the note.
    """
    file = Path(path).resolve()
    if not file.is_file():
        raise FileNotFoundError(f"tools file not found: {file}")
    module_name = f"llmrtc_tools_{abs(hash(str(file)))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {file} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and pydantic look their module up here
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        exc.add_note(f"{IMPORT_NOTE} {file}")
        raise
    # By identity: one object bound to two names (`kit = other = Toolkit(...)`, or imported
    # and re-exported) is one object, not a duplicate for a higher floor to report.
    objects = tuple({id(value): value for value in vars(module).values()}.values())
    limits = _resource_limits(module, file)
    explicit = getattr(module, "registry", None)
    if isinstance(explicit, ToolRegistry):
        return ToolsFile(explicit, objects, file, limits)
    tools = [value for value in objects if isinstance(value, Tool)]
    if not tools:
        raise ValueError(
            f"{file} defines no tools: define them at module level with @tool or define_tool"
        )
    try:
        return ToolsFile(ToolRegistry(tools), objects, file, limits)
    except ValueError as exc:
        raise ValueError(f"{file}: {exc}") from None


def _resource_limits(module: ModuleType, file: Path) -> Mapping[str, int] | None:
    """The module's `RESOURCE_LIMITS`, checked here so a bad one is reported with its file
    (the executor checks what it is given again)."""
    if not hasattr(module, RESOURCE_LIMITS_NAME):
        return None
    limits = getattr(module, RESOURCE_LIMITS_NAME)
    where = f"{file}: {RESOURCE_LIMITS_NAME}"
    if not isinstance(limits, Mapping):
        raise ValueError(
            f'{where} must be a dict of resource name to limit, like {{"crm": 2}}, '
            f"got {type(limits).__name__} {limits!r}"
        )
    for name, limit in limits.items():
        if not isinstance(name, str) or not RESOURCE_NAME_PATTERN.match(name):
            raise ValueError(
                f"{where}: {name!r} is not a resource name (1-64 letters, digits, '_', '.' or '-')"
            )
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(
                f"{where}[{name!r}] must be an integer >= 1 (how many calls may hold it at "
                f"once), got {limit!r}"
            )
    return MappingProxyType(dict(limits))
