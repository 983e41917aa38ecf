"""How tools are offered to a model and their calls read back, in seed 002's terms: the opt-in
`_reasoningForCall` argument (added to the offered schema, taken out of each call) and a latent
tool's `_output`, checked on each call.

What a latent tool is lives with the other tools (`llmrtc.tools.tool.LatentTool`); the schema
form that writes one, and the meta-field names, in `llmrtc.tools.schema_form`; the composed
`{calls, output}` schema a model answers with in `llmrtc.tools.composed_schema`.
"""

from __future__ import annotations

import copy
import logging
import weakref
from collections.abc import Sequence
from typing import Any

from llmrtc.tools.arguments import ArgumentsError, compile_validator, parse_arguments
from llmrtc.tools.definition import REASONING_FIELD, ToolDefinition
from llmrtc.tools.schema_form import REASONING_SCHEMA
from llmrtc.tools.tool import Tool

logger = logging.getLogger(__name__)

__all__ = [
    "offered_definitions",
    "unwrap_arguments",
    "with_reasoning_field",
    "with_reasoning_tool",
]


# The definition a reasoning field was added to, per original (built once: compiling a
# validator per request would cost milliseconds).
_reasoned: weakref.WeakKeyDictionary[ToolDefinition, ToolDefinition] = weakref.WeakKeyDictionary()


def with_reasoning_field(definition: ToolDefinition) -> ToolDefinition:
    """`definition` with the optional `_reasoningForCall` string first among its parameters
    (the model says why before it fills the arguments). The executor strips the value before
    validation and the handler and records it on hooks and spans. Cached per definition."""
    if definition.reasoning_for_call:
        return definition
    found = _reasoned.get(definition)
    if found is not None:
        return found
    parameters = definition.json_schema
    properties = {REASONING_FIELD: dict(REASONING_SCHEMA), **(parameters.get("properties") or {})}
    offered = {**parameters, "properties": properties}
    # A copy, not `replace`: a pydantic parameters model (what the handler receives) is kept.
    reasoned = copy.copy(definition)
    object.__setattr__(reasoned, "parameters", offered)
    validator = compile_validator(
        offered, model=definition.parameters_model, tool_name=definition.name
    )
    object.__setattr__(reasoned, "_validator", validator)
    object.__setattr__(reasoned, "reasoning_for_call", True)
    _reasoned[definition] = reasoned
    return reasoned


def with_reasoning_tool(tool: Tool) -> Tool:
    """`tool` (same handler, same class) offered with `_reasoningForCall`."""
    if tool.definition.reasoning_for_call:
        return tool
    reasoned = copy.copy(tool)
    reasoned.definition = with_reasoning_field(tool.definition)
    return reasoned


def unwrap_arguments(tool: Tool, raw: Any, *, strip_reasoning: bool) -> tuple[Any, str | None]:
    """Parse a call's arguments, take `_reasoningForCall` out (when `strip_reasoning` or the
    tool's definition declares it) and check a latent tool's `_output`.

    Returns:
        The arguments without the reasoning, and the reasoning (None when not given).

    Raises:
        ArgumentsError: for arguments that are no JSON object, a reasoning that is no string,
            or a latent tool's missing or invalid `_output`.
    """
    arguments = parse_arguments(raw)  # a fresh dict: popping leaves the call's own intact
    reasoning = None
    if strip_reasoning or tool.definition.reasoning_for_call:
        reasoning = arguments.pop(REASONING_FIELD, None)
        if reasoning is not None and not isinstance(reasoning, str):
            raise ArgumentsError(
                [f"{REASONING_FIELD} must be a string (why you chose this tool) or left out"]
            )
    if tool.latent:
        errors = tool.output_errors(arguments)  # type: ignore[attr-defined]
        if errors:
            raise ArgumentsError(errors)
    return arguments, reasoning


def offered_definitions(
    definitions: Sequence[ToolDefinition], *, reasoning_for_call: bool
) -> list[ToolDefinition]:
    """`definitions` as offered: with `_reasoningForCall` when `reasoning_for_call`."""
    if not reasoning_for_call:
        return list(definitions)
    return [with_reasoning_field(definition) for definition in definitions]
