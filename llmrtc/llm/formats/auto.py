"""The `auto` tool-call format: native tools, and calls a model still writes as text are
recognised (no schemas in the prompt)."""

from __future__ import annotations

import logging
from typing import Any

from llmrtc.llm.compat import CompatProfile
from llmrtc.llm.formats.native import NativeFormat
from llmrtc.llm.formats.strategy import ToolCallFormat
from llmrtc.llm.formats.text import text_call_parser
from llmrtc.llm.text_tools import TextToolCallParser
from llmrtc.llm.types import LLMRequest

__all__ = ["AutoFormat"]

logger = logging.getLogger(__name__)


class AutoFormat:
    """The request of `native`, the reader of `text` (see `ToolCallFormat`)."""

    name: ToolCallFormat = "auto"
    history_as_text = False

    def __init__(self) -> None:
        """The native request it sends."""
        self._native = NativeFormat()

    def prompt(self, request: LLMRequest, compat: CompatProfile) -> list[str]:
        """As `native`: the profile's tool hint only."""
        return self._native.prompt(request, compat)

    def request_fields(self, request: LLMRequest) -> dict[str, Any]:
        """As `native`: `tools` and `tool_choice`."""
        return self._native.request_fields(request)

    def reader(self, request: LLMRequest, *, tools_sent: bool) -> TextToolCallParser:
        """Text with calls in it (structured calls come as tool-call deltas besides)."""
        return text_call_parser(request)

    def grammar(self, request: LLMRequest, *, calls: bool) -> str | None:
        """As `native`: none."""
        return None
