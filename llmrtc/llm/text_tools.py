"""Tool calls written as text, for models without native tool calling.

Small models write calls as `<tool_call>{json}</tool_call>`, as bare JSON objects, inside
`<tools>…</tools>`, in a json code fence, as `<function=NAME>{args}</function>`, keyed by the
tool's name (`{"issue_refund": {args}}`), or in seed 002's composed shape
(`{"_tool": "issue_refund", <args>...}`, what a composed prompt teaches).
`TextToolCallParser` finds them in streamed text: text around the calls still streams as text;
text that may be the start of a call is held back until decided (a voice must never speak
JSON); only declared tool names are accepted; and a call that names a declared tool but does
not parse still becomes a `ToolCall` carrying the raw string, so the executor answers it with
`invalid_arguments` and the model can correct itself.

Tool-protocol markup is never spoken: `<tool_response>…</tool_response>` (a result the model
imagined) is dropped with what it wraps, and stray closing tags are dropped. A declared tool
named as code (`` `lookupWeather` ``) is how these models introduce a call ("you can use the
`lookupWeather` function. Here's how:"): from that mention on, text is held until a call (then
it is dropped: it only described the call) or the end of the answer (then it is released).
Normal answers never name a tool as code, so they still stream at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import Collection
from typing import Any

from llmrtc.llm.scanner import (
    ARGUMENTS_FIELD,
    NAME_FIELD,
    json_end,
    looks_like_calls,
    may_open_json,
    names_a_call,
)
from llmrtc.llm.types import LLMTextDelta, LLMToolCall
from llmrtc.llm.wire import new_call_id, render_text_call, render_tool_prompt
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.ids import from_wire_name, to_wire_name
from llmrtc.tools.schema_form import TOOL_FIELD

# The renderers live in wire.py (history rendering needs them, and the parser needs none of
# wire.py's messages); re-exported here, where the text-tools API always was.
__all__ = ["TextToolCallParser", "new_call_id", "render_text_call", "render_tool_prompt"]

logger = logging.getLogger(__name__)

# Opening, closing, and whether the wrapper is explicitly a call (its content is never spoken)
# or only possibly one (a code fence: released as text when it holds no call).
_WRAPPERS = (
    ("<tool_call>", "</tool_call>", True),
    ("<tools>", "</tools>", True),
    ("```json", "```", False),
    ("```", "```", False),
)
# `<function=NAME>{args}</function>` (Llama 3.x style): the name is in the tag.
_FUNCTION_TAG = "<function="
_FUNCTION_CLOSE = "</function>"
# A result the model imagined: never spoken and never a call (acting on it could repeat a
# side effect such as a refund), whatever it wraps.
_RESPONSE_TAG, _RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
# Closing tags without their opening: markup, never spoken.
_STRAY_CLOSINGS = ("</tool_call>", "</tools>", _RESPONSE_CLOSE, _FUNCTION_CLOSE)
_TAGS = (
    *(opening for opening, _, _ in _WRAPPERS),
    _FUNCTION_TAG,
    _RESPONSE_TAG,
    *_STRAY_CLOSINGS,
)
# `{"issue_refund": {` : a call keyed by the tool's name (the name is checked afterwards).
_KEYED = re.compile(r'\{\s*"([^"\\]+)"\s*:\s*\{')

ParsedEvent = LLMTextDelta | LLMToolCall


class TextToolCallParser:
    """Incrementally separates text from tool calls in a streamed answer.

    Example:
        parser = TextToolCallParser({"lookupWeather"})
        for delta in deltas:
            for event in parser.feed(delta):
                ...  # LLMTextDelta or LLMToolCall
        for event in parser.finish():
            ...
    """

    def __init__(self, tool_names: Collection[str], routable_names: Collection[str] = ()) -> None:
        """Accept calls to `tool_names` (offered) and `routable_names` (not offered, but run
        when called: a discovery catalog's hidden tools, or refused ones the executor answers).

        A namespaced name (`crm.lookup`) is accepted in its wire form (`crm__lookup`, what the
        prompts show) too; calls always come out named by the declared name. Only offered names
        written as code (`` `name` ``) hold text back: the model never saw the others.

        The cost per streamed delta does not grow with the number of names: calls are found
        by their shape and their names looked up in a set (a catalog may route thousands).
        """
        self._names = frozenset((*tool_names, *routable_names))
        self._buffer = ""
        self.dropped: list[str] = []
        """Text that was not spoken: call-like text naming no declared tool, imagined tool
        results, and the talk that introduced a call (for diagnostics)."""
        # Talk about a tool, held since a declared name appeared as code: dropped if a call
        # follows, released at the end otherwise. None: not holding.
        self._talk: str | None = None
        # "`name`" and "`name(": an offered tool written as code.
        spellings = {spelling for name in tool_names for spelling in (name, to_wire_name(name))}
        self._mentions = tuple(f"`{name}{end}" for name in sorted(spellings) for end in ("`", "("))

    @property
    def cut_short(self) -> bool:
        """Always False: a call cut short in text is still a call (the executor answers its
        broken arguments), never lost."""
        return False

    def _resolve(self, name: object) -> str | None:
        """The declared name `name` spells (itself or its wire form), or None."""
        if not isinstance(name, str):
            return None
        if name in self._names:
            return name
        dotted = from_wire_name(name)
        return dotted if dotted != name and dotted in self._names else None

    def _keyed_match(self, text: str) -> re.Match[str] | None:
        """`{"name": {` opening `text`, when `name` is an accepted tool."""
        match = _KEYED.match(text)
        return match if match is not None and self._resolve(match.group(1)) else None

    def feed(self, delta: str) -> list[ParsedEvent]:
        """Add streamed text; returns what is decided so far."""
        self._buffer += delta
        return self._drain(final=False)

    def finish(self) -> list[ParsedEvent]:
        """The stream ended: decide everything still held back."""
        events = self._drain(final=True)
        if self._talk:  # no call followed: it was an answer that named a tool
            events.append(LLMTextDelta(self._talk))
        self._talk = None
        return events

    def _drain(self, *, final: bool) -> list[ParsedEvent]:
        events: list[ParsedEvent] = []
        while self._buffer:
            start = self._candidate_start()
            if start is None:
                hold = 0 if final else self._partial_tag_suffix()
                self._emit_text(events, self._buffer[: len(self._buffer) - hold])
                self._buffer = self._buffer[len(self._buffer) - hold :]
                break
            self._emit_text(events, self._buffer[:start])
            self._buffer = self._buffer[start:]
            consumed = self._consume_candidate(events, final=final)
            if not consumed:
                break  # wait for more text
        return events

    def discard_undecided(self) -> list[ParsedEvent]:
        """The stream was cut off (abort): release the text before anything that may be a
        call, and drop the rest (a half-written call must never be spoken)."""
        start = self._candidate_start()
        text = self._buffer if start is None else self._buffer[:start]
        self._buffer = ""
        if self._talk is not None:  # it may have introduced a call: never spoken
            self.dropped.append(self._talk + text)
            self._talk = None
            return []
        return [LLMTextDelta(text)] if text else []

    def _candidate_start(self) -> int | None:
        positions = [self._buffer.find(tag) for tag in (*_TAGS, *self._mentions)]
        for opener in "{[":
            at = self._buffer.find(opener)
            while at >= 0 and not may_open_json(self._buffer, at):
                at = self._buffer.find(opener, at + 1)
            positions.append(at)
        found = [p for p in positions if p >= 0]
        return min(found) if found else None

    def _partial_tag_suffix(self) -> int:
        """Length of a buffer suffix that could still grow into a tag or a tool mention."""
        tags = (*_TAGS, *self._mentions)
        for length in range(min(len(self._buffer), max(map(len, tags))), 0, -1):
            suffix = self._buffer[-length:]
            if any(tag.startswith(suffix) for tag in tags):
                return length
        return 0

    def _consume_candidate(self, events: list[ParsedEvent], *, final: bool) -> bool:
        buffer = self._buffer
        for closing in _STRAY_CLOSINGS:
            if buffer.startswith(closing):
                self._buffer = buffer[len(closing) :]
                return True
        if buffer.startswith(_RESPONSE_TAG):
            return self._consume_response(final=final)
        if buffer.startswith(_FUNCTION_TAG):
            return self._consume_function(events, final=final)
        mention = next((m for m in self._mentions if buffer.startswith(m)), None)
        if mention is not None:
            if self._talk is None:
                self._talk = ""
            self._emit_text(events, mention)  # held with the talk
            self._buffer = buffer[len(mention) :]
            return True
        for opening, closing, explicit in _WRAPPERS:
            if buffer.startswith(opening):
                end = buffer.find(closing, len(opening))
                if end < 0:
                    if not final:
                        return False
                    inner, rest = buffer[len(opening) :], ""  # unclosed at the end: still a call
                    whole = buffer
                else:
                    inner, rest = buffer[len(opening) : end], buffer[end + len(closing) :]
                    whole = buffer[: end + len(closing)]
                shaped = explicit or looks_like_calls(inner)
                if not self._emit_calls(events, inner, explicit=shaped):
                    self._emit_text(events, whole)  # a code block without a call: just text
                self._buffer = rest
                return True
        closed = json_end(buffer, 0, single_quotes=False)
        if closed is None:
            if not final:
                return False
            # Never closed. A call cut short (it names a tool) is a call or is dropped; any
            # other brace was text.
            if self._keyed_match(buffer) is not None or names_a_call(buffer):
                self._emit_calls(events, buffer, explicit=True)
            else:
                self._emit_text(events, buffer)
            self._buffer = ""
            return True
        chunk = buffer[:closed]
        if not self._emit_calls(events, chunk, explicit=looks_like_calls(chunk)):
            self._emit_text(events, chunk)  # JSON that is not a call is just text
        self._buffer = buffer[closed:]
        return True

    def _consume_response(self, *, final: bool) -> bool:
        """`<tool_response>…</tool_response>`: dropped whole, even unclosed at the end."""
        end = self._buffer.find(_RESPONSE_CLOSE)
        if end < 0 and not final:
            return False
        cut = len(self._buffer) if end < 0 else end + len(_RESPONSE_CLOSE)
        self._drop(self._buffer[:cut], "an imagined tool result")
        self._buffer = self._buffer[cut:]
        return True

    def _consume_function(self, events: list[ParsedEvent], *, final: bool) -> bool:
        """`<function=NAME>{args}</function>`: a call to NAME (dropped if not declared)."""
        buffer = self._buffer
        name_end = buffer.find(">", len(_FUNCTION_TAG))
        end = buffer.find(_FUNCTION_CLOSE, max(name_end, 0))
        if (name_end < 0 or end < 0) and not final:
            return False
        cut = len(buffer) if end < 0 else end + len(_FUNCTION_CLOSE)
        name = buffer[len(_FUNCTION_TAG) : name_end].strip() if name_end >= 0 else ""
        raw = (
            buffer[name_end + 1 : end if end >= 0 else len(buffer)].strip() if name_end >= 0 else ""
        )
        self._buffer = buffer[cut:]
        if self._resolve(name) is None:
            self._drop(buffer[:cut], "a tool call naming no declared tool")
            return True
        arguments: Any = raw  # kept raw if it does not parse: the executor answers it
        with contextlib.suppress(ValueError):
            arguments = json.loads(raw) if raw else {}
        if not isinstance(arguments, dict | str):
            arguments = json.dumps(arguments)
        self._call_found()
        events.append(LLMToolCall(self._call(name, arguments)))
        return True

    def _drop(self, text: str, what: str) -> None:
        self.dropped.append(text)
        # Debug only, and the content only there: it is the model's own (possibly sensitive)
        # text, and a warning would land in a chat between turns.
        logger.debug("dropped %s: %.200s", what, text)

    def _call_found(self) -> None:
        """A call (or call-shaped text) came: talk held since a tool mention introduced it."""
        if self._talk is not None:
            if self._talk:
                self.dropped.append(self._talk)
            self._talk = None

    def _emit_text(self, events: list[ParsedEvent], text: str) -> None:
        if text and self._talk is not None:
            self._talk += text
        elif text:
            if events and isinstance(events[-1], LLMTextDelta):
                events[-1] = LLMTextDelta(events[-1].text + text)
            else:
                events.append(LLMTextDelta(text))

    def _emit_calls(self, events: list[ParsedEvent], text: str, *, explicit: bool) -> bool:
        """Turn `text` (one object, several, or an array) into calls; False if it held none."""
        calls = self._calls_in(text.strip())
        if calls is None:
            if explicit:  # call-shaped but naming no declared tool: never speak it
                self._call_found()
                self._drop(text, "a tool call naming no declared tool")
                return True
            return False
        self._call_found()
        for call in calls:
            events.append(LLMToolCall(call))
        return True

    def _calls_in(self, text: str) -> list[ToolCall] | None:
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed = self._objects(text)
        items = parsed if isinstance(parsed, list) else [parsed]
        calls = [call for item in items if (call := self._call_from(item)) is not None]
        return calls or None

    def _objects(self, text: str) -> list[Any]:
        """Several objects in a row, or a broken one (kept as its raw text)."""
        decoder = json.JSONDecoder()
        items: list[Any] = []
        index = 0
        while index < len(text):
            start = text.find("{", index)
            if start < 0:
                break
            try:
                item, index = decoder.raw_decode(text, start)
            except ValueError:
                items.append(text[start:])  # broken JSON: keep the raw text
                break
            items.append(item)
        return items

    def _call_from(self, item: Any) -> ToolCall | None:
        if isinstance(item, str):  # a call that did not parse
            keyed = self._keyed_match(item)
            if keyed is not None:  # {"name": {args... cut short
                raw = item[keyed.end() - 1 :].rstrip()
                if raw.endswith("}") and raw.count("}") > raw.count("{"):
                    raw = raw[:-1]
                return self._call(keyed.group(1), raw)
            match = NAME_FIELD.search(item)
            if match is None or self._resolve(match.group(1)) is None:
                return None
            raw = item
            found = ARGUMENTS_FIELD.search(item)
            if found is not None:
                raw = item[found.end() :].rstrip()
                if raw.endswith("}") and raw.count("}") > raw.count("{"):
                    raw = raw[:-1]
            return self._call(match.group(1), raw)
        if not isinstance(item, dict):
            return None
        if isinstance(item.get("function"), dict):  # {"function": {"name", "arguments"}}
            item = item["function"]
        if isinstance(item.get(TOOL_FIELD), str):  # seed 002: {"_tool": name, <arguments>...}
            if self._resolve(item[TOOL_FIELD]) is None:
                return None
            flat = {key: value for key, value in item.items() if key != TOOL_FIELD}
            return self._call(item[TOOL_FIELD], flat)
        if len(item) == 1:  # {"issue_refund": {args}}: keyed by a declared tool's name
            ((key, value),) = item.items()
            if self._resolve(key) is not None and isinstance(value, dict):
                return self._call(key, value)
        name = item.get("name")
        if self._resolve(name) is None:
            return None
        arguments = item.get("arguments", item.get("parameters", {}))
        if not isinstance(arguments, dict | str):
            arguments = json.dumps(arguments)
        return self._call(name, arguments)

    def _call(self, name: str, arguments: dict[str, Any] | str) -> ToolCall:
        """A parsed call, named by the declared name whatever spelling the model used."""
        declared = self._resolve(name)
        assert declared is not None  # callers resolved it first
        return ToolCall(new_call_id(), declared, arguments)
