"""The call-shape scanner: where JSON (or a call written as code) opens and closes in a model's
text, and whether it is shaped like a tool call. One set of rules for the three readers that
must agree on it: the text-calls parser (`TextToolCallParser`), the composed answer parser,
and the voice's "never speak this" filter (`llmrtc.voice.speakable`)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from llmrtc.tools.schema_form import TOOL_FIELD

__all__ = [
    "ARGUMENTS_FIELD",
    "NAME_FIELD",
    "BracketScanner",
    "call_end",
    "call_scanner",
    "call_shaped",
    "json_end",
    "looks_like_call_start",
    "looks_like_calls",
    "looks_like_json_start",
    "may_open_json",
    "names_a_call",
]

logger = logging.getLogger(__name__)

NAME_FIELD = re.compile(r'"name"\s*:\s*"([^"]+)"')
"""`"name": "<tool>"` inside a call, even one that does not parse."""
ARGUMENTS_FIELD = re.compile(r'"(?:arguments|parameters)"\s*:\s*')
"""Where a call's arguments begin, even in one that does not parse."""
_TOOL_KEY = re.compile(r'"_tool"\s*:\s*"')

# Where a small model's JSON may begin (strict: a quoted key, `{}`, an array of objects) ...
_JSON_OBJECT_START = re.compile(r'\{\s*(?:"|\}|$)')
_JSON_ARRAY_START = re.compile(r"\[\s*(?:\{|$)")
# ... and, for what a voice must not say, anything JSON-like (`{name: get_weather}` too).
_KEY = re.compile(r"[A-Za-z_]\w*")
_NAME_BEFORE = re.compile(r"(?<![A-Za-z_])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")

# Single quotes open a string only where a JS-ish value may start: an apostrophe in a prose
# value outside quotes must not derail the count.
_JSON_QUOTE_AFTER = "{[,:"
_CALL_QUOTE_AFTER = "([{,:="


class BracketScanner:
    """Walks text a character at a time, counting brackets outside strings.

    Strings are double-quoted (with backslash escapes); with `quote_after`, a single quote also
    opens one when the last non-blank character before it is one of those. Incremental: the
    composed answer parser feeds it as the answer streams; `end` scans a whole span.
    """

    __slots__ = ("_closes", "_opens", "_quote_after", "depth", "escaped", "last", "quote")

    def __init__(self, *, opens: str = "{[", closes: str = "}]", quote_after: str = "") -> None:
        """Count `opens` against `closes`; `quote_after`: see the class."""
        self._opens, self._closes, self._quote_after = opens, closes, quote_after
        self.depth = 0
        """Brackets open now."""
        self.quote = ""
        """The quote of the string the scanner is in, or `""`."""
        self.escaped = False
        self.last = ""
        """The last non-blank character seen."""

    def step(self, char: str) -> int:
        """Take one character: +1 when it opened a bracket, -1 when it closed one, else 0."""
        change = 0
        if self.quote:
            if self.escaped:
                self.escaped = False
            elif char == "\\":
                self.escaped = True
            elif char == self.quote:
                self.quote = ""
        elif char == '"' or (char == "'" and self.last and self.last in self._quote_after):
            self.quote = char
        elif char in self._opens:
            self.depth += 1
            change = 1
        elif char in self._closes:
            self.depth -= 1
            change = -1
        if not char.isspace():
            self.last = char
        return change

    def end(self, text: str, index: int) -> int | None:
        """The index just past the bracket closing the one at `text[index]`, or None if it is
        not closed yet."""
        step = self.step
        for i in range(index, len(text)):
            if step(text[i]) < 0 and self.depth == 0:
                return i + 1
        return None


def json_end(text: str, index: int, *, single_quotes: bool = True) -> int | None:
    """The index just past the JSON value starting at `text[index]` (`{` or `[`), or `None`
    if it is not closed yet. Brackets inside strings and escaped quotes are skipped;
    `single_quotes`: `'...'` strings count too (as models write JSON-ish text; False for text
    that is parsed as JSON)."""
    quote_after = _JSON_QUOTE_AFTER if single_quotes else ""
    return BracketScanner(quote_after=quote_after).end(text, index)


def call_scanner() -> BracketScanner:
    """A scanner for a call written as code (or JSON inside one): `( [ {` all counted, and a
    single quote opens a string where a value may start (after `( [ { , : =`). `call_end`
    scans with it; the voice's segmenter feeds one as the text streams."""
    return BracketScanner(opens="([{", closes=")]}", quote_after=_CALL_QUOTE_AFTER)


def call_end(text: str, index: int) -> int | None:
    """The index just past the `)` closing the call arguments opened at `text[index]`, or
    `None` if they are not closed yet. Brackets inside strings are skipped."""
    return call_scanner().end(text, index)


def may_open_json(text: str, start: int) -> bool:
    """Whether the `{` or `[` at `start` can begin a JSON object (or an array of objects), as
    a call is written: anything else (`{unclosed`, `[1, 2]`) is plain text and need not be
    held back."""
    pattern = _JSON_OBJECT_START if text[start] == "{" else _JSON_ARRAY_START
    return pattern.match(text, start) is not None


def looks_like_json_start(text: str, index: int) -> bool | None:
    """Whether the `{` or `[` at `index` starts JSON (an object or an array), not prose.

    `{` followed by a quote, `}` or an unquoted `key:` (`{name: get_weather}`, as small
    models write) is an object; `[` followed by `{`, `[`, a quote, a digit,
    `-` or `]` is an array (a markdown link's `[text]` is not). `None`: the text ends before
    it can tell (a streaming caller waits for more).
    """
    opener = text[index]
    rest = text[index + 1 :].lstrip()
    if not rest:
        return None
    first = rest[0]
    if opener == "{":
        if first in "\"'}":
            return True
        key = _KEY.match(rest)
        if not key:
            return False
        after = rest[key.end() :].lstrip()
        return (after[0] == ":") if after else None  # "{like this}" is prose
    if opener == "[":
        return first in "{[\"']-" or first.isdigit()
    return False


def looks_like_call_start(text: str, index: int) -> bool | None:
    """Whether the `(` at `index` opens the arguments of a call written as code, not prose.

    A call: a name glued to the `(` (`get_weather(`, `functions.get_weather(`) and arguments
    that are `key=` pairs, JSON, a string or nothing (`city="Tokyo"`, `{"city": ...}`,
    `'Oslo'`, `)`). "call me (maybe)" and "f(x)" are prose. `None`: the text ends before
    it can tell (a streaming caller waits for more).
    """
    if not _NAME_BEFORE.search(text, max(0, index - 120), index):
        return False
    rest = text[index + 1 :].lstrip()
    if not rest:
        return None
    if rest[0] in "{[\"')":
        return True
    key = _KEY.match(rest)
    if not key:
        return False
    after = rest[key.end() :].lstrip()
    if not after:
        return None
    if after[0] != "=":
        return False
    if len(after) == 1:
        return None
    return after[1] != "="  # `x==1` is a comparison, not an argument


def call_shaped(item: Any) -> bool:
    """Whether a parsed JSON value is one tool call, in any shape models write (whatever tool
    it names): `{"name", "arguments"|"parameters"}`, OpenAI's `{"function": {...}}`, or seed
    002's `{"_tool": name, <arguments>...}`."""
    if isinstance(item, dict) and isinstance(item.get("function"), dict):
        item = item["function"]  # {"type": "function", "function": {"name", "arguments"}}
    return isinstance(item, dict) and (
        isinstance(item.get(TOOL_FIELD), str)  # seed 002's {"_tool": name, <arguments>...}
        or (isinstance(item.get("name"), str) and ("arguments" in item or "parameters" in item))
    )


def names_a_call(text: str) -> bool:
    """Whether text that does not parse (cut short, or several objects) still has a call's
    fields: a name and arguments, or seed 002's `"_tool"`."""
    named = NAME_FIELD.search(text) and ARGUMENTS_FIELD.search(text)
    return bool(named or _TOOL_KEY.search(text))


def looks_like_calls(text: str) -> bool:
    """Whether JSON text is shaped like tool calls (one, or an array of them), even of
    undeclared tools: never speak it."""
    try:
        parsed: Any = json.loads(text)
    except ValueError:
        # Broken or several objects: a name and arguments are enough to keep it unsaid.
        return names_a_call(text)
    items = parsed if isinstance(parsed, list) else [parsed]
    return bool(items) and all(call_shaped(item) for item in items)
