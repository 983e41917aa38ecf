"""Prompt text for LLM-backed tools: `{{name}}` templates, the JSON-only instruction with the
output's structure, the `response_format` that constrains decoding, and reading JSON back out
of what a small model actually writes (fenced, with prose around it)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from llmrtc.errors import LLMRTCError

__all__ = [
    "JSON_ONLY_INSTRUCTION",
    "OutputParseError",
    "json_response_format",
    "json_system_prompt",
    "parse_json_output",
    "render_template",
    "shorten",
    "template_names",
]

JSON_ONLY_INSTRUCTION = (
    "Answer with a single JSON value and nothing else: no markdown code fences, no text "
    "before or after it, no comments. It must follow the output schema above."
)
"""Appended to the system prompt of a tool with JSON output (last: small models follow the
most recent instruction best)."""

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)\s*\}\}")
_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)


def template_names(template: str) -> set[str]:
    """The top-level variable names a template uses (`{{user.name}}` → `user`)."""
    return {match.group(1).split(".", 1)[0] for match in _PLACEHOLDER.finditer(template)}


def _lookup(values: Mapping[str, Any], path: str) -> Any:
    value: Any = values
    for part in path.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def render_template(template: str, values: Mapping[str, Any]) -> str:
    """Replace each `{{name}}` / `{{name.field}}` with its value: strings as they are, other
    values as JSON, missing ones (an optional input not given) as nothing. One pass: text
    inside a value is never rendered again."""

    def replace(match: re.Match[str]) -> str:
        value = _lookup(values, match.group(1))
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        return json.dumps(value, ensure_ascii=False)

    return _PLACEHOLDER.sub(replace, template)


def json_system_prompt(system: str, schema: Mapping[str, Any] | None, example: Any) -> str:
    """The tool's system prompt, then its output schema and example as JSON blocks, then the
    JSON-only instruction."""
    parts = [system.strip()] if system.strip() else []
    if schema is not None:
        parts.append("Output schema:\n```json\n" + json.dumps(schema, ensure_ascii=False) + "\n```")
    if example is not None:
        parts.append(
            "Example output:\n```json\n" + json.dumps(example, ensure_ascii=False) + "\n```"
        )
    parts.append(JSON_ONLY_INSTRUCTION)
    return "\n\n".join(parts)


def json_response_format(name: str, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The OpenAI `response_format` for JSON output: the output schema as `json_schema` (not
    strict: OpenAI's strict mode refuses ordinary schemas), or any JSON object without one."""
    if schema is None:
        return {"type": "json_object"}
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"
    return {"type": "json_schema", "json_schema": {"name": safe, "schema": dict(schema)}}


class OutputParseError(LLMRTCError, ValueError):
    """A model's answer held no JSON value."""

    def __init__(self, raw: str) -> None:
        super().__init__(f"the answer is not valid JSON: {shorten(raw)!r}")
        self.raw = raw
        """The whole answer."""


def shorten(text: str, limit: int = 160) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse_json_output(raw: str) -> Any:
    """The JSON value in a model's answer: the answer itself, else the first fenced block
    that parses, else the first object or array that parses inside prose.

    Raises:
        OutputParseError: when none does.
    """
    text = raw.strip()
    try:
        return json.loads(text)
    except ValueError:
        pass
    for match in _FENCE.finditer(text):
        try:
            return json.loads(match.group(1).strip())
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    for index, char in enumerate(text):
        if char in "{[":
            try:
                value, _ = decoder.raw_decode(text, index)
            except ValueError:
                continue
            return value
    raise OutputParseError(raw)
