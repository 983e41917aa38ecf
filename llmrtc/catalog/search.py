"""Catalog search: seed 000's keyword scores, and their blend with semantic similarity.

Keyword scores (seed 000), the best rule that matches a tool:

| rule | score |
| --- | --- |
| the query is a name (dotted `files.read`, local `read`, or an alias) | 100 |
| a name starts with the query | 80 |
| a name contains the query | 60 |
| the query is a tag | 50 |
| a tag contains the query | 40 |
| the description contains the query | 20 |

Matching ignores case and treats `_`, `-` and whitespace alike (`issue refund` finds
`issue_refund`). Words of 3+ letters match inside longer ones (`ship` in `reship_order`);
numbers and words of one or two letters (`42`, `EU`, `HR`, `id`) match only whole words, a
number also with leading zeros (`42` finds `action_042` and `thing number 42`, not `420`,
`video` or `three`).

A query of several words is also scored word by word: every word counts (numbers and
two-letter codes too) but stop words (`the`, `is`, `a`, `un`, ...; a stop word written in
capitals, `US` or `IT`, is a code and counts). A tool's score is then the better of the whole
query's score and the mean of its words' scores when it matched every word. A tool that misses
a word scores that mean x `PARTIAL_WEIGHT` (below 20): it ranks under every tool that holds
the whole query or all its words, so `thing number 42` puts the tool described "thing number
42" before the hundred described "thing number ...", and `refund payment` still finds
`billing.issue_refund` (60 for "refund", 0 for "payment": mean 30, scored 6).

Hybrid scores follow seed 001: `10 x cosine similarity + keyword boost`, the boost being
`3 x keyword / 100` (an exact name adds 3, a description match 0.6), so meaning ranks and exact
words break ties and lift literal hits. A tool is a hybrid hit when a keyword matched or its
similarity reaches `MIN_SIMILARITY`.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.ids import WIRE_SEPARATOR
from llmrtc.tools.tool import Tool

if TYPE_CHECKING:  # _cache imports this module
    from llmrtc.catalog._cache import Snapshot

__all__ = [
    "EXACT_NAME",
    "KEYWORD_BOOST",
    "MIN_SIMILARITY",
    "PARTIAL_WEIGHT",
    "SEMANTIC_WEIGHT",
    "KeywordEntry",
    "KeywordIndex",
    "SearchHit",
    "hybrid_score",
    "keyword_score",
    "matches",
    "rank_hybrid",
    "search_candidates",
]

EXACT_NAME, NAME_PREFIX, NAME_SUBSTRING = 100.0, 80.0, 60.0
EXACT_TAG, TAG_SUBSTRING, DESCRIPTION = 50.0, 40.0, 20.0
PARTIAL_WEIGHT = DESCRIPTION / EXACT_NAME
"""A tool that misses a word of a several-word query scores its words' mean x this (< 20): it
ranks under every tool that matched the whole query or every word of it."""
SEMANTIC_WEIGHT = 10.0
"""Seed 001: the semantic score weighs x10."""
KEYWORD_BOOST = 3.0
"""Seed 001: a keyword match adds up to +3 (an exact name); lesser rules add in proportion."""
MIN_SIMILARITY = 0.15
"""Below this cosine a tool with no keyword match is not a hit. Measured with MiniLM on tool
corpora: a fair paraphrase scores 0.2-0.5 ("give the client their money back" →
`billing.issue_refund`: 0.21), most unrelated tools 0.0-0.15."""

_SEPARATORS = re.compile(r"[\s_\-]+")
_WORDS = re.compile(r"\w+")
_WORD_PIECES = re.compile(r"(\w+)")
_STOP_WORDS = frozenset(
    {
        # Two letters: English and French function words; codes (`id`, `eu`, `hr`) count.
        *("an", "is", "it", "to", "of", "in", "on", "at", "by", "or", "be", "do", "my", "me"),
        *("we", "us", "so", "if", "as", "am", "he", "no"),
        *("un", "le", "la", "de", "du", "je", "ce", "en", "et", "il", "au", "ne", "se", "sa"),
        *("ma", "ta", "tu", "ou"),
        *("the", "and", "for", "with", "from", "into", "about", "please", "can", "could"),
        *("would", "you", "your", "this", "that", "these", "those", "what", "which", "who"),
        *("how", "when", "where", "why", "does", "did", "are", "was", "were", "has", "have"),
        *("had", "will", "want", "need", "some", "any", "all", "its", "our", "their", "them"),
        *("une", "les", "des", "pour", "mon", "mes", "est", "dans", "sur", "avec"),
    }
)


def _normalize(text: str) -> str:
    return _SEPARATORS.sub(" ", text.replace(WIRE_SEPARATOR, ".")).strip().lower()


@dataclass(frozen=True, slots=True)
class KeywordEntry:
    """A tool's searchable text, normalized once per catalog cache."""

    names: tuple[str, ...]
    """Dotted name, local name and aliases."""
    tags: tuple[str, ...]
    description: str
    text: str
    """All of the above in one string: a query word absent from it scores 0 for this tool."""

    @classmethod
    def of(cls, definition: ToolDefinition) -> KeywordEntry:
        """The entry for one tool definition."""
        names = dict.fromkeys(
            _normalize(n) for n in (definition.name, definition.local_name, *definition.aliases)
        )
        tags = tuple(_normalize(tag) for tag in definition.tags)
        # Normalized like the query: "check-in" matches a description saying "check-in".
        description = _SEPARATORS.sub(" ", definition.description).strip().lower()
        return cls(
            names=tuple(names),
            tags=tags,
            description=description,
            text="\n".join((*names, *tags, description)),
        )


class KeywordIndex:
    """Every entry's text in one string, so finding the tools a word occurs in is a C-speed
    `str.find` per occurrence instead of a Python test per tool (5 000 tools: ~10x faster)."""

    def __init__(self, entries: Sequence[KeywordEntry]) -> None:
        """Index `entries` (position i in the catalog snapshot = `entries[i]`)."""
        self.entries = tuple(entries)
        self.starts: list[int] = []
        offset = 0
        for entry in self.entries:
            self.starts.append(offset)
            offset += len(entry.text) + 1
        self.blob = "\0".join(entry.text for entry in self.entries)

    def containing(self, words: Iterable[str]) -> set[int]:
        """Positions of the entries whose text contains any of `words`."""
        found: set[int] = set()
        blob, starts = self.blob, self.starts
        for word in words:
            if not word:
                continue
            at = blob.find(word)
            while at != -1:
                i = bisect_right(starts, at) - 1
                found.add(i)
                # Next occurrence past this entry (one hit per entry is enough).
                at = blob.find(word, starts[i + 1]) if i + 1 < len(starts) else -1
        return found


def _whole_word(word: str) -> bool:
    # Inside a longer word these are noise: `id` in `video`, `hr` in `three`, `42` in `420`.
    return len(word) <= 2 or word.isdigit()


@lru_cache(maxsize=256)
def _pattern(query: str) -> re.Pattern[str] | None:
    """How `query` is found in a tool's text when plain substring search would be wrong: a
    number or one- or two-letter word at its start or end must be a whole word there, and a
    number may have leading zeros (`042`). None: a substring search is right."""
    pieces = _WORD_PIECES.split(query)  # text, word, text, word, ..., text
    words = pieces[1::2]
    if not any(_whole_word(word) for word in words):
        return None
    regex = "".join(
        "0*" + piece if i % 2 and piece.isdigit() else re.escape(piece)
        for i, piece in enumerate(pieces)
    )
    if _whole_word(words[0]) and not pieces[0]:
        regex = r"(?<!\w)" + regex
    if _whole_word(words[-1]) and not pieces[-1]:
        regex += r"(?!\w)"
    return re.compile(regex)


def _starts(text: str, query: str, pattern: re.Pattern[str] | None) -> bool:
    return text.startswith(query) if pattern is None else pattern.match(text) is not None


def _within(text: str, query: str, pattern: re.Pattern[str] | None) -> bool:
    return query in text if pattern is None else pattern.search(text) is not None


def _score_phrase(entry: KeywordEntry, query: str) -> tuple[float, str]:
    names, tags = entry.names, entry.tags
    if query in names:
        return EXACT_NAME, f"name {query!r}"
    pattern = _pattern(query)
    for name in names:
        if _starts(name, query, pattern):
            return NAME_PREFIX, f"name {name!r} starts with {query!r}"
    for name in names:
        if _within(name, query, pattern):
            return NAME_SUBSTRING, f"name {name!r} contains {query!r}"
    if query in tags:
        return EXACT_TAG, f"tag {query!r}"
    for tag in tags:
        if _within(tag, query, pattern):
            return TAG_SUBSTRING, f"tag {tag!r} contains {query!r}"
    if _within(entry.description, query, pattern):
        return DESCRIPTION, f"description contains {query!r}"
    return 0.0, ""


def _content_word(word: str) -> bool:
    if word.isdigit():
        return True
    if len(word) < 2:  # `a`, and the `l` / `s` of `l'adresse`, `user's`
        return False
    # A stop word in capitals is a code: `US`, `IT`, `NO`.
    return word.isupper() or word.lower() not in _STOP_WORDS


def query_terms(query: str) -> tuple[str, tuple[str, ...]]:
    """The normalized query and its content words (empty when the query is one word).

    Every word counts, numbers and two-letter codes included, but stop words (one written in
    capitals is a code and counts) and single letters.
    """
    phrase = _normalize(query)
    words = [w.lower() for w in _WORDS.findall(query) if _content_word(w)]
    if len(words) == 1 and words[0] == phrase:
        return phrase, ()
    return phrase, tuple(dict.fromkeys(words))


def keyword_score(entry: KeywordEntry, phrase: str, terms: tuple[str, ...]) -> tuple[float, str]:
    """A tool's keyword score (0-100) for a query split by `query_terms`, and why.

    The better of the whole query's score and its words' mean; a tool that misses a word gets
    that mean x `PARTIAL_WEIGHT`, below any tool that holds the whole query or all its words.
    """
    if not phrase:
        return 0.0, ""
    score, why = _score_phrase(entry, phrase)
    if terms and score < EXACT_NAME:
        scored = [(_score_phrase(entry, term), term) for term in terms]
        mean = sum(s for (s, _), _ in scored) / len(terms)
        missed = [term for (s, _), term in scored if not s]
        if missed:
            mean *= PARTIAL_WEIGHT
        if mean > score:
            reasons = "; ".join(w for (s, w), _ in scored if s)
            if missed:
                reasons += f"; missing {', '.join(map(repr, missed))}"
            return mean, f"words: {reasons}"
    return score, why


def hybrid_score(keyword: float, similarity: float) -> float:
    """Seed 001's blend: `SEMANTIC_WEIGHT x similarity + KEYWORD_BOOST x keyword / 100`."""
    return SEMANTIC_WEIGHT * similarity + KEYWORD_BOOST * keyword / EXACT_NAME


def rank_hybrid(
    similarities: Any,
    candidates: Sequence[int],
    keyword: dict[int, tuple[float, str]],
    limit: int,
) -> list[int]:
    """The `limit` best positions by `hybrid_score`, best first, ties in catalog order.

    A candidate is a hit when it matched a keyword or its similarity reaches `MIN_SIMILARITY`.
    Vectorised: at 5 000 tools a Python loop over the candidates cost ~30 ms a search.

    Args:
        similarities: Cosine similarity per catalog position (a numpy vector).
        candidates: The positions the search may return.
        keyword: Position → (keyword score, why) for the positions that matched a keyword.
        limit: How many to return.
    """
    import numpy as np

    scores = SEMANTIC_WEIGHT * np.asarray(similarities, dtype=np.float64)
    matched = np.zeros(len(scores), dtype=bool)
    for i, (score, _) in keyword.items():
        scores[i] += KEYWORD_BOOST * score / EXACT_NAME
        matched[i] = True
    allowed = np.zeros(len(scores), dtype=bool)
    allowed[np.asarray(candidates, dtype=np.int64)] = True
    pool = np.flatnonzero(allowed & (matched | (similarities >= MIN_SIMILARITY)))
    if len(pool) > limit:
        # Keep every position tied with the limit-th score, so catalog order can break ties.
        cut = np.partition(scores[pool], len(pool) - limit)[len(pool) - limit]
        pool = pool[scores[pool] >= cut]
    return sorted(pool.tolist(), key=lambda i: (-scores[i], i))[:limit]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One search result: the tool, its rank score, and what matched."""

    tool: Tool
    score: float
    """Keyword searches: the keyword score (0-100). Hybrid: `hybrid_score(keyword, similarity)`."""
    keyword: float
    """The keyword score alone (0-100)."""
    similarity: float | None
    """Cosine similarity of the query and the tool's text; None in keyword-only search."""
    why: str
    """The rules that matched, in words (for logs, `llmrtc tools --search`, and tests)."""


def matches(tool: Tool, namespace: str | None, tag: str | None) -> bool:
    """Whether `tool` is in `namespace` and has `tag` (None: any)."""
    definition = tool.definition
    return (namespace is None or definition.namespace == namespace) and (
        tag is None or tag in definition.tags
    )


def search_candidates(
    snapshot: Snapshot,
    namespace: str | None,
    tag: str | None,
    ids: frozenset[str] | None,
    permits: Callable[[Tool], bool] | None,
) -> Sequence[int]:
    """Positions of the tools a search may return: in `namespace`, with `tag`, among `ids`,
    permitted, and only the highest such version of each name (the model and users pick a
    tool by name). None filters nothing."""
    tools = snapshot.tools
    if namespace is None and tag is None and permits is None and ids is None:
        return snapshot.latest
    chosen = []
    for versions in snapshot.versions:
        for i in versions:
            tool = tools[i]
            if ids is not None and tool.definition.tool_id not in ids:
                continue
            if matches(tool, namespace, tag) and (permits is None or permits(tool)):
                chosen.append(i)
                break
    return sorted(chosen)
