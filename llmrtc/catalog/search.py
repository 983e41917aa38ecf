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
numbers and words of one or two letters (`42`, `EU`, `HR`, `id`) match only whole words, and
numbers ignore leading zeros either way (`42` finds `action_042` and `thing number 42`, `042`
finds `room 42`; `42` never finds `420`, nor `id` `video`, nor `hr` `three`). Number words
(`forty-two`) are not read as numbers.

A query of several words is also scored word by word: every word counts (numbers and
two-letter codes too) but single letters and stop words (`the`, `is`, `up`, `un`, ...); a one-
or two-letter stop word in capitals in a query that has lowercase letters is a code (`US`,
`IT`), and an all-caps query's stop words stay stop words ("REFUND MY ORDER"). Only the first
`MAX_QUERY_WORDS` distinct words count. A number word scores at most 20 (a description
match): it is mostly an argument value (order 42) that tells apart the tools the other words
found. A tool's score is then the better of the whole query's score and the mean of its
words' scores (a word it misses counts 0), so `refund payment` still finds
`billing.issue_refund` (60 for "refund", 0 for "payment": 30).

Ranked by keyword alone, a tool that misses a word that another candidate holds scores that
mean x `PARTIAL_WEIGHT` (below 20): it ranks under every tool that holds the whole query or
all such words, so `thing number 42` puts the tool described "thing number 42" before the
hundred described "thing number ...". A word that no candidate holds (a city, a name, an
order number no tool mentions) tells no tool apart and is not missed: "weather in Paris"
scores `weather.forecast` 40, as "weather" alone scores 80.

Hybrid scores follow seed 001: `10 x cosine similarity + keyword boost`, the boost being
`3 x keyword / 100` (an exact name adds 3, a description match 0.6), so meaning ranks and exact
words break ties and lift literal hits. The boost takes the keyword score without the missing
word penalty: a word the query holds as an argument value ("where is order 42") must not
sink the tool its other words name below one that only shares the number. A tool is a hybrid
hit when a keyword matched or its similarity reaches `MIN_SIMILARITY`.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.ids import WIRE_SEPARATOR
from llmrtc.tools.tool import Tool

__all__ = [
    "EXACT_NAME",
    "KEYWORD_BOOST",
    "MAX_QUERY_WORDS",
    "MIN_SIMILARITY",
    "PARTIAL_WEIGHT",
    "SEMANTIC_WEIGHT",
    "KeywordEntry",
    "KeywordIndex",
    "KeywordMatch",
    "KeywordQuery",
    "SearchHit",
    "hybrid_score",
    "matches",
    "rank_hybrid",
]

EXACT_NAME, NAME_PREFIX, NAME_SUBSTRING = 100.0, 80.0, 60.0
EXACT_TAG, TAG_SUBSTRING, DESCRIPTION = 50.0, 40.0, 20.0
PARTIAL_WEIGHT = DESCRIPTION / EXACT_NAME
"""Keyword ranking: a tool that misses a word of a several-word query (one some other
candidate holds) scores its words' mean x this (< 20): it ranks under every tool that matched
the whole query or every such word."""
MAX_QUERY_WORDS = 32
"""Only a query's first 32 distinct content words are scored: a request to find a tool is a
few words, and each word costs a pass over the candidates."""
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
        *("we", "us", "so", "if", "as", "am", "he", "no", "up", "ok", "go", "hi", "oh"),
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

    def containing(self, words: Iterable[str], whole: Iterable[str] = ()) -> set[int]:
        """Positions of the entries whose text contains any of `words`, or any of `whole` as
        a whole word (a number with any leading zeros): `ab` occurs inside most texts, as a
        word in few, and one regex pass finds those at C speed."""
        found: set[int] = set()
        blob, starts = self.blob, self.starts
        alternatives = "|".join(
            "0*" + re.escape(_bare(word)) if word.isdigit() else re.escape(word)
            for word in sorted(set(whole), key=len, reverse=True)
        )
        if alternatives:
            for hit in re.finditer(rf"(?<!\w)(?:{alternatives})(?!\w)", blob):
                found.add(bisect_right(starts, hit.start()) - 1)
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


def _bare(word: str) -> str:
    """What a word of the query must occur as: a number without its leading zeros."""
    return (word.lstrip("0") or "0") if word.isdigit() else word


def _whole_word(word: str) -> bool:
    # Inside a longer word these are noise: `id` in `video`, `hr` in `three`, `42` in `420`.
    return len(word) <= 2 or word.isdigit()


class _Matcher:
    """How one normalized query (the phrase or one of its words) is found in a tool's text,
    built once per search (a regex compiled per tool per word froze the event loop)."""

    __slots__ = ("needle", "pattern", "pieces", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        pieces = _WORD_PIECES.split(text)  # text, word, text, word, ..., text
        words = pieces[1::2]
        bare = {_bare(word) for word in words}
        self.needle = max(bare, key=len, default=text)
        """A substring of every text this query matches (`KeywordIndex.containing`'s key)."""
        self.pieces = tuple(sorted(bare - {self.needle}, key=len, reverse=True))
        """The other words, each a substring of a matching text too (a cheap first test)."""
        self.pattern: re.Pattern[str] | None = None
        """None: a plain substring search is right."""
        if any(_whole_word(word) for word in words):
            # A number (any leading zeros, both ways) or a one- or two-letter word at the
            # phrase's start or end must be a whole word there.
            regex = "".join(
                "0*" + re.escape(_bare(piece)) if i % 2 and piece.isdigit() else re.escape(piece)
                for i, piece in enumerate(pieces)
            )
            if _whole_word(words[0]) and not pieces[0]:
                regex = r"(?<!\w)" + regex
            if _whole_word(words[-1]) and not pieces[-1]:
                regex += r"(?!\w)"
            self.pattern = re.compile(regex)

    def starts(self, text: str) -> bool:
        if self.pattern is None:
            return text.startswith(self.text)
        return self.pattern.match(text) is not None

    def within(self, text: str) -> bool:
        if self.pattern is None:
            return self.text in text
        return self.needle in text and self.pattern.search(text) is not None

    def rule(self, entry: KeywordEntry) -> tuple[float, str]:
        """Seed 000's best rule for `entry`: its score and the name or tag it matched ("" for
        none or the description; the words of `why` are written only for returned hits)."""
        text = entry.text
        if self.needle not in text or not all(piece in text for piece in self.pieces):
            return 0.0, ""
        query, names, tags = self.text, entry.names, entry.tags
        if query in names:
            return EXACT_NAME, query
        for name in names:
            if self.starts(name):
                return NAME_PREFIX, name
        for name in names:
            if self.within(name):
                return NAME_SUBSTRING, name
        if query in tags:
            return EXACT_TAG, query
        for tag in tags:
            if self.within(tag):
                return TAG_SUBSTRING, tag
        if self.within(entry.description):
            return DESCRIPTION, ""
        return 0.0, ""


_RULE_WORDS = {
    EXACT_NAME: "name {query!r}",
    NAME_PREFIX: "name {field!r} starts with {query!r}",
    NAME_SUBSTRING: "name {field!r} contains {query!r}",
    EXACT_TAG: "tag {query!r}",
    TAG_SUBSTRING: "tag {field!r} contains {query!r}",
    DESCRIPTION: "description contains {query!r}",
}


def _content_word(word: str, codes: bool) -> bool:
    if word.isdigit():
        return True
    if len(word) < 2:  # `a`, and the `l` / `s` of `l'adresse`, `user's`
        return False
    if word.lower() not in _STOP_WORDS:
        return True
    # `US`, `IT` in a query with lowercase letters are codes; in an all-caps query
    # ("REFUND MY ORDER") capitals say nothing, and longer stop words are never codes.
    return codes and len(word) <= 2 and word.isupper()


@dataclass(frozen=True, slots=True)
class KeywordMatch:
    """How a tool matched a `KeywordQuery`: the whole query's rule, then each word's."""

    phrase: float
    """The whole query's seed 000 score (0 when no rule matched)."""
    words: tuple[float, ...]
    """Each content word's score, in `KeywordQuery.terms` order (empty when the phrase is an
    exact name or the query has one word)."""


class KeywordQuery:
    """A search query split and compiled once per search: the normalized phrase, its content
    words (at most `MAX_QUERY_WORDS`), and a matcher for each.

    Scores (see the module's docstring): the better of the whole query's rule and its words'
    mean (a number's word scores at most `DESCRIPTION`). Ranked by keyword alone, a tool that
    misses a word some other candidate holds scores that mean x `PARTIAL_WEIGHT`; a word no
    candidate holds (an order number, a city, a name) tells no tool apart and is not missed.
    """

    __slots__ = ("_phrase", "_terms", "phrase", "terms")

    def __init__(self, query: str) -> None:
        """Split `query` (any text; only its first `MAX_QUERY_WORDS` content words count)."""
        self.phrase = _normalize(query)
        codes = any(char.islower() for char in query)
        words: dict[str, None] = {}
        for word in _WORDS.findall(query):
            if _content_word(word, codes):
                words[word.lower()] = None
                if len(words) == MAX_QUERY_WORDS:
                    break
        terms = tuple(words)
        if len(terms) == 1 and terms[0] == self.phrase:
            terms = ()
        self.terms: tuple[str, ...] = terms
        """The content words (empty when the query is one word)."""
        self._phrase = _Matcher(self.phrase)
        self._terms = tuple(_Matcher(term) for term in terms)

    @property
    def needles(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """What a matching tool's text holds at least one of, for `KeywordIndex.containing`:
        substrings, and one- or two-letter words (or digits) found only as whole words."""
        # Short words by one regex pass; longer ones (numbers too) by str.find, faster when
        # they occur inside few words.
        whole = tuple(m.text for m in self._terms if len(m.needle) <= 2)
        substrings = (m.needle for m in self._terms if len(m.needle) > 2)
        return (self._phrase.needle, *substrings), whole

    def match(self, entry: KeywordEntry) -> KeywordMatch | None:
        """How `entry` matched (None: not at all)."""
        phrase, _ = self._phrase.rule(entry)
        if not self._terms or phrase >= EXACT_NAME:
            return KeywordMatch(phrase, ()) if phrase else None
        words = tuple(self._word_score(i, entry) for i in range(len(self._terms)))
        if not phrase and not any(words):
            return None
        return KeywordMatch(phrase, words)

    def _word_score(self, i: int, entry: KeywordEntry) -> float:
        score, _ = self._terms[i].rule(entry)
        # A number is mostly an argument value (order 42, the last 30 days): it tells apart
        # the tools the other words found, it does not make a tool about something.
        return min(score, DESCRIPTION) if self.terms[i].isdigit() else score

    def held(self, matches: Iterable[KeywordMatch]) -> frozenset[int]:
        """The positions in `terms` of the words some of `matches` hold."""
        found: set[int] = set()
        for match in matches:
            if match.phrase:  # the whole query: every word of it
                return frozenset(range(len(self.terms)))
            found.update(i for i, score in enumerate(match.words) if score)
            if len(found) == len(self.terms):
                break
        return frozenset(found)

    def score(self, match: KeywordMatch, held: frozenset[int] | None = None) -> float:
        """The keyword score (0-100) of `match`: the better of the phrase's score and the
        words' mean; x `PARTIAL_WEIGHT` when the tool misses a word in `held` (None: no
        penalty, what the hybrid blend uses)."""
        if not match.words:
            return match.phrase
        mean = sum(match.words) / len(match.words)
        if held and any(i in held and not score for i, score in enumerate(match.words)):
            mean *= PARTIAL_WEIGHT
        return max(match.phrase, mean)

    def why(self, entry: KeywordEntry, held: frozenset[int] | None = None) -> str:
        """What matched `entry`, in words (for the hits returned only)."""
        match = self.match(entry)
        if match is None:
            return ""
        if not match.words or match.phrase >= self.score(match, held):
            return self._words(self._phrase.rule(entry), self.phrase)
        parts = []
        missed = []
        for i, term in enumerate(self.terms):
            found = self._terms[i].rule(entry)
            if found[0]:
                parts.append(self._words(found, term))
            elif held and i in held:
                missed.append(repr(term))
        if missed:
            parts.append(f"missing {', '.join(missed)}")
        return "words: " + "; ".join(parts)

    @staticmethod
    def _words(found: tuple[float, str], query: str) -> str:
        score, field = found
        return _RULE_WORDS[score].format(query=query, field=field)


def hybrid_score(keyword: float, similarity: float) -> float:
    """Seed 001's blend: `SEMANTIC_WEIGHT x similarity + KEYWORD_BOOST x keyword / 100`."""
    return SEMANTIC_WEIGHT * similarity + KEYWORD_BOOST * keyword / EXACT_NAME


def rank_hybrid(
    similarities: Any,
    candidates: Sequence[int],
    keyword: dict[int, float],
    limit: int,
) -> list[int]:
    """The `limit` best positions by `hybrid_score`, best first, ties in catalog order.

    A candidate is a hit when it matched a keyword or its similarity reaches `MIN_SIMILARITY`.
    Vectorised: at 5 000 tools a Python loop over the candidates cost ~30 ms a search.

    Args:
        similarities: Cosine similarity per catalog position (a numpy vector).
        candidates: The positions the search may return.
        keyword: Position → keyword score for the positions that matched a keyword.
        limit: How many to return.
    """
    import numpy as np

    scores = SEMANTIC_WEIGHT * np.asarray(similarities, dtype=np.float64)
    matched = np.zeros(len(scores), dtype=bool)
    for i, score in keyword.items():
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
