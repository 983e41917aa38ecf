"""Load the tools a Python file defines (for `llmrtc tools`, `llmrtc chat --tools`, playbooks)."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool

__all__ = ["IMPORT_NOTE", "ToolsFile", "load_tools_file", "load_tools_module"]

IMPORT_NOTE = "while importing tools file"
"""The start of the note added to anything a tools file raises while it is imported."""


@dataclass(frozen=True)
class ToolsFile:
    """What a tools file defines: its tools, and every module-level object (where a higher
    floor finds what it knows, e.g. the catalog's `Toolkit`s, which this floor cannot name)."""

    registry: ToolRegistry
    objects: tuple[object, ...]
    """The module's top-level values, in file order, each object once."""


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
        ValueError: if it defines no tools, or two tools share a name.
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
    explicit = getattr(module, "registry", None)
    if isinstance(explicit, ToolRegistry):
        return ToolsFile(explicit, objects)
    tools = [value for value in objects if isinstance(value, Tool)]
    if not tools:
        raise ValueError(
            f"{file} defines no tools: define them at module level with @tool or define_tool"
        )
    try:
        return ToolsFile(ToolRegistry(tools), objects)
    except ValueError as exc:
        raise ValueError(f"{file}: {exc}") from None
