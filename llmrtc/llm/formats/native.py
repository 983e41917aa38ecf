"""The `native` tool-call format: tools in the API's `tools` field, calls back as structured
tool-call deltas, content read as plain text."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from llmrtc.llm.compat import CompatProfile
from llmrtc.llm.formats.strategy import ToolCallFormat
from llmrtc.llm.types import LLMRequest, LLMTextDelta, LLMToolCall
from llmrtc.tools.ids import to_wire_name

__all__ = ["NativeFormat", "PlainTextReader"]

logger = logging.getLogger(__name__)


class PlainTextReader:
    """Content as it comes: every delta is text (calls arrive as tool-call deltas)."""

    cut_short = False

    def feed(self, delta: str) -> list[LLMTextDelta | LLMToolCall]:
        """The delta, as text."""
        return [LLMTextDelta(delta)]

    def finish(self) -> list[LLMTextDelta | LLMToolCall]:
        """Nothing is ever held back."""
        return []

    def discard_undecided(self) -> list[LLMTextDelta | LLMToolCall]:
        """Nothing is ever held back."""
        return []


class NativeFormat:
    """Tools in the API's `tools` field (see `ToolCallFormat`)."""

    name: ToolCallFormat = "native"
    history_as_text = False

    def prompt(self, request: LLMRequest, compat: CompatProfile) -> list[str]:
        """The profile's tool hint (small models need to be told to answer with the call only)."""
        return [compat.tool_hint] if compat.tool_hint else []

    def request_fields(self, request: LLMRequest) -> dict[str, Any]:
        """`tools` and `tool_choice`, names in their wire form (APIs refuse dots)."""
        choice = request.tool_choice
        return {
            "tools": [tool.to_openai() for tool in request.tools],
            "tool_choice": (
                {"type": "function", "function": {"name": to_wire_name(choice["name"])}}
                if isinstance(choice, Mapping)
                else choice
            ),
        }

    def reader(self, request: LLMRequest, *, tools_sent: bool) -> PlainTextReader:
        """Content is text: a native model's calls come structured."""
        return PlainTextReader()

    def grammar(self, request: LLMRequest, *, calls: bool) -> str | None:
        """None: the server parses calls from the `tools` field (llama.cpp refuses a grammar
        beside tools)."""
        return None
