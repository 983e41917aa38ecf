"""`speakable`: what of a model's text a voice may say (no markdown, code, JSON or tags).

Models write for screens: `**bold**`, bullets, tables, fenced code, math, emoji, and models
also put their tool calls in the text: bare JSON, `<tool_call>` tags, code-style calls
(`get_weather(city="Tokyo")`) or their chat format's tokens (`[TOOL_CALLS]`,
`<|python_tag|>`). A TTS would read all of it aloud ("asterisk asterisk", "curly brace name
colon"). This module keeps the words and drops the rest; `llmrtc.voice.segmenter` uses it
on every sentence it cuts.
"""

from __future__ import annotations

import html
import logging
import re

# What is JSON or a call is decided by the one call-shape scanner the model readers use too:
# what they hold back as a call, the voice never says.
from llmrtc.llm.scanner import call_end, json_end, looks_like_call_start, looks_like_json_start

__all__ = ["call_end", "json_end", "looks_like_call_start", "looks_like_json_start", "speakable"]

logger = logging.getLogger(__name__)

_FENCE = re.compile(r"(?:```|~~~).*?(?:```|~~~|\Z)", re.DOTALL)
# Tags whose content is machine text (tool calls in the formats small models use) or the
# model's reasoning (`<think>`).
_BLOCK_TAGS = "tool_call|tool_calls|tools|tool_response|function_call|function|think"
_TAG_BLOCK = re.compile(
    rf"<({_BLOCK_TAGS})\b[^>]*>.*?(?:</\1\s*>|\Z)",
    re.DOTALL | re.IGNORECASE,
)
# Tool-call openers of chat formats, each followed by the call up to its closer or the end of
# the text: Mistral `[TOOL_CALLS]`, Llama 3.1 `<|python_tag|>`, Phi / Granite `<|tool_call|>`,
# DeepSeek's `tool calls begin` token (full-width bars and U+2581 for spaces, as escapes).
_MACHINE_BLOCK = re.compile(
    r"(?:\[TOOL_CALLS\]|<\|python_tag\|>|<\|tool_calls?\|>|<\uff5ctool\u2581calls\u2581begin\uff5c>)"
    r".*?(?:<\|/tool_calls?\|>|<\|eo[mt]_id\|>|<\uff5ctool\u2581calls\u2581end\uff5c>|</s>|\Z)",
    re.DOTALL,
)
# Any tag, and special tokens: `<|im_end|>`, DeepSeek's full-width-bar tokens, Mistral's
# `[TOOL_CALLS]` style (capitals with an underscore) and `[INST]`, `[/INST]`, `[ARGS]`.
_TAG = re.compile(
    r"</?[A-Za-z_][\w:.-]*(?:\s[^<>]*)?/?>|<\|[^|<>]*\|>|<\uff5c[^\uff5c<>]*\uff5c>"
    r"|\[/?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\]|\[/?(?:INST|ARGS|SYS|THINK)\]"
)
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
# Line markers: heading, quote, bullet, numbered item, task box (`- [x] done`).
_LINE_MARKER = re.compile(r"^\s*(?:#{1,6}\s+|>\s?|[-*+•]\s+|\d{1,3}[.)]\s+|\[[ xX]\]\s+)+")
_STRONG = re.compile(r"(\*\*|__|~~)(?=\S)(.+?)(?<=\S)\1")
_EMPHASIS = re.compile(
    r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?!\w)|(?<!\w)_(?=\S)([^_\n]+?)(?<=\S)_(?!\w)"
)
# Left-over markup: emphasis marks, backticks, a lone #, braces and brackets of no JSON.
_STRAY = re.compile(r"[*`{}\[\]|]+|~~|(?<!\S)#+(?!\w)")
# Math is not read out ("x caret 2" is noise): `$$...$$`, `\\[...\\]`, `\\(...\\)` and inline
# `$...$`; an inline opener must not be followed by a digit, so "$3.50 and $4" is money.
_MATH = re.compile(
    r"(?<!\\)\$\$.*?(?:\$\$|\Z)|\\\[.*?\\\]|\\\(.*?\\\)"
    r"|(?<![\\$\w])\$(?=[^\s$\d])[^$\n]*?(?<=[^\s\\$])\$(?![\w$])",
    re.DOTALL,
)
# HTML character references (`&amp;`, `&#39;`); the semicolon is required, so `?a=1&notice=2`
# in a URL stays as written.
_ENTITY = re.compile(r"&(?:#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
# Emoji and their modifiers (variation selectors, keycap, skin tones, ZWJ sequences, flags,
# tag sequences): pictures, not words; "I <heart> Tokyo" is read "I Tokyo". A ZWJ goes only
# after an emoji, since scripts like Devanagari use it inside words.
_EMOJI = re.compile(
    "(?:[\U0001f000-\U0001faff\u2600-\u27bf\u2b00-\u2bff\u2300-\u23ff\U000e0020-\U000e007f]"
    "[\ufe0e\ufe0f\u20e3]*\u200d?)+|[\ufe0e\ufe0f\u20e3]"
)
# Footnotes: a marker (`sunny[^1].`) and a definition line (`[^1]: Source: ...`).
_FOOTNOTE = re.compile(r"\[\^[^\]\s]+\]")
_FOOTNOTE_LINE = re.compile(r"^\s*\[\^[^\]\s]+\]:")
# A markdown escape: a backslash before ASCII punctuation means that character, literally.
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?](?!\w))")
_WORDY = re.compile(r"[^\W_]")

_OPENERS = {"{": "}", "[": "]"}
# A name glued to "(" (`get_weather(`, `functions.get_weather(`); prose puts a space first.
_CALL_NAME = re.compile(r"(?<![A-Za-z_])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\(")


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


def _drop_calls(text: str) -> str:
    out: list[str] = []
    start = 0
    match = _CALL_NAME.search(text)
    while match:
        opener = match.end() - 1
        if looks_like_call_start(text, opener) is False:
            match = _CALL_NAME.search(text, match.end())
            continue
        out.append(text[start : match.start()])
        end = call_end(text, opener)
        if end is None:  # unclosed (or cut off before it could tell): a call being written
            return "".join(out)
        start = end
        match = _CALL_NAME.search(text, end)
    out.append(text[start:])
    return "".join(out)


def _inline_code(match: re.Match[str]) -> str:
    code = match.group(1).strip()
    # `Tokyo` or `get_weather` reads as words; `x = f(y)` or a path does not.
    if _PROSE_CODE.fullmatch(code):
        return code.replace("_", " ")
    return ""


def _drop_blocks(lines: list[str]) -> list[str]:
    """`lines` without footnote definitions and table blocks: a header line with a `|`, the
    delimiter row under it, and the rows after it (lines with a `|`), whether or not the rows
    have outer pipes."""
    kept: list[str] = []
    i = 0
    while i < len(lines):
        if "|" in lines[i] and i + 1 < len(lines) and _TABLE_DELIMITER.match(lines[i + 1]):
            i += 2
            while i < len(lines) and "|" in lines[i]:
                i += 1
            continue
        if not _FOOTNOTE_LINE.match(lines[i]):
            kept.append(lines[i])
        i += 1
    return kept


def _clean_line(line: str) -> str:
    if line.lstrip().startswith("|") or _TABLE_RULE.match(line) or _RULE.match(line):
        return ""  # tables and horizontal rules are layout, not speech
    line = _LINE_MARKER.sub("", line)
    # `\*` is a literal `*`, then treated as any `*` (never spoken); a backslash left (a
    # Windows path, `\\`) is never read out either.
    line = _ESCAPE.sub(r"\1", line)
    line = _FOOTNOTE.sub("", line)
    line = _IMAGE.sub("", line)
    line = _LINK.sub(r"\1", line)
    line = _INLINE_CODE.sub(_inline_code, line)
    for _ in range(2):  # nested emphasis: ***both*** or **_this_**
        line = _STRONG.sub(r"\2", line)
        line = _EMPHASIS.sub(lambda m: m.group(1) or m.group(2), line)
    return _STRAY.sub("", line).replace("\\", " ")


def speakable(text: str) -> str:
    """The words of `text` a voice should say: markdown, code and machine text removed,
    whitespace normalised. `""` when nothing speakable is left.

    Removed: fenced code blocks (even unclosed); JSON objects and arrays (tool calls written
    as text, even unclosed); calls written as code (`get_weather(city="Tokyo")`,
    `functions.get_weather({...})`; not prose like "call me (maybe)"); `<tool_call>`-style
    tag blocks (and `<think>` reasoning) and any other tags; calls after `[TOOL_CALLS]`,
    `<|python_tag|>`, `<|tool_call|>` and DeepSeek's tool-call tokens; special tokens
    (`<|im_end|>`, `[INST]`, `[TOOL_RESULTS]`-style bracket tags); tables (with or without
    outer pipes; any other `|` too); horizontal rules; images; footnote markers (`[^1]`)
    and footnote lines (`[^1]: Source ...`); math (`$$...$$`, `$x^2$`, `\\(...\\)`; money
    like `$3.50` stays); emoji (pictures, not words); backslashes (a markdown
    escape `\\X` is read as `X`, then as any `X`: `\\*` is an asterisk, never spoken).

    Kept as their words: headings, bullets and numbered items (marker dropped), `**bold**`,
    `_italics_`, `~~struck~~`, links (`[text](url)` -> text), inline code that reads as
    words (`` `get_weather` `` -> "get weather"; other code is dropped), HTML entities as
    their character (`&amp;` -> "&"). URLs stay as written (the TTS engines read them out;
    a markdown link speaks its text). Plain prose comes back as it went in, stripped.

    Example:
        speakable('**Sunny**, 21 °C. {"name": "log", "arguments": {}}')   # 'Sunny, 21 °C.'
    """
    text = _FENCE.sub("\n", text)
    text = _MACHINE_BLOCK.sub(" ", text)
    text = _TAG_BLOCK.sub(" ", text)
    text = _TAG.sub(" ", text)
    text = _MATH.sub(" ", text)
    text = _drop_calls(text)  # before JSON: `functions.f({...})` goes whole
    text = _drop_json(text)
    # After JSON (an entity in a JSON string must not end it early); a tag written with
    # entities (`&lt;b&gt;`) is a tag.
    text = _TAG.sub(" ", _ENTITY.sub(lambda m: html.unescape(m.group()), text))
    text = _EMOJI.sub(" ", text)
    text = " ".join(_clean_line(line) for line in _drop_blocks(text.splitlines()))
    text = " ".join(text.split())
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    return text if _WORDY.search(text) else ""
