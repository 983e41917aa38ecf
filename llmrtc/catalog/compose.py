"""`compose_schema`: seed 002's composed schema, the tools a model may call and the answer it
may give as one JSON Schema (`{calls, output}`), for a server that constrains decoding to it
(`OpenAIProvider(tool_call_format="composed")` sends it for every request with tools)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from llmrtc.tools.composed_schema import composed_schema
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.tool import Tool

__all__ = ["compose_schema"]


def compose_schema(
    tools: Iterable[Tool | ToolDefinition],
    output_schema: Mapping[str, Any] | None = None,
    *,
    allow_both: bool = False,
) -> dict[str, Any]:
    """The composed `{calls, output}` schema of `tools` and an answer schema.

    By default the model writes calls or an answer, never both (on the offline model a schema
    allowing both made it write an invented answer beside its calls): a call is
    `{"name": <wire name>, "arguments": {...}}`, its arguments constrained to its tool's
    parameters (latent tools include their required `_output`). `$defs` of the tools move to
    the root.

    Example (seed 002's: `greetUser(userName)`, answer `{summary}`):
        summary = {"type": "object", "properties": {"summary": {"type": "string"}},
                   "required": ["summary"]}
        compose_schema([greetUser], summary)
        # {"anyOf": [{"calls": [≥1 {"name": "greetUser", "arguments": {"userName": ...}}],
        #             "output": null},
        #            {"calls": [], "output": {"summary": ...}}]}
        compose_schema([greetUser], summary, allow_both=True)
        # {"type": "object", "required": ["calls", "output"], "properties": {
        #   "calls": {"type": "array", "items": {"type": "object",
        #             "properties": {"_tool": {"const": "greetUser"},
        #                            "userName": {"type": "string"}},
        #             "required": ["_tool", "userName"]}},
        #   "output": {"type": ["object", "null"], "properties": {...},
        #              "required": ["summary"], "additionalProperties": false}}}

    Args:
        tools: `Tool`s (a `ToolRegistry` iterates its tools) or `ToolDefinition`s.
        output_schema: The answer's schema (default: a string).
        allow_both: Seed 002's shape: an object root, `calls` first (the calls are decided
            before the answer is written), `output` nullable (an answer object with
            `properties` is closed: `additionalProperties: false`), each call the tool's
            parameters flattened beside `"_tool": {"const": name}`; calls and an answer may
            come together.

    Raises:
        TypeError: for something that is neither a `Tool` nor a `ToolDefinition`.
        ValueError: when two tools share a wire name, or, with `allow_both`, a tool has a
            parameter named `_tool`.
    """
    definitions: list[ToolDefinition] = []
    seen: set[str] = set()
    for item in tools:
        definition = item.definition if isinstance(item, Tool) else item
        if not isinstance(definition, ToolDefinition):
            raise TypeError(
                f"compose_schema takes Tools or ToolDefinitions, got {type(item).__name__}"
            )
        if definition.wire_name in seen:
            raise ValueError(f"two tools are named {definition.wire_name!r} on the wire")
        seen.add(definition.wire_name)
        definitions.append(definition)
    if output_schema is not None and not isinstance(output_schema, Mapping):
        raise TypeError(f"output_schema must be a JSON Schema dict, got {output_schema!r}")
    return composed_schema(definitions, output_schema, allow_both=allow_both)
