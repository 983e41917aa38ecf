"""What the user heard of a turn, in the model's own words, and the history cut down to it.

The turn's text (its `TextDelta`s) is counted in whitespace-separated words. Each spoken
segment covers a run of those words (its chunk's raw text); a lead-in sentence dropped at a
tool call covers words that are never spoken. After a barge-in, the words heard are those of
the segments played (all of a finished one, a proportional share of a cut one), and the turn's
assistant messages keep exactly their heard words.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection

from llmrtc.agent.history import ConversationHistory
from llmrtc.llm.messages import AssistantMessage
from llmrtc.voice.playout import Segment
from llmrtc.voice.speakable import speakable

logger = logging.getLogger(__name__)

_WORD = re.compile(r"\S+")


def count_words(text: str) -> int:
    """Whitespace-separated words in `text`."""
    return len(text.split())


class WordLedger:
    """Which words of a turn's text each spoken segment covers."""

    def __init__(self) -> None:
        self._deltas: list[str] = []
        self._cursor = 0  # words of the turn's text accounted for by chunks or skips
        self._spans: list[tuple[Segment, int, int]] = []  # segment, first word, raw words
        self.unspoken: set[int] = set()
        """Words of unfinished lead-ins dropped at a tool call: never spoken, so never heard."""

    def add_delta(self, text: str) -> None:
        """A `TextDelta` of the turn."""
        self._deltas.append(text)

    def add_chunk(self, segment: Segment, raw: str) -> None:
        """A chunk of the text, spoken as `segment` (an empty one for unspeakable text)."""
        words = count_words(raw)
        self._spans.append((segment, self._cursor, words))
        self._cursor += words

    def skip_rest(self, dropped: str = "") -> None:
        """Everything received so far is accounted for: `dropped` is the raw text left
        unspoken at a tool call (its words are `unspoken` if any of it was speakable); after
        a flush this also realigns the count if a chunk's raw text was not exact."""
        total = self.total_words
        if speakable(dropped):
            self.unspoken.update(range(max(self._cursor, total - count_words(dropped)), total))
        self._cursor = total

    def all_but_unspoken(self) -> set[int]:
        """Indices of the turn's words the user heard when nothing cut the reply."""
        return set(range(self.total_words)) - self.unspoken

    @property
    def total_words(self) -> int:
        """Words of the turn's text so far."""
        return count_words("".join(self._deltas))

    def heard(self, seconds_per_char: float, rate: int) -> set[int]:
        """Indices of the turn's words the user heard."""
        heard: set[int] = set()
        for segment, first, raw_words in self._spans:
            if segment.finished:
                share = raw_words
            else:
                spoken = count_words(segment.text)
                said = segment.heard_words(seconds_per_char, rate)
                share = (
                    said if spoken == raw_words else (said * raw_words // spoken if spoken else 0)
                )
            heard.update(range(first, first + share))
        return heard


def cut_to_heard(
    history: ConversationHistory,
    before: Collection[int],
    heard: set[int],
    total_words: int,
    *,
    interrupted: bool = True,
) -> None:
    """Leave only the heard words in the assistant messages the turn added.

    Args:
        history: The handler's history, after the turn ended.
        before: `id()`s of the messages that were in it before the turn began.
        heard: Indices of the turn's words that were heard.
        total_words: Words in the turn's whole text.
        interrupted: A barge-in cut the reply (else only unspoken lead-ins are taken out).

    Each message keeps its heard words as a prefix of its own text (tool calls and every tool
    message stay). After a barge-in the last one left with text is marked `interrupted`; if
    none is, an answer cut before its first word stays as an empty interrupted message (the
    model must know it was cut off, not that it was never asked). Other messages left with
    neither text nor tool calls go. If a stage change cleared earlier messages of the turn,
    the ones left are taken to be the turn's last words.
    """
    mine = [m for m in history.messages if id(m) not in before and isinstance(m, AssistantMessage)]
    offset = total_words - sum(count_words(m.content) for m in mine)
    if offset < 0:
        logger.warning("the turn's messages hold more words than its text; cutting from the start")
        offset = 0
    replacements: list[tuple[AssistantMessage, AssistantMessage | None]] = []
    for message in mine:
        words = count_words(message.content)
        kept = 0
        while kept < words and offset + kept in heard:
            kept += 1
        offset += words
        content = message.content if kept == words else _first_words(message.content, kept)
        if not content.strip() and not message.tool_calls:
            replacements.append((message, None))
        else:
            replacements.append((message, message.model_copy(update={"content": content})))
    last_text = max(
        (i for i, (_, new) in enumerate(replacements) if new is not None and new.content.strip()),
        default=None,
    )
    if interrupted and last_text is not None:
        old, new = replacements[last_text]
        assert new is not None
        replacements[last_text] = (old, new.model_copy(update={"interrupted": True}))
    elif interrupted and replacements and replacements[-1][1] is None:
        old = replacements[-1][0]
        replacements[-1] = (old, old.model_copy(update={"content": "", "interrupted": True}))
    for old, replacement in replacements:
        if replacement != old:
            history.replace(old, replacement)


def _first_words(text: str, count: int) -> str:
    """`text` up to the end of its `count`-th word ("" for 0)."""
    if count <= 0:
        return ""
    return text[: list(_WORD.finditer(text))[count - 1].end()]
