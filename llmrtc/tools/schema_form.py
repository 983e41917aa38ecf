"""Seed 002's schema form: a whole tool written as one JSON Schema, its meta-fields (`_tool`
names it, `_output` is its output schema, `_reasoningForCall` offers a reason field) beside its
parameters, read into a `ToolDefinition`.

Example:
    definition_from_schema({
        "type": "object",
        "description": "Analyzes text sentiment",
        "properties": {
            "_tool": {"type": "string", "const": "sentimentAnalysis"},
            "text": {"type": "string"},
            "_output": {"type": "object", "properties": {"sentiment": {"type": "string"}}},
        },
    })
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from llmrtc.tools.definition import REASONING_FIELD, ToolDefinition

logger = logging.getLogger(__name__)

__all__ = [
    "OUTPUT_FIELD",
    "REASONING_SCHEMA",
    "TOOL_FIELD",
    "definition_from_schema",
]

TOOL_FIELD = "_tool"
"""The seed form's meta-field naming the tool (`{"const": "sentimentAnalysis"}`)."""
OUTPUT_FIELD = "_output"
"""The argument in which the calling model writes a latent tool's result."""
META_FIELDS = (TOOL_FIELD, OUTPUT_FIELD, REASONING_FIELD)
"""Every meta-field the library runs."""
REASONING_SCHEMA: dict[str, Any] = {
    "type": "string",
    "description": "Why you chose this tool, in one short sentence (optional).",
}
"""The schema `_reasoningForCall` is offered with, whatever a schema declared for it."""


def definition_from_schema(schema: Mapping[str, Any], *, name: str | None = None) -> ToolDefinition:
    """A `ToolDefinition` from seed 002's schema form: `_tool` names the tool, `_output` is
    the output schema, the other properties are the parameters; a declared
    `_reasoningForCall` is offered first among them, as `REASONING_SCHEMA`.

    Raises:
        ValueError: without a name, or for a meta-field (`_x`) this library does not run.
    """
    if not isinstance(schema, Mapping):
        raise TypeError(f"a tool schema must be a JSON Schema object, got {type(schema).__name__}")
    properties = dict(schema.get("properties") or {})
    named = properties.pop(TOOL_FIELD, None)
    output = properties.pop(OUTPUT_FIELD, None)
    reasons = properties.pop(REASONING_FIELD, None) is not None
    if isinstance(named, Mapping):
        const = named.get("const")
        enum = named.get("enum")
        if const is None and isinstance(enum, list) and len(enum) == 1:
            const = enum[0]
        if isinstance(const, str):
            name = name or const
    if not name:
        raise ValueError(
            "a tool schema needs a name: give its '_tool' property a const "
            '({"_tool": {"const": "toolName"}}) or pass name=...'
        )
    unknown = sorted(key for key in properties if key.startswith("_"))
    if unknown:
        raise ValueError(
            f"tool {name!r}: the meta-fields {unknown} are not supported; a schema's "
            f"meta-fields may be {list(META_FIELDS)} (give a handler for explicit execution)"
        )
    if output is not None and not isinstance(output, dict):
        raise ValueError(f"tool {name!r}: {OUTPUT_FIELD} must be a JSON Schema object")
    if reasons:
        # First: the model says why before it fills the arguments.
        properties = {REASONING_FIELD: dict(REASONING_SCHEMA), **properties}
    parameters = {
        key: value
        for key, value in schema.items()
        if key not in ("properties", "required", "description", "title")
    }
    parameters["type"] = schema.get("type", "object")
    parameters["properties"] = properties
    required = [key for key in schema.get("required", ()) if key not in META_FIELDS]
    if required:
        parameters["required"] = required
    description = schema.get("description") or schema.get("title") or ""
    return ToolDefinition(
        name=name, description=description, parameters=parameters, output_schema=output
    )
