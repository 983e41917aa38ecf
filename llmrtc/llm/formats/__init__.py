"""Tool-call formats as strategies: one per `tool_call_format` value (`native`, `text`, `auto`,
`composed`) behind `CallFormat` (what goes into the request; a `ContentReader` that turns the
streamed content into text deltas and calls). `format_for` picks one by name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llmrtc.llm.formats.auto import AutoFormat
from llmrtc.llm.formats.composed import ComposedFormat
from llmrtc.llm.formats.native import NativeFormat
from llmrtc.llm.formats.strategy import CallFormat, ContentReader, ToolCallFormat
from llmrtc.llm.formats.text import TextFormat

__all__ = [
    "AutoFormat",
    "CallFormat",
    "ComposedFormat",
    "ContentReader",
    "NativeFormat",
    "TextFormat",
    "ToolCallFormat",
    "format_for",
]


def format_for(
    name: ToolCallFormat,
    *,
    composed_output_schema: Mapping[str, Any] | None = None,
    composed_allow_both: bool = False,
) -> CallFormat:
    """The strategy for `name`, with the composed format's options (see `OpenAIProvider`).

    Raises:
        ValueError: for an unknown name, an `composed_output_schema` that is no dict, or
            `composed_allow_both` that is no bool or given with another format.
    """
    if name not in ("native", "text", "auto", "composed"):
        raise ValueError(
            f"tool_call_format must be 'native', 'text', 'auto' or 'composed', got {name!r}"
        )
    if composed_output_schema is not None and not isinstance(composed_output_schema, Mapping):
        raise ValueError(
            "composed_output_schema must be a JSON Schema dict or None, "
            f"got {type(composed_output_schema).__name__}"
        )
    if not isinstance(composed_allow_both, bool):
        raise ValueError(f"composed_allow_both must be True or False, got {composed_allow_both!r}")
    if composed_allow_both and name != "composed":
        raise ValueError(
            "composed_allow_both=True shapes the composed format's schema, but "
            f"tool_call_format is {name!r}: pass tool_call_format='composed' "
            "or leave composed_allow_both out"
        )
    if name == "composed":
        return ComposedFormat(output_schema=composed_output_schema, allow_both=composed_allow_both)
    formats: dict[str, type[NativeFormat | TextFormat | AutoFormat]] = {
        "native": NativeFormat,
        "text": TextFormat,
        "auto": AutoFormat,
    }
    return formats[name]()
