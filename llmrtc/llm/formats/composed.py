"""The `composed` tool-call format: the tools and the answer as one JSON schema (seed 002's
`{calls, output}`), sent as `response_format`, with a prompt that teaches that shape; the
answer is read by `ComposedAnswerParser`.

Two shapes (see `composed_schema`): the default, calls `{"name", "arguments"}` or an answer;
and seed 002's own (`allow_both`), calls `{"_tool": <name>, <parameters>...}` beside an answer
that may be null. The parser reads either, whichever the request asked for."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from llmrtc.llm.compat import CompatProfile
from llmrtc.llm.formats.composed_answer import ComposedAnswerParser
from llmrtc.llm.formats.strategy import ContentReader, ToolCallFormat
from llmrtc.llm.formats.text import text_call_parser
from llmrtc.llm.types import LLMRequest, ToolChoice
from llmrtc.tools.composed_schema import composed_schema
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.schema_form import TOOL_FIELD

__all__ = [
    "SCHEMA_NAME",
    "ComposedFormat",
    "composed_prompt",
    "composed_response_format",
    "output_schema_of",
]

logger = logging.getLogger(__name__)

SCHEMA_NAME = "tool_calls_or_answer"


def composed_prompt(tools: Sequence[ToolDefinition], *, allow_both: bool = False) -> str:
    """The system-prompt section of the composed format: the tools, one JSON line each, and
    the shape of the answer (`allow_both`: seed 002's shape, see `composed_schema`)."""
    lines = "\n".join(
        json.dumps(
            {"name": t.wire_name, "description": t.description, "parameters": t.parameters},
            ensure_ascii=False,
        )
        for t in tools
    )
    if allow_both:
        shape = (
            'Reply with one JSON object {"calls": [...], "output": ...}. Only call a tool when '
            'the user\'s request needs it: then put each call in "calls" as '
            '{"_tool": <tool name>, <its parameters>...}. Leave "calls" empty when no tool is '
            'needed. Write your answer to the user in "output", or null when you only call '
            "tools."
        )
    else:
        shape = (
            'Reply with one JSON object {"calls": [...], "output": ...}. Only call a tool when '
            'the user\'s request needs it: then put the calls in "calls" as '
            '{"name": <tool name>, "arguments": {...}} and set "output" to null. Otherwise '
            'leave "calls" empty and write your answer to the user in "output".'
        )
    return f"# Tools\n\nYou may call these tools:\n{lines}\n\n{shape}"


def output_schema_of(response_format: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The answer's schema a request's own OpenAI `response_format` asks for (None: none, or
    `{"type": "text"}`), to become the composed `output` branch.

    Raises:
        ValueError: for a `response_format` that is no JSON schema and no JSON object.
    """
    if response_format is None or response_format.get("type") == "text":
        return None
    if response_format.get("type") == "json_object":
        return {"type": "object"}
    spec = response_format.get("json_schema")
    if response_format.get("type") == "json_schema" and isinstance(spec, Mapping):
        schema = spec.get("schema")
        if isinstance(schema, Mapping):
            return schema
    raise ValueError(
        "in the composed tool-call format a request's response_format must be "
        "{'type': 'json_schema', 'json_schema': {'schema': {...}}}, {'type': 'json_object'} or "
        f"{{'type': 'text'}}, got {dict(response_format)!r}"
    )


def composed_response_format(
    tools: Sequence[ToolDefinition],
    choice: ToolChoice,
    output_schema: Mapping[str, Any] | None,
    *,
    allow_both: bool = False,
) -> dict[str, Any]:
    """The `response_format` of a request in the composed format. A forcing `tool_choice`
    leaves only the calls branch (`"required"`) or only that tool (`{"name": ...}`); with
    `allow_both` (seed 002's shape, an object root) it makes `calls` hold at least one call
    and `output` null.

    No `"strict": true`: OpenAI's strict mode needs an object at the root (the default
    composed root is an `anyOf` of the calls and the answer branch), every property required
    and `additionalProperties: false` on every object, which tool parameters with optional
    arguments do not satisfy. llama.cpp constrains decoding to the schema without it.

    Raises:
        ValueError: for a forced tool that is not offered, or (with `allow_both`) a tool the
            seed's flattened calls cannot hold (a parameter named `_tool`).
    """
    if isinstance(choice, Mapping):
        forced = [t for t in tools if t.name == choice["name"]]
        if not forced:  # LLMRequest checks this too; here the schema would lose its calls
            raise ValueError(
                f"tool_choice names {choice['name']!r}, which is not among the tools: "
                f"{', '.join(t.name for t in tools) or 'none'}"
            )
        tools = forced
    schema = composed_schema(tools, output_schema, allow_both=allow_both)
    forcing = isinstance(choice, Mapping) or choice == "required"
    if forcing and allow_both:
        # Forced: calls only, as in the default shape (an answer beside a forced call would
        # be written, and spoken, before the call's result exists).
        schema["properties"]["calls"]["minItems"] = 1
        schema["properties"]["output"] = {"type": "null"}
    elif forcing:
        calls_only = schema["anyOf"][0]
        if "$defs" in schema:
            calls_only["$defs"] = schema["$defs"]
        schema = calls_only
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "schema": schema}}


class ComposedFormat:
    """Tools and answer as one `response_format` schema (see `ToolCallFormat`)."""

    name: ToolCallFormat = "composed"
    history_as_text = True

    def __init__(
        self, *, output_schema: Mapping[str, Any] | None = None, allow_both: bool = False
    ) -> None:
        """A composed format for one provider.

        Args:
            output_schema: The schema of the answer (`output`); default a string, streamed as
                the answer text (`OpenAIProvider`'s `composed_output_schema`).
            allow_both: Send seed 002's own shape (`OpenAIProvider`'s `composed_allow_both`).
        """
        self.output_schema = output_schema
        self.allow_both = allow_both
        self.nested_for: set[str] = set()
        """Tools (with a `_tool` parameter) that made `allow_both` requests use the nested
        shape; each is warned about once."""

    def prompt(self, request: LLMRequest, compat: CompatProfile) -> list[str]:
        """The composed prompt. The profile's tool hint asks for a bare call object: the
        composed prompt says how this answer is shaped instead."""
        return [composed_prompt(request.tools, allow_both=self._allow_both(request.tools))]

    def request_fields(self, request: LLMRequest) -> dict[str, Any]:
        """The tools as the answer's schema: the server (llama.cpp constrains decoding to it)
        can produce no malformed call and no call to an undeclared tool. The request's own
        response_format (an LLM-backed tool's schema) is the answer branch's schema."""
        own = output_schema_of(request.response_format)
        return {
            "response_format": composed_response_format(
                request.tools,
                request.tool_choice,
                own if own is not None else self.output_schema,
                allow_both=self._allow_both(request.tools),
            )
        }

    def reader(self, request: LLMRequest, *, tools_sent: bool) -> ContentReader:
        """The composed object when the tools went as its schema; otherwise (a retry without
        tools, none offered) text, whose calls are still found."""
        parser = text_call_parser(request)
        if not tools_sent:
            return parser
        return ComposedAnswerParser(request.tools, request.routable_names, parser)

    def grammar(self, request: LLMRequest, *, calls: bool) -> str | None:
        """None: the answer's schema (`response_format`) constrains it already."""
        return None

    def _allow_both(self, tools: Sequence[ToolDefinition]) -> bool:
        """Whether a request is sent in seed 002's shape: when asked for and no offered tool
        has a parameter named `_tool` (where that shape's flattened calls name their tool). A
        request offering such a tool is sent in the nested calls-or-answer shape instead, with
        a warning once per tool and provider: every tool stays offered and callable, and the
        parser reads either shape. (`compose_schema(..., allow_both=True)`, a user's own call,
        refuses such a tool.)"""
        if not self.allow_both:
            return False
        clashing = [t.name for t in tools if TOOL_FIELD in (t.json_schema.get("properties") or {})]
        for name in clashing:
            if name not in self.nested_for:
                self.nested_for.add(name)
                logger.warning(
                    "tool %r has a parameter named %r, where seed 002's flattened calls name "
                    "their tool: requests offering it use the nested calls-or-answer shape "
                    "instead of composed_allow_both's; rename the parameter to get seed 002's "
                    "shape",
                    name,
                    TOOL_FIELD,
                )
        return not clashing
