"""`SentenceSegmenter`: a model's streamed text deltas -> speakable sentences, as they arrive.

Each sentence goes to the TTS while the model is still writing the next one, so the cut has to
be decided on a prefix: a `.` is a sentence end only once the character after it is known
(`3.5`, `example.com` and `e.g.` are not), an abbreviation like `etc.` only once the next word
shows whether a new sentence starts. Markdown, fenced code, JSON (tool calls written as text)
and `<tool_call>` tags are tracked while streaming, so no cut falls inside them and none of
them is ever spoken (`llmrtc.voice.speakable` cleans each chunk).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Literal

from llmrtc.llm.scanner import (
    BracketScanner,
    call_scanner,
    looks_like_call_start,
    looks_like_json_start,
)
from llmrtc.voice.speakable import speakable

__all__ = ["SentenceSegmenter", "SpeechChunk", "speakable"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SpeechChunk:
    """One piece of the reply to synthesise.

    For plain prose `text == raw.strip()`, and the chunks' `raw` joined give back the model's
    text (up to trailing whitespace), so "heard up to here" is always a prefix of the answer.
    """

    text: str
    """What to speak: `speakable(raw)`, never empty."""
    raw: str
    """The model's text it came from (including markup and any unspeakable piece before it)."""


# Full-width CJK forms as escapes (they look like ASCII): full stop, !, ?, fullwidth full stop;
# closing brackets and quotes; CJK comma, semicolon, colon, ideographic comma.
_CJK_ENDS = "\u3002\uff01\uff1f\uff0e"
_ENDS = ".!?\u2026" + _CJK_ENDS  # \u2026 is the one-character ellipsis
# What may follow a sentence end and still belong to it: quotes, brackets, and the closing
# marks of markdown emphasis ("**Done.** Next").
_CLOSERS = "\"')]*_~\u201d\u2019\u00bb\u300d\u300f\uff09\u3011"
_CLAUSE_MARKS = ",;:\uff0c\uff1b\uff1a\u3001\u2014\u2013"  # ... em and en dash
_CLAUSE_NEEDS_SPACE = ",;:"
_BOUNDARY_AFTER_END = "{<`"  # a sentence end glued to a tool call or tag still ends it

# Never sentence ends ("Dr. Smith", "e.g. this"). Words as a string: one per line is unreadable.
_ALWAYS_ABBREVIATIONS = frozenset(
    "mr mrs ms mx dr prof rev hon gen col capt lt sgt cpt st mt ft e.g i.e vs cf approx fig "  # noqa: SIM905
    "viz resp dept est".split()
)
# Ends only when the next word starts a sentence ("at 5 p.m. Then" vs "at 5 p.m. today").
_CONTEXT_ABBREVIATIONS = frozenset(
    "etc a.m p.m inc ltd co corp jr sr u.s u.k e.u al no nos vol pp jan feb mar apr jun jul "  # noqa: SIM905
    "aug sep sept oct nov dec".split()
)
_TOKEN_BEFORE = re.compile(r"[\w.]*$")
_SENTENCE_END = re.compile(f"[{re.escape(_ENDS)}]+[{re.escape(_CLOSERS)}]*(?=\\s|$)")
_BLOCK_LINE = re.compile(r"\s*(?:#{1,6}\s|[-*+•]\s|\d{1,3}[.)]\s|\||>|```|~~~)")
_BLOCK_PREFIX = re.compile(r"(?:#{1,6}|[-*+•]|\d{1,3}[.)]?|`{1,2}|~{1,2})")
# Tags whose content is a tool call in the text (the formats small local models write), or the
# model's reasoning (`<think>`): never spoken.
_TAG_NAMES = tuple(
    "tool_call tool_calls tools tool_response function_call function think".split()  # noqa: SIM905
)
_TAG_OPEN = re.compile(rf"<({'|'.join(_TAG_NAMES)})\b[^<>]*>", re.I)
_TAG_NAME = re.compile(r"<([A-Za-z_]*)")

_Mode = Literal["text", "fence", "code", "json", "tag"]
_WAIT = -1  # a step that needs more text before it can decide


class SentenceSegmenter:
    """Cuts streamed model text into `SpeechChunk`s, each as soon as it is certain.

    Cuts fall at sentence ends (`. ! ?`, the ellipsis character and the CJK full stop,
    exclamation and question marks), paragraph breaks and markdown block
    lines (headings, bullets, table rows, code fences), never inside abbreviations (`Dr.`,
    `e.g.`, `U.S.`), decimals, times, URLs, a mid-sentence ellipsis, inline code, JSON or tags.
    The first chunk of a reply may also be cut at a comma, semicolon, colon or dash once it is
    `first_clause_chars` long, so a long opening sentence does not hold up the first audio.

    Example:
        segmenter = SentenceSegmenter()
        for delta in ("Sure. The weather in To", "kyo is sunny, 21 degrees.", " Any"):
            for chunk in segmenter.push(delta):
                speak(chunk.text)            # "Sure.", then "The weather in Tokyo is ..."
        for chunk in segmenter.flush():      # end of the model's answer: "Any"
            speak(chunk.text)

    Args:
        first_clause_chars: Speakable characters the first chunk needs before a clause mark
            may cut it (0: never cut at clauses). The default, 30 (five or six words), cuts
            the offline model's usual opening "The current temperature in Oslo is 4 degrees
            Celsius, and ..." at its comma: the first audio starts ~8 tokens (0.4 s at its
            ~20 tokens/s) sooner, and a clause that long still sounds like a phrase.

    Raises:
        ValueError: `first_clause_chars` is negative or not an int.
    """

    def __init__(self, *, first_clause_chars: int = 30) -> None:
        """Make a segmenter for one reply (reusable: `flush()` starts the next)."""
        if (
            isinstance(first_clause_chars, bool)
            or not isinstance(first_clause_chars, int)
            or first_clause_chars < 0
        ):
            raise ValueError(f"first_clause_chars must be an int >= 0, got {first_clause_chars!r}")
        self._first_clause_chars = first_clause_chars
        self._reset()

    def _reset(self) -> None:
        self._pending = ""  # model text not cut yet
        self._carry = ""  # cut pieces with nothing speakable, prefixed to the next chunk's raw
        self._pos = 0  # _pending is scanned up to here
        self._mode: _Mode = "text"
        self._close = ""  # what ends the current fence / inline code / tag block
        # json: the open span's brackets and strings, by the rules the model readers use
        self._span: BracketScanner | None = None
        self._first = True  # no chunk returned yet: clause cuts allowed
        self._line_start = True  # _pending[0] is at the start of a line

    def push(self, delta: str) -> list[SpeechChunk]:
        """Add a text delta; return the chunks it completed (often none), in order.

        Raises:
            TypeError: `delta` is not a str.
        """
        if not isinstance(delta, str):
            raise TypeError(f"SentenceSegmenter.push takes str, got {type(delta).__name__}")
        self._pending += delta
        chunks: list[SpeechChunk] = []
        while self._pos < len(self._pending):
            cut = self._step()
            if cut == _WAIT:
                break
            if cut:
                chunk = self._cut(cut)
                if chunk is not None:
                    chunks.append(chunk)
        return chunks

    def flush(self) -> list[SpeechChunk]:
        """The reply is complete: return what is left (at most one chunk) and start afresh.

        An unclosed code block, JSON value or tag block is dropped, not spoken.
        """
        raw = self._carry + self._pending
        self._reset()
        text = speakable(raw)
        return [SpeechChunk(text, raw)] if text else []

    def end_of_text(self) -> tuple[list[SpeechChunk], str, str]:
        """The text so far is final (a native tool call follows it): return its chunks (a
        lead-in with no sentence end, "One moment while I check", is spoken whole), the
        unspeakable raw text carried before the rest (a closed code block: kept in the
        history), and the raw rest dropped: text inside an open JSON, code, tag or call span
        (or one that may open one), never spoken. Starts afresh."""
        chunks: list[SpeechChunk] = []
        if self._mode == "text":
            held = self._pending[self._pos : self._pos + 1]  # the character `push` waits on
            # Text before `_pos` was decided as no cut ("3.5", "Dr."); a "." waiting for the
            # next character is at `_pos`, and with no more text it ends its sentence.
            ends = _SENTENCE_END.finditer(self._pending, self._pos)
            cut = max((m.end() for m in ends), default=0)
            chunk = self._cut(cut) if cut else None
            chunks += [chunk] if chunk is not None else []
            if self._pending and not (held and held in "({[<`~"):  # no span may open there
                chunk = self._cut(len(self._pending))
                chunks += [chunk] if chunk is not None else []
        carried, dropped = self._carry, self._pending
        self._reset()
        return chunks, carried, dropped

    # -- scanning -------------------------------------------------------------------------
    # `_step` looks at `_pending[_pos]` and either advances `_pos` (returns 0), returns a cut
    # position (> 0), or returns _WAIT without changing anything (it needs the next delta).

    def _cut(self, at: int) -> SpeechChunk | None:
        piece, self._pending = self._pending[:at], self._pending[at:]
        self._pos = 0  # everything before the cut was decided
        stripped = piece.rstrip(" \t")
        if stripped:
            self._line_start = stripped.endswith("\n")
        raw = self._carry + piece
        text = speakable(raw)
        if not text:
            self._carry = raw
            return None
        self._carry = ""
        self._first = False
        return SpeechChunk(text, raw)

    def _step(self) -> int:
        mode = self._mode
        if mode == "json":
            return self._step_json()
        if mode != "text":
            return self._step_closed_by_marker()
        text, i = self._pending, self._pos
        char = text[i]
        if char == "\n":
            return self._step_newline(i)
        if char in _ENDS:
            return self._step_end(i)
        if char in _CLAUSE_MARKS and self._first:
            return self._step_clause(i)
        if char == "`" or (char == "~" and self._at_line_start(i)):
            return self._step_backticks(i)
        if char in "{[":
            starts = looks_like_json_start(text, i)
            if starts is None:
                return _WAIT
            if starts:
                self._mode, self._span = "json", call_scanner()
                return self._step_json()
        if char == "(":
            # A call written as code (`get_weather(note="a. b")`) is tracked like JSON, so no
            # cut falls inside its arguments.
            starts = looks_like_call_start(text, i)
            if starts is None:
                return _WAIT
            if starts:
                self._mode, self._span = "json", call_scanner()
                return self._step_json()
        if char == "<":
            return self._step_tag(i)
        self._pos = i + 1
        return 0

    def _at_line_start(self, i: int) -> bool:
        j = i - 1
        text = self._pending
        while j >= 0 and text[j] in " \t":
            j -= 1
        return text[j] == "\n" if j >= 0 else self._line_start

    def _step_newline(self, i: int) -> int:
        text = self._pending
        j = i + 1
        while j < len(text) and text[j] in " \t":
            j += 1
        if j >= len(text):
            return _WAIT
        line_begin = text.rfind("\n", 0, i) + 1
        line_is_block = (line_begin > 0 or self._line_start) and _BLOCK_LINE.match(
            text, line_begin, i
        )
        if text[j] == "\n" or line_is_block or _BLOCK_LINE.match(text, j):
            return i if i > 0 else self._advance(i)
        rest = text[j : j + 4]
        if len(text) - j < 4 and _BLOCK_PREFIX.fullmatch(rest):
            return _WAIT  # "1" could become "1. " (a list item): wait for it
        return self._advance(i)

    def _advance(self, i: int) -> int:
        self._pos = i + 1
        return 0

    def _next_visible(self, j: int) -> str | None:
        text = self._pending
        while j < len(text) and text[j].isspace():
            j += 1
        return text[j] if j < len(text) else None

    def _step_end(self, i: int) -> int:
        text = self._pending
        j = i
        while j < len(text) and text[j] in _ENDS:
            j += 1
        while j < len(text) and text[j] in _CLOSERS:
            j += 1
        if j >= len(text):
            return _WAIT
        run = text[i:j]
        if any(c in _CJK_ENDS for c in run):
            return j
        after = text[j]
        if not (after.isspace() or after in _BOUNDARY_AFTER_END):
            return self._advance(i)  # 3.5, example.com, e.g.x, Yahoo!Mail
        if "!" in run or "?" in run:
            return j
        if ".." in run or "…" in run:
            return self._cut_if_new_sentence(i, j)
        token = _TOKEN_BEFORE.search(text, max(0, i - 24), i)
        word = token.group() if token else ""
        if word.isdigit() and (
            self._at_line_start(i - len(word)) or not text[: i - len(word)].strip()
        ):
            return self._advance(i)  # "1." opening a numbered item
        lower = word.lower()
        if lower in _ALWAYS_ABBREVIATIONS or (len(word) == 1 and word.isupper()):
            return self._advance(i)  # Dr. Smith, J. R. R. Tolkien
        if lower in _CONTEXT_ABBREVIATIONS or ("." in word and word.replace(".", "").isalpha()):
            return self._cut_if_new_sentence(i, j)
        return j

    def _cut_if_new_sentence(self, i: int, j: int) -> int:
        nxt = self._next_visible(j)
        if nxt is None:
            return _WAIT
        if nxt.islower() or nxt.isdigit():
            return self._advance(i)  # "etc. and", "Well... maybe", "p.m. 5"
        return j

    def _step_clause(self, i: int) -> int:
        text = self._pending
        if self._first_clause_chars:
            clause = speakable(self._carry + text[: i + 1])
            if len(clause) >= self._first_clause_chars:
                if text[i] not in _CLAUSE_NEEDS_SPACE:
                    return i + 1
                if i + 1 >= len(text):
                    return _WAIT
                if text[i + 1].isspace():
                    return i + 1
        return self._advance(i)

    def _step_backticks(self, i: int) -> int:
        text = self._pending
        char = text[i]
        j = i
        while j < len(text) and text[j] == char:
            j += 1
        run = j - i
        if j >= len(text):
            return _WAIT  # the run may go on: "``" may become a fence, "```" a longer one
        if run >= 3:
            self._mode, self._close = "fence", char * 3
        elif char == "`":
            self._mode, self._close = "code", "`" * run
        else:
            return self._advance(i)  # "~" that is not a fence
        self._pos = j
        return 0

    def _step_tag(self, i: int) -> int:
        text = self._pending
        match = _TAG_OPEN.match(text, i)
        if match:
            self._mode, self._close = "tag", f"</{match.group(1).lower()}"
            self._pos = match.end()
            return 0
        name_match = _TAG_NAME.match(text, i)
        assert name_match is not None  # the pattern matches "<" alone
        name, end = name_match.group(1).lower(), name_match.end()
        if end == len(text):
            if any(tag.startswith(name) for tag in _TAG_NAMES):
                return _WAIT  # "<tool" may become "<tool_call>"
        elif name in _TAG_NAMES and len(text) - end < 200:
            rest = text[end:]
            if ">" not in rest and "<" not in rest and "\n" not in rest:
                return _WAIT  # '<function name="get_weather"' still coming
        return self._advance(i)

    def _step_closed_by_marker(self) -> int:
        text, close = self._pending, self._close
        if self._mode == "code":
            # Inline code ends at its closing backticks or, unclosed, at the end of the line.
            for j in range(self._pos, len(text)):
                if text[j] == "\n":
                    self._mode, self._pos = "text", j
                    return 0
                if text.startswith(close, j):
                    self._mode, self._pos = "text", j + len(close)
                    return 0
            # Resume where a closing "``" split across deltas would start.
            self._pos = max(self._pos, len(text) - len(close) + 1)
            return _WAIT
        haystack = text.lower() if self._mode == "tag" else text
        k = haystack.find(close, self._pos)
        if k < 0:
            self._pos = max(self._pos, len(text) - len(close) + 1)
            return _WAIT
        end = k + len(close)
        if self._mode == "tag":
            gt = text.find(">", end)
            if gt < 0:
                self._pos = k
                return _WAIT
            end = gt + 1
        self._mode, self._pos = "text", end
        return 0

    def _step_json(self) -> int:
        # JSON and calls written as code share one scanner (brackets of all three kinds), fed
        # from where the last delta stopped: it keeps the open strings and depth in between.
        assert self._span is not None  # set with mode "json"
        end = self._span.end(self._pending, self._pos)
        if end is None:
            self._pos = len(self._pending)
            return _WAIT
        self._mode, self._pos, self._span = "text", end, None
        return 0
