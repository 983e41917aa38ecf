"""`speakable`: what of a model's text a voice may say (no markdown, code, JSON or tags).

Models write for screens: `**bold**`, bullets, tables, fenced code, and small local models
also put their tool calls in the text as bare JSON or inside `<tool_call>` tags. A TTS would
read all of it aloud ("asterisk asterisk", "curly brace name colon"). This module keeps the
words and drops the rest; `llmrtc.voice.segmenter` uses it on every sentence it cuts.
"""

from __future__ import annotations

import re

__all__ = ["json_end", "looks_like_json_start", "speakable"]

_FENCE = re.compile(r"(?:```|~~~).*?(?:```|~~~|\Z)", re.DOTALL)
# Tags whose content is machine text (tool calls in the formats small models use).
_TAG_BLOCK = re.compile(
    r"<(tool_call|tool_calls|tools|tool_response|function_call|function)\b[^>]*>.*?(?:</\1\s*>|\Z)",
    re.DOTALL | re.IGNORECASE,
)
_TAG = re.compile(r"</?[A-Za-z_][\w:.-]*(?:\s[^<>]*)?/?>|<\|[^|<>]*\|>")
_IMAGE = re.compile(r"!\[[^\]\n]*\]\([^)\n]*\)")
_LINK = re.compile(r"\[([^\]\n]+)\](?:\([^)\n]*\)|\[[^\]\n]*\])")
_INLINE_CODE = re.compile(r"`+([^`\n]*)`+")
_PROSE_CODE = re.compile(r"[\w\s.,'!?:-]*[^\W\d_][\w\s.,'!?:-]*")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")
# A GFM table's delimiter row, with or without outer pipes ("---|:--:", "| --- | --- |"): at
# least one pipe, so a lone "---" stays a horizontal rule.
_CELL = r"\s*:?-+:?\s*"
_TABLE_DELIMITER = re.compile(rf"^\s*\|?{_CELL}(?:\|{_CELL})+\|?\s*$|^\s*\|{_CELL}\|\s*$")
_RULE = re.compile(r"^\s*(?:[-*_]\s*){3,}$")
_LINE_MARKER = re.compile(r"^\s*(?:#{1,6}\s+|>\s?|[-*+•]\s+|\d{1,3}[.)]\s+)+")
_STRONG = re.compile(r"(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1")
_EMPHASIS = re.compile(
    r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?!\w)|(?<!\w)_(?=\S)([^_\n]+?)(?<=\S)_(?!\w)"
)
# Left-over markup: emphasis marks, backticks, a lone #, braces and brackets of no JSON.
_STRAY = re.compile(r"[*`{}\[\]|]+|~~|(?<!\S)#+(?!\w)")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?](?!\w))")
_WORDY = re.compile(r"[^\W_]")

_OPENERS = {"{": "}", "[": "]"}


def looks_like_json_start(text: str, index: int) -> bool | None:
    """Whether the `{` or `[` at `index` starts JSON (an object or an array), not prose.

    `{` followed by a quote or `}` is an object; `[` followed by `{`, `[`, a quote, a digit,
    `-` or `]` is an array (a markdown link's `[text]` is not). `None`: the text ends before
    it can tell (a streaming caller waits for more).
    """
    opener = text[index]
    rest = text[index + 1 :].lstrip()
    if not rest:
        return None
    first = rest[0]
    if opener == "{":
        return first in "\"'}"
    if opener == "[":
        return first in "{[\"']-" or first.isdigit()
    return False


def json_end(text: str, index: int) -> int | None:
    """The index just past the JSON value starting at `text[index]` (`{` or `[`), or `None`
    if it is not closed yet. Brackets inside strings and escaped quotes are skipped."""
    depth = 0
    quote = ""
    escaped = False
    for i in range(index, len(text)):
        char = text[i]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            # A single quote opens a string only where JSON (or a Python dict) could have one,
            # so an apostrophe in a prose value outside quotes does not derail the count.
            before = text[index:i].rstrip()[-1:]
            if char == '"' or before in ("{", "[", ",", ":"):
                quote = char
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _drop_json(text: str) -> str:
    out: list[str] = []
    start = 0
    i = 0
    while i < len(text):
        if text[i] in _OPENERS and looks_like_json_start(text, i):
            end = json_end(text, i)
            out.append(text[start:i])
            if end is None:  # unclosed: the rest is a call still being written
                return "".join(out)
            start = i = end
            continue
        i += 1
    out.append(text[start:])
    return "".join(out)


def _inline_code(match: re.Match[str]) -> str:
    code = match.group(1).strip()
    # `Tokyo` or `get_weather` reads as words; `x = f(y)` or a path does not.
    if _PROSE_CODE.fullmatch(code):
        return code.replace("_", " ")
    return ""


def _drop_tables(lines: list[str]) -> list[str]:
    """`lines` without table blocks: a header line with a `|`, the delimiter row under it, and
    the rows after it (lines with a `|`), whether or not the rows have outer pipes."""
    kept: list[str] = []
    i = 0
    while i < len(lines):
        if "|" in lines[i] and i + 1 < len(lines) and _TABLE_DELIMITER.match(lines[i + 1]):
            i += 2
            while i < len(lines) and "|" in lines[i]:
                i += 1
            continue
        kept.append(lines[i])
        i += 1
    return kept


def _clean_line(line: str) -> str:
    if line.lstrip().startswith("|") or _TABLE_RULE.match(line) or _RULE.match(line):
        return ""  # tables and horizontal rules are layout, not speech
    line = _LINE_MARKER.sub("", line)
    line = _IMAGE.sub("", line)
    line = _LINK.sub(r"\1", line)
    line = _INLINE_CODE.sub(_inline_code, line)
    for _ in range(2):  # nested emphasis: ***both*** or **_this_**
        line = _STRONG.sub(r"\2", line)
        line = _EMPHASIS.sub(lambda m: m.group(1) or m.group(2), line)
    return _STRAY.sub("", line)


def speakable(text: str) -> str:
    """The words of `text` a voice should say: markdown, code and machine text removed,
    whitespace normalised. `""` when nothing speakable is left.

    Removed: fenced code blocks (even unclosed), JSON objects and arrays (tool calls written
    as text, even unclosed), `<tool_call>`-style tag blocks and any other tags, tables (with
    or without outer pipes; any other `|` too), horizontal rules, images. Kept as their
    words: headings, bullets and numbered items (marker dropped), `**bold**`, `_italics_`,
    `~~struck~~`, links (`[text](url)` -> text),
    inline code that reads as words (`` `get_weather` `` -> "get weather"; other code is
    dropped). Plain prose comes back as it went in, stripped.

    Example:
        speakable('**Sunny**, 21 °C. {"name": "log", "arguments": {}}')   # 'Sunny, 21 °C.'
    """
    text = _FENCE.sub("\n", text)
    text = _TAG_BLOCK.sub(" ", text)
    text = _TAG.sub(" ", text)
    text = _drop_json(text)
    text = " ".join(_clean_line(line) for line in _drop_tables(text.splitlines()))
    text = " ".join(text.split())
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    return text if _WORDY.search(text) else ""
