"""The `composed` tool-call format: the tools and the answer as one JSON schema (seed 002's
`{calls, output}`), sent as `response_format`, and the parser that turns the model's one JSON
object into tool calls and answer text (the `output` string streamed as it is written)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from llmrtc.llm.types import LLMTextDelta, LLMToolCall, ToolChoice
from llmrtc.llm.wire import new_call_id
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.ids import to_wire_name
from llmrtc.tools.latent import composed_schema

logger = logging.getLogger("llmrtc.llm")

SCHEMA_NAME = "tool_calls_or_answer"
_WHITESPACE = " \t\r\n"
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def composed_prompt(tools: Sequence[ToolDefinition]) -> str:
    """The system-prompt section of the composed format: the tools, one JSON line each, and
    the shape of the answer."""
    lines = "\n".join(
        json.dumps(
            {"name": t.wire_name, "description": t.description, "parameters": t.parameters},
            ensure_ascii=False,
        )
        for t in tools
    )
    return (
        f"# Tools\n\nYou may call these tools:\n{lines}\n\n"
        'Reply with one JSON object {"calls": [...], "output": ...}. Only call a tool when the '
        'user\'s request needs it: then put the calls in "calls" as '
        '{"name": <tool name>, "arguments": {...}} and set "output" to null. Otherwise leave '
        '"calls" empty and write your answer to the user in "output".'
    )


def composed_response_format(
    tools: Sequence[ToolDefinition],
    choice: ToolChoice,
    output_schema: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The `response_format` of a request in the composed format. A forcing `tool_choice`
    leaves only the calls branch (`"required"`) or only that tool (`{"name": ...}`)."""
    if isinstance(choice, Mapping):
        tools = [t for t in tools if t.name == choice["name"]]
    schema = composed_schema(tools, output_schema)
    if isinstance(choice, Mapping) or choice == "required":
        calls_only = schema["anyOf"][0]
        if "$defs" in schema:
            calls_only["$defs"] = schema["$defs"]
        schema = calls_only
    return {"type": "json_schema", "json_schema": {"name": SCHEMA_NAME, "schema": schema}}


class ComposedAnswerParser:
    """Reads a streamed composed answer: the `output` string's text as it arrives, the calls
    (and an `output` that is no string, as JSON text) once the object is complete.

    A server that ignored the schema and wrote no JSON object: `is_json` turns False on the
    first character, and the caller parses the text another way.
    """

    def __init__(self, tools: Sequence[ToolDefinition], routable: Sequence[str] = ()) -> None:
        """Read an answer to a request offering `tools` (names a call may use: their wire
        names, dotted names, and `routable` names)."""
        self._names = {to_wire_name(t.name): t.name for t in tools}
        self._names.update({t.name: t.name for t in tools})
        self._names.update({name: name for name in routable})
        self._names.update({to_wire_name(name): name for name in routable})
        self.text = ""
        """Everything received."""
        self.is_json: bool | None = None
        """None until the first non-blank character; False when it is not `{`."""
        self.streamed = False
        """Some of `output` was given as text deltas already."""
        self._i = 0
        self._depth = 0
        self._in_string = False
        self._escaped = False
        self._string_start = 0
        self._last_string: str | None = None
        self._key: str | None = None
        self._streaming = False
        self._pending = ""  # an escape sequence not complete yet

    @property
    def json_answer(self) -> bool:
        """False once the answer turned out not to be a JSON object."""
        return self.is_json is not False

    def feed(self, text: str) -> list[LLMTextDelta | LLMToolCall]:
        """Take more of the answer; the `output` text that is now known."""
        self.text += text
        if self.is_json is None:
            stripped = self.text.lstrip(_WHITESPACE)
            if not stripped:
                return []
            self.is_json = stripped[0] == "{"
        if not self.is_json:
            return []
        out: list[str] = []
        source = self.text
        while self._i < len(source):
            char = source[self._i]
            self._i += 1
            if self._streaming:
                self._stream_char(char, out)
            elif self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
                    self._last_string = source[self._string_start : self._i]
            elif char == '"':
                if self._depth == 1 and self._key == "output":
                    self._streaming = True  # the answer text starts
                    self.streamed = True
                else:
                    self._in_string = True
                    self._string_start = self._i - 1
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
            elif char == ":" and self._depth == 1 and self._last_string is not None:
                try:
                    self._key = json.loads(self._last_string)
                except ValueError:
                    self._key = None
            elif char == "," and self._depth == 1:
                self._key = None
        return [LLMTextDelta("".join(out))] if out else []

    def _stream_char(self, char: str, out: list[str]) -> None:
        if self._pending:
            self._pending += char
            pending = self._pending
            if pending[1] != "u":
                out.append(_ESCAPES.get(pending[1], pending[1]))
                self._pending = ""
            elif len(pending) == 6 and 0xD800 <= int(pending[2:], 16) <= 0xDBFF:
                return  # a high surrogate: decoded with the low one that follows
            elif len(pending) in (6, 12):
                with contextlib.suppress(ValueError):  # a broken escape: nothing to say
                    out.append(json.loads(f'"{pending}"'))
                self._pending = ""
        elif char == "\\":
            self._pending = char
        elif char == '"':
            self._streaming = False
            self._key = None
        else:
            out.append(char)

    def finish(self) -> list[LLMTextDelta | LLMToolCall]:
        """The calls of the complete object, and an `output` that was not streamed."""
        try:
            answer = json.loads(self.text)
        except ValueError:
            logger.warning("the composed answer is not complete JSON: %.200r", self.text)
            return []
        if not isinstance(answer, dict):
            return []
        events: list[LLMTextDelta | LLMToolCall] = []
        output = answer.get("output")
        if output is not None and not self.streamed:
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            events.append(LLMTextDelta(text))
        for call in answer.get("calls") or ():
            if not isinstance(call, dict) or call.get("name") not in self._names:
                # Only a server that does not constrain decoding lets this through.
                logger.warning("composed answer: dropped a call to an undeclared tool: %r", call)
                continue
            arguments = call.get("arguments")
            events.append(
                LLMToolCall(
                    ToolCall(
                        new_call_id(),
                        self._names[call["name"]],
                        json.dumps(arguments if arguments is not None else {}),
                    )
                )
            )
        return events
