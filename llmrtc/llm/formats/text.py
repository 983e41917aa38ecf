"""The `text` tool-call format: tool schemas in the system prompt, calls parsed from the answer
text by `TextToolCallParser` (the server never parses a call, so it cannot fail on one)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from llmrtc.llm.compat import CompatProfile
from llmrtc.llm.formats.strategy import ToolCallFormat
from llmrtc.llm.grammar import PROSE_GRAMMAR, tool_call_grammar
from llmrtc.llm.text_tools import TextToolCallParser
from llmrtc.llm.types import LLMRequest
from llmrtc.llm.wire import render_tool_prompt
from llmrtc.tools.ids import to_wire_name

__all__ = ["TextFormat", "text_call_parser"]

logger = logging.getLogger(__name__)


def text_call_parser(request: LLMRequest) -> TextToolCallParser:
    """A parser of calls written as text in an answer to `request`.

    Used for every request, tools or not: call-shaped JSON is never text. With tool_choice
    "none" no call is accepted; after a retry without tools (or tool results) a call the model
    still writes to a declared tool is one. Routable names (hidden, auto-routed tools) are
    accepted too: a text call to one is a call the executor runs, not call-shaped noise to drop.
    """
    offered = [] if request.tool_choice == "none" else [t.name for t in request.tools]
    routable = () if request.tool_choice == "none" else request.routable_names
    return TextToolCallParser(offered, routable)


class TextFormat:
    """Tool schemas in the prompt, calls read from the text (see `ToolCallFormat`)."""

    name: ToolCallFormat = "text"
    history_as_text = True

    def prompt(self, request: LLMRequest, compat: CompatProfile) -> list[str]:
        """The tool hint, the tools (in the profile's wording, or `render_tool_prompt`'s) and
        what `tool_choice` demands (the server cannot enforce it: nothing goes in `tools`)."""
        extra = [compat.tool_hint] if compat.tool_hint else []
        extra.append((compat.tool_prompt or render_tool_prompt)(request.tools))
        choice = request.tool_choice
        if isinstance(choice, Mapping):
            extra.append(f"You must call the tool {to_wire_name(choice['name'])} now.")
        elif choice == "required":
            extra.append("You must call one of the tools now.")
        return extra

    def request_fields(self, request: LLMRequest) -> dict[str, Any]:
        """None: the tools are in the prompt."""
        return {}

    def reader(self, request: LLMRequest, *, tools_sent: bool) -> TextToolCallParser:
        """Text with calls in it."""
        return text_call_parser(request)

    def grammar(self, request: LLMRequest, *, calls: bool) -> str | None:
        """A call to an offered tool or prose (a forcing tool_choice: the call only, to the
        forced tool); prose only when the answer must not call (`calls` False)."""
        if not calls:
            return PROSE_GRAMMAR
        choice = request.tool_choice
        if isinstance(choice, Mapping):
            return tool_call_grammar([to_wire_name(choice["name"])], allow_prose=False)
        # Routable names (a discovery catalog's hidden tools) are calls the parser accepts and
        # the executor runs: the grammar must let the model write them too.
        names = [t.wire_name for t in request.tools]
        names += [to_wire_name(n) for n in request.routable_names if to_wire_name(n) not in names]
        return tool_call_grammar(names, allow_prose=choice != "required")
