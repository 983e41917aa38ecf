"""The tool-call format strategy: what a format puts into a chat-completions request, and the
reader that turns the answer's streamed content into text deltas and tool calls."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from llmrtc.llm.compat import CompatProfile
from llmrtc.llm.types import LLMRequest, LLMTextDelta, LLMToolCall

__all__ = ["CallFormat", "ContentReader", "ToolCallFormat"]

ToolCallFormat = Literal["native", "text", "auto", "composed"]
"""`native`: tools go in the API's `tools` field and calls come back structured. `text`: tool
schemas go into the system prompt and calls are parsed from the answer text (the server never
parses a call, so it cannot fail on one). `auto`: native, and calls a model writes as text are
still recognised (no schemas in the prompt). `composed`: the tools and the answer become one
JSON schema (seed 002's `{calls, output}`: either calls or an answer) sent as
`response_format`; the server constrains decoding to it (llama.cpp does), so no call is
malformed or names an undeclared tool; `output` is streamed as text, the calls become tool
calls; the API's `tools` field is not sent (its root `anyOf` suits llama.cpp; OpenAI's strict
structured outputs want an object root, so no `strict` is sent). It needs a server that honours
`response_format` (refused with `compat.response_format` False). A server that ignores the
schema is still read: a composed object after a preamble or in a code fence is parsed, never
spoken; a composed call naming an undeclared tool is kept (the executor answers `not_found`);
an object cut short ends with stop reason `length`. In `text`, `auto` and a `composed` answer
written as plain text, call-shaped JSON naming no declared tool is dropped, in every request,
with or without tools."""


class ContentReader(Protocol):
    """Reads the `content` of one streamed answer. Native tool-call deltas are not its
    business: the stream reader assembles those in every format."""

    def feed(self, delta: str) -> list[LLMTextDelta | LLMToolCall]:
        """Take more content; what is decided so far (text to say, calls found)."""
        ...

    def finish(self) -> list[LLMTextDelta | LLMToolCall]:
        """The stream ended: decide everything still held back."""
        ...

    def discard_undecided(self) -> list[LLMTextDelta | LLMToolCall]:
        """The stream was cut off (abort): the text that is safe to say; the rest (maybe a
        half-written call) is dropped."""
        ...

    @property
    def cut_short(self) -> bool:
        """After `finish`: the answer's calls were lost to a cut (a composed object that never
        closed), so the stop reason is `length` whatever the server said."""
        ...


class CallFormat(Protocol):
    """One way of offering tools to a model and reading its calls back (see `ToolCallFormat`).

    `OpenAIProvider` keeps the transport (the request's common fields, retries, the fallback
    without tools); a format decides only what differs between formats.
    """

    name: ToolCallFormat
    """The `tool_call_format` value this strategy implements."""
    history_as_text: bool
    """Past calls and tool results are sent as text (`<tool_call>` / `<tool_response>`): the
    model was taught calls as text, and a server without tools may refuse `tool` messages."""

    def prompt(self, request: LLMRequest, compat: CompatProfile) -> list[str]:
        """System-prompt sections for a request whose tools are sent."""
        ...

    def request_fields(self, request: LLMRequest) -> dict[str, Any]:
        """Fields of `chat.completions.create` for a request whose tools are sent (they
        replace the common ones of the same name)."""
        ...

    def reader(self, request: LLMRequest, *, tools_sent: bool) -> ContentReader:
        """A reader for one answer to `request` (`tools_sent`: this attempt offered its tools;
        False after a retry without them, or when none were offered)."""
        ...

    def grammar(self, request: LLMRequest, *, calls: bool) -> str | None:
        """The GBNF grammar to constrain an answer to `request` with, on a server that honours
        one (`CompatProfile.grammar`), or None for none. `calls`: the answer may call the
        request's tools; False: its tools are in the prompt but the answer must be prose."""
        ...
