"""`ComposedAnswerParser`: reads a streamed composed answer (seed 002's `{calls, output}`),
streaming the `output` string as it is written and turning the calls into tool calls."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from typing import Any

from llmrtc.llm.scanner import BracketScanner
from llmrtc.llm.text_tools import TextToolCallParser
from llmrtc.llm.types import LLMTextDelta, LLMToolCall
from llmrtc.llm.wire import new_call_id
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.ids import to_wire_name
from llmrtc.tools.schema_form import TOOL_FIELD

__all__ = ["ComposedAnswerParser"]

logger = logging.getLogger(__name__)

_WHITESPACE = " \t\r\n"
_KEYS = ("calls", "output")
_KEYS_SET = frozenset(_KEYS)
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


class ComposedAnswerParser:
    """Reads a streamed composed answer: the `output` string's text as it arrives, the calls
    (and an `output` that is no string, as JSON text) once the object is complete.

    Calls in either composed shape are read: `{"name": ..., "arguments": {...}}`, or seed
    002's `{"_tool": ..., <arguments>...}`; an `output` may come beside calls.

    A server that ignored the schema: an answer that does not start with `{` is read as text
    by `fallback` (calls written as text are still found, seed 002's `{"_tool": ...}` too),
    except a composed object after a preamble or inside a code fence, which is found and
    parsed as here (never spoken). An answer that is one bare call object (either shape) is
    that call when it names an offered tool; any other object without `calls` or `output` is
    dropped with a warning. Text after the composed object is dropped.
    """

    def __init__(
        self,
        tools: Sequence[ToolDefinition],
        routable: Sequence[str] = (),
        fallback: TextToolCallParser | None = None,
    ) -> None:
        """Read an answer to a request offering `tools` (names a call may use: their wire
        names, dotted names, and `routable` names); `fallback` reads an answer that is text."""
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
        self._scan = BracketScanner()  # the object's brackets and strings (strict JSON)
        self._string_start = 0
        self._last_string: str | None = None
        self._key: str | None = None
        self._streaming = False
        self._pending = ""  # an escape sequence not complete yet
        self._fallback = fallback
        self._held = ""  # text answer not given to `fallback` yet: may open a composed object
        self._closed = False  # the composed object is complete: the rest is ignored
        self._bare_call = False  # the object names a tool at its top: a call, not `{calls}`
        self.complete = False
        """After `finish`: the composed object was complete JSON (False: cut short)."""

    @property
    def cut_short(self) -> bool:
        """After `finish`: the composed object never closed (max_tokens), so its calls are
        lost."""
        return not self.complete

    def feed(self, text: str) -> list[LLMTextDelta | LLMToolCall]:
        """Take more of the answer; the `output` text (or, for a text answer, the text and
        calls) that is now known."""
        if self.is_json is False:
            return self._feed_text(text)
        self.text += text
        if self.is_json is None:
            stripped = self.text.lstrip(_WHITESPACE)
            if not stripped:
                return []
            self.is_json = stripped[0] == "{"
            if not self.is_json:
                text, self.text = self.text, ""
                return self._feed_text(text)
        return self._feed_json()

    def _feed_text(self, text: str, *, final: bool = False) -> list[LLMTextDelta | LLMToolCall]:
        """A text answer: text goes to `fallback` up to where a composed object may open
        (a code fence or `{`), held there until decided."""
        self._held += text
        events: list[LLMTextDelta | LLMToolCall] = []
        index = 0
        while True:
            found = [at for at in (self._held.find("```", index), self._held.find("{", index))]
            found = [at for at in found if at >= 0]
            if not found:
                break
            at = min(found)
            opens = _composed_opening(self._held, at)
            if opens is None and not final:
                events += self._give(self._held[:at])  # undecided: hold from `at`
                self._held = self._held[at:]
                return events
            if opens is not None and opens >= 0:
                events += self._give(self._held[:at])
                if self._fallback is not None:
                    events += self._fallback.finish()  # the preamble, decided now
                self.is_json = True
                rest, self.text, self._held = self._held[opens:], "", ""
                return events + self.feed(rest)
            index = at + 1  # not a composed object: text for `fallback`
        # A backtick or two at the end may grow into a code fence: held too.
        keep = 0 if final else min(2, len(self._held) - len(self._held.rstrip("`")))
        events += self._give(self._held[: len(self._held) - keep])
        self._held = self._held[len(self._held) - keep :]
        return events

    def _give(self, text: str) -> list[LLMTextDelta | LLMToolCall]:
        if not text:
            return []
        if self._fallback is None:
            return [LLMTextDelta(text)]
        return list(self._fallback.feed(text))

    def discard_undecided(self) -> list[LLMTextDelta | LLMToolCall]:
        """The stream was cut off: in a text answer, the text before anything that may be a
        call or a composed object (the rest is never spoken)."""
        if self.is_json is not False or self._fallback is None:
            return []
        return list(self._fallback.discard_undecided())

    def _feed_json(self) -> list[LLMTextDelta | LLMToolCall]:
        out: list[str] = []
        source = self.text
        while self._i < len(source) and not self._closed:
            char = source[self._i]
            self._i += 1
            if self._streaming:
                self._stream_char(char, out)
                continue
            scan = self._scan
            if scan.quote:
                scan.step(char)
                if not scan.quote:  # the string closed
                    self._last_string = source[self._string_start : self._i]
            elif char == '"' and scan.depth == 1 and self._key == "output" and not self._bare_call:
                # The answer text starts: its characters are streamed, not scanned.
                self._streaming = True
                self.streamed = True
            elif scan.step(char):
                self._closed = scan.depth == 0  # the object ends: what follows is not it
            elif scan.quote:  # a string opened
                self._string_start = self._i - 1
            elif char == ":" and scan.depth == 1 and self._last_string is not None:
                try:
                    self._key = json.loads(self._last_string)
                except ValueError:
                    self._key = None
                # A bare flattened call (`{"_tool": ..., "output": ...}`): its `output` is an
                # argument, never the answer.
                self._bare_call = self._bare_call or self._key == TOOL_FIELD
            elif char == "," and scan.depth == 1:
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
        """The calls of the complete object and an `output` that was not streamed (for a
        text answer: what `fallback` still held). `complete` says whether the object was
        complete JSON."""
        if self.is_json is False:
            held = self._feed_text("", final=True)
            self.complete = True
            return held + (list(self._fallback.finish()) if self._fallback else [])
        if self.is_json is None:  # nothing but blanks: an empty answer
            self.complete = True
            return []
        try:
            # raw_decode: text after the object (a closing code fence) is not part of it
            answer, _ = json.JSONDecoder().raw_decode(self.text.lstrip(_WHITESPACE))
        except ValueError:
            logger.warning("the composed answer is not complete JSON: %.200r", self.text)
            return []
        self.complete = True
        if not isinstance(answer, dict):
            logger.warning("the composed answer is no JSON object: dropped: %.200r", self.text)
            return []
        if not _KEYS_SET & answer.keys():
            return self._bare(answer)
        events: list[LLMTextDelta | LLMToolCall] = []
        output = answer.get("output")
        if output is not None and not self.streamed:
            text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
            events.append(LLMTextDelta(text))
        for call in answer.get("calls") or ():
            arguments: Any
            if isinstance(call, dict) and TOOL_FIELD in call:
                # Seed 002's shape: the arguments are the call's other keys.
                name = call[TOOL_FIELD]
                arguments = {key: value for key, value in call.items() if key != TOOL_FIELD}
            else:
                name = call.get("name") if isinstance(call, dict) else None
                arguments = call.get("arguments") if isinstance(call, dict) else None
            if not isinstance(name, str) or not name:
                logger.warning("composed answer: dropped a call without a name: %.200r", call)
                continue
            # A call to an undeclared tool (only a server that does not constrain decoding
            # lets one through) keeps its name: the executor answers it `not_found`, and
            # the model can correct itself, as with native calls.
            raw = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
            events.append(LLMToolCall(ToolCall(new_call_id(), self._names.get(name, name), raw)))
        return events

    def _bare(self, answer: dict[str, Any]) -> list[LLMTextDelta | LLMToolCall]:
        """An object without `calls` or `output` (a server that ignored the schema): one call
        in either shape, `{"_tool": <name>, <arguments>...}` or `{"name", "arguments"}`, when
        it names an offered tool; anything else is dropped with a warning (never spoken)."""
        name: Any
        arguments: Any
        if TOOL_FIELD in answer:
            name = answer[TOOL_FIELD]
            arguments = {key: value for key, value in answer.items() if key != TOOL_FIELD}
        else:
            name, arguments = answer.get("name"), answer.get("arguments", {})
        declared = self._names.get(name) if isinstance(name, str) else None
        if declared is None or not isinstance(arguments, dict | str):
            logger.warning(
                "the composed answer has neither 'calls' nor 'output' and is no call to an "
                "offered tool: dropped: %.200r",
                self.text,
            )
            return []
        raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return [LLMToolCall(ToolCall(new_call_id(), declared, raw))]


def _composed_opening(text: str, at: int) -> int | None:
    """Whether a composed object (`{"calls"` or `{"output"`, maybe inside a code fence) opens
    at `at`: the index of its `{`, -1 if not, None while the text is too short to say."""
    i = at
    if text.startswith("```", i):
        i += 3
        while i < len(text) and text[i].isalpha():
            i += 1
        while i < len(text) and text[i] in _WHITESPACE:
            i += 1
    if i >= len(text):
        return None
    if text[i] != "{":
        return -1
    brace = i
    i += 1
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    if i >= len(text):
        return None
    if text[i] != '"':
        return -1
    end = text.find('"', i + 1)
    key = text[i + 1 :] if end < 0 else text[i + 1 : end]
    if end < 0:
        return None if any(k.startswith(key) for k in _KEYS) else -1
    return brace if key in _KEYS else -1
