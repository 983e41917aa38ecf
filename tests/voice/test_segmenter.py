"""SentenceSegmenter and speakable: what a voice says of a streamed model answer."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from llmrtc.voice.segmenter import SentenceSegmenter, SpeechChunk, speakable


def segment(text: str, step: int | None = None, **options: int) -> list[SpeechChunk]:
    """Stream `text` in deltas of `step` characters (whole if None), then flush."""
    segmenter = SentenceSegmenter(**options)
    size = step or max(1, len(text))
    chunks: list[SpeechChunk] = []
    for start in range(0, len(text), size):
        chunks += segmenter.push(text[start : start + size])
    return chunks + segmenter.flush()


def texts(text: str, step: int | None = None, **options: int) -> list[str]:
    return [chunk.text for chunk in segment(text, step, **options)]


CASES: list[tuple[str, list[str]]] = [
    ("Hello there. How are you? I'm fine!", ["Hello there.", "How are you?", "I'm fine!"]),
    (
        "Dr. Smith moved to the U.S. He paid $3.50 at 10:30 a.m. today. Then he left.",
        ["Dr. Smith moved to the U.S.", "He paid $3.50 at 10:30 a.m. today.", "Then he left."],
    ),
    (
        "Mr. and Mrs. Jones met Prof. J. R. Tolkien.",
        ["Mr. and Mrs. Jones met Prof. J. R. Tolkien."],
    ),
    ("Pi is 3.14159 and e is 2.718. Nice.", ["Pi is 3.14159 and e is 2.718.", "Nice."]),
    (
        "Visit https://example.com/a.b?x=1 or www.llmrtc.dev/docs. It is good.",
        ["Visit https://example.com/a.b?x=1 or www.llmrtc.dev/docs.", "It is good."],
    ),
    ("Well... maybe not. Hmm… why not?", ["Well... maybe not.", "Hmm… why not?"]),
    ("Wait... What happened?", ["Wait...", "What happened?"]),
    ("Bring apples, pears, etc. and bread.", ["Bring apples, pears, etc. and bread."]),
    ("Bring apples, pears, etc. Then go.", ["Bring apples, pears, etc.", "Then go."]),
    ("Meet at 5 p.m. Then eat.", ["Meet at 5 p.m.", "Then eat."]),
    ("Room No. 5 is free. Yes.", ["Room No. 5 is free.", "Yes."]),
    ("e.g. this one. i.e., that one.", ["e.g. this one.", "i.e., that one."]),
    ('He said "stop." Then he left.', ['He said "stop."', "Then he left."]),
    ("(It works.) Really?! Yes.", ["(It works.)", "Really?!", "Yes."]),
    ("It costs 1,000 dollars. OK.", ["It costs 1,000 dollars.", "OK."]),
    (
        "今日は晴れです。明日は雨でしょう\uff01本当\uff1f",
        ["今日は晴れです。", "明日は雨でしょう\uff01", "本当\uff1f"],
    ),
    (
        "First paragraph without a stop\n\nSecond one",
        ["First paragraph without a stop", "Second one"],
    ),
    ("A soft\nwrapped line. Next.", ["A soft wrapped line.", "Next."]),
    ("Answer: yes", ["Answer: yes"]),
    ("", []),
    ("   \n\n  ", []),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
@pytest.mark.parametrize("step", [None, 1, 2, 3, 5, 8])
def test_sentences_are_cut_where_they_end(text: str, expected: list[str], step: int | None) -> None:
    assert texts(text, step) == expected


MARKDOWN_CASES: list[tuple[str, list[str]]] = [
    (
        "# Weather\nIt is **sunny** in _Tokyo_.",
        ["Weather", "It is sunny in Tokyo."],
    ),
    (
        "Here are the options:\n- **Tokyo**: sunny\n* Paris: rain\n1. Rome\n2) Oslo\n\nPick one.",
        ["Here are the options:", "Tokyo: sunny", "Paris: rain", "Rome", "Oslo", "Pick one."],
    ),
    (
        "Sure.\n```python\nprint('a. b')\nx = {\"a\": 1}\n```\nThat prints it.",
        ["Sure.", "That prints it."],
    ),
    (
        "| City | Temp |\n|------|------|\n| Tokyo | 21 |\nThat's the table.",
        ["That's the table."],
    ),
    (
        "See [the docs](https://x.y/z.html) and ![a chart](c.png). Done.",
        ["See the docs and.", "Done."],
    ),
    ("Call `get_weather` with `{city}`.", ["Call get weather with."]),
    ("> Quoted wisdom here.\n---\nAfter the rule.", ["Quoted wisdom here.", "After the rule."]),
    ("Use ~~old~~ new and ***both*** and __strong__.", ["Use old new and both and strong."]),
    ("snake_case_name stays, 2 * 3 is 6.", ["snake_case_name stays, 2 3 is 6."]),
    ("**Done.** Next _one._ Last.", ["Done.", "Next one.", "Last."]),
]


@pytest.mark.parametrize(("text", "expected"), MARKDOWN_CASES)
@pytest.mark.parametrize("step", [None, 1, 4, 7])
def test_markdown_is_never_spoken(text: str, expected: list[str], step: int | None) -> None:
    assert texts(text, step) == expected


CALL = '{"name": "get_weather", "arguments": {"city": "Tokyo", "note": "a. b! c? }"}}'
MACHINE_CASES: list[tuple[str, list[str]]] = [
    (CALL, []),
    (f"Let me check. {CALL}", ["Let me check."]),
    (f"Let me check.{CALL} Done.", ["Let me check.", "Done."]),
    (f"<tool_call>\n{CALL}\n</tool_call>", []),
    (f"<tools>{CALL}</tools> It is sunny.", ["It is sunny."]),
    ('<function=get_weather>{"city": "Tokyo"}</function> Sunny.', ["Sunny."]),
    (f"One moment.\n{CALL}\nIt is 21 degrees.", ["One moment.", "It is 21 degrees."]),
    ('Results: [{"a": 1}, {"b": [2, 3]}]. Nice.', ["Results:.", "Nice."]),
    ("Cities: ['Tokyo', 'Paris'] are big.", ["Cities: are big."]),
    ("Text <|im_end|> after a special token.", ["Text after a special token."]),
    ('Unclosed call follows. {"name": "x", "arguments": {', ["Unclosed call follows."]),
    ("Unclosed fence.\n```\ncode. more code.", ["Unclosed fence."]),
    ("A set {like this} and a < b or c > d.", ["A set like this and a < b or c > d."]),
]


@pytest.mark.parametrize(("text", "expected"), MACHINE_CASES)
@pytest.mark.parametrize("step", [None, 1, 3, 6])
def test_json_code_and_tags_are_never_spoken(
    text: str, expected: list[str], step: int | None
) -> None:
    assert texts(text, step) == expected


def test_nothing_machine_shaped_is_ever_in_a_chunk() -> None:
    text = (
        "## Plan\nI'll look it up.\n<tool_call>\n" + CALL + "\n</tool_call>\n"
        "```json\n" + CALL + "\n```\n| a | b |\n- **Result**: `21` degrees.\n"
    )
    for step in range(1, 12):
        for chunk in segment(text, step):
            for mark in ("{", "}", "<", ">", "`", "**", "|", "##", '"name"'):
                assert mark not in chunk.text, (step, chunk)


PROSE = (
    "The weather in Tokyo is sunny today. Expect 21 degrees, light wind from the east, and no "
    "rain at all! Tomorrow looks similar... maybe a little cooler. Dr. Lee, of the U.S. "
    "weather service, says the front arrives at 5 p.m. Saturday. Is that early? Perhaps. "
    "Prices rose 3.5% to $4.20 on Jan. 5, per www.example.com/report.html. That is all."
)


@pytest.mark.parametrize("step", [1, 2, 3, 4, 7, 13, None])
def test_prose_raws_rebuild_the_text_and_text_is_raw_stripped(step: int | None) -> None:
    chunks = segment(PROSE, step)
    assert "".join(chunk.raw for chunk in chunks) == PROSE
    for chunk in chunks:
        assert chunk.text == chunk.raw.strip()
    assert len(chunks) >= 8


def test_how_deltas_are_split_never_changes_the_chunks() -> None:
    rng = random.Random(9)
    corpus = [PROSE] + [text for text, _ in CASES + MARKDOWN_CASES + MACHINE_CASES]
    for text in corpus:
        reference = segment(text)
        for _ in range(20):
            segmenter = SentenceSegmenter()
            chunks: list[SpeechChunk] = []
            start = 0
            while start < len(text):
                size = rng.randint(1, 12)
                chunks += segmenter.push(text[start : start + size])
                start += size
            chunks += segmenter.flush()
            assert chunks == reference, text


def test_every_heard_prefix_is_a_prefix_of_the_answer() -> None:
    text = "Intro.\n```\ncode\n```\n" + PROSE + f" {CALL} The end."
    raws = [chunk.raw for chunk in segment(text, 5)]
    for count in range(len(raws) + 1):
        assert text.startswith("".join(raws[:count]))


def test_chunks_come_as_soon_as_a_sentence_is_certain() -> None:
    segmenter = SentenceSegmenter()
    assert segmenter.push("Hello there") == []
    assert segmenter.push(".") == []  # "there.com"? needs the next character
    assert [c.text for c in segmenter.push(" ")] == ["Hello there."]
    assert segmenter.push("It is 3.") == []
    assert segmenter.push("5 now") == []
    assert [c.text for c in segmenter.push("! Ok")] == ["It is 3.5 now!"]
    assert [c.text for c in segmenter.flush()] == ["Ok"]


def test_a_long_first_clause_is_cut_at_a_comma() -> None:
    text = (
        "The weather in Tokyo today is sunny with a light breeze from the east, and "
        "temperatures will reach 21 degrees, which is warm, for the season."
    )
    assert texts(text, 3) == [
        "The weather in Tokyo today is sunny with a light breeze from the east,",
        "and temperatures will reach 21 degrees, which is warm, for the season.",
    ]
    # Short clauses are not cut, and only the first chunk is cut early.
    assert texts("Yes, it is sunny, and warm. Then, later, rain.", 2) == [
        "Yes, it is sunny, and warm.",
        "Then, later, rain.",
    ]
    assert texts(text, 3, first_clause_chars=20) == [
        "The weather in Tokyo today is sunny with a light breeze from the east,",
        "and temperatures will reach 21 degrees, which is warm, for the season.",
    ]
    assert texts("Right now, in Tokyo, it is sunny and warm.", 2, first_clause_chars=20) == [
        "Right now, in Tokyo,",
        "it is sunny and warm.",
    ]
    assert len(texts(text, 3, first_clause_chars=0)) == 1
    # The default cuts the offline model's usual opening at its first clause (30 characters).
    assert texts("The current temperature in Oslo is 4 degrees Celsius, and it rains.", 3) == [
        "The current temperature in Oslo is 4 degrees Celsius,",
        "and it rains.",
    ]
    with pytest.raises(ValueError, match="first_clause_chars"):
        SentenceSegmenter(first_clause_chars=-1)


def test_end_of_text_speaks_a_lead_in_with_no_sentence_end_and_starts_afresh() -> None:
    # With native tool calls the text before a call is final, however it ends.
    segmenter = SentenceSegmenter()
    assert [c.text for c in segmenter.push("Sure. One moment while I check")] == ["Sure."]
    assert segmenter.end_of_text() == (
        [SpeechChunk("One moment while I check", " One moment while I check")],
        "",
        "",
    )
    assert segmenter.end_of_text() == ([], "", "")
    chunks = segmenter.push(
        "It is sunny in Tokyo today, with a light breeze from the east, and warm. "
    )
    assert [c.text for c in chunks] == [
        "It is sunny in Tokyo today, with a light breeze from the east,",  # first chunk again
        "and warm.",
    ]
    assert segmenter.flush() == []


def test_end_of_text_speaks_a_held_back_sentence_end() -> None:
    # A final "." waits for the next character; before a tool call there is none.
    segmenter = SentenceSegmenter()
    assert segmenter.push("Let me check. It costs 3.5 dollars.") == [
        SpeechChunk("Let me check.", "Let me check.")
    ]
    chunks, _, dropped = segmenter.end_of_text()
    assert [c.text for c in chunks] == ["It costs 3.5 dollars."] and dropped == ""
    segmenter.push("Ask Dr. Smith")  # no sentence end: spoken whole
    assert segmenter.end_of_text() == ([SpeechChunk("Ask Dr. Smith", "Ask Dr. Smith")], "", "")


@pytest.mark.parametrize(
    ("lead_in", "spoken"),
    [("Here is what I found:", "Here is what I found:"), ("Checking \U0001f324\ufe0f", "Checking")],
)
def test_end_of_text_speaks_a_lead_in_ending_in_a_colon_or_an_emoji(
    lead_in: str, spoken: str
) -> None:
    segmenter = SentenceSegmenter()
    assert segmenter.push(lead_in) == []
    chunks, _, dropped = segmenter.end_of_text()
    assert [c.text for c in chunks] == [spoken] and dropped == ""


@pytest.mark.parametrize(
    "text", ["Let me call get_weather(", '{"name": "get_weather", ', "Run `get_we"]
)
def test_end_of_text_drops_text_inside_an_open_call_or_code_span(text: str) -> None:
    segmenter = SentenceSegmenter()
    assert segmenter.push(text) == []
    assert segmenter.end_of_text() == ([], "", text)


def test_end_of_text_also_drops_an_open_code_block() -> None:
    segmenter = SentenceSegmenter()
    segmenter.push("Look:\n```\nprint(1)")
    chunks, carried, dropped = segmenter.end_of_text()
    assert chunks == [] and carried == "" and dropped.endswith("print(1)")
    assert [c.text for c in segmenter.push("Fine. ")] == ["Fine."]


def test_end_of_text_returns_a_closed_code_block_apart_from_an_open_span() -> None:
    segmenter = SentenceSegmenter()
    segmenter.push("I will count.\n```sql\nSELECT 1\n```\nLet me call run_sql(")
    chunks, carried, dropped = segmenter.end_of_text()
    assert chunks == [] and "SELECT 1" in carried and dropped.strip() == "Let me call run_sql("


def test_flush_resets_for_the_next_reply() -> None:
    segmenter = SentenceSegmenter()
    segmenter.push("```\nunclosed")
    assert segmenter.flush() == []
    assert [c.text for c in segmenter.push("New reply. ")] == ["New reply."]


def test_push_rejects_non_text() -> None:
    with pytest.raises(TypeError, match="str"):
        SentenceSegmenter().push(b"bytes")  # type: ignore[arg-type]


def test_speech_chunk_is_frozen() -> None:
    chunk = SpeechChunk("Hi.", " Hi.")
    with pytest.raises(AttributeError):
        chunk.text = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Plain prose stays as it is.", "Plain prose stays as it is."),
        ("  spaces \n\t and\nlines  ", "spaces and lines"),
        ("**Bold** and *it* and _it_ and `code_word`.", "Bold and it and it and code word."),
        ("# Title", "Title"),
        ("- item", "item"),
        ("[link](http://a.b)", "link"),
        ('{"name": "x", "arguments": {}}', ""),
        ("<tool_call>anything</tool_call>", ""),
        ("***", ""),
        ("...", ""),
        ("21 °C", "21 °C"),
        ("Tom's `x.y()` call", "Tom's call"),
    ],
)
def test_speakable(text: str, expected: str) -> None:
    assert speakable(text) == expected


def test_import_llmrtc_voice_stays_light() -> None:
    code = (
        "import sys, llmrtc.voice, llmrtc.voice.audio, llmrtc.voice.segmenter, llmrtc.voice.wav;"
        "heavy = [m for m in ('av', 'numpy', 'soxr') if m in sys.modules];"
        "print(','.join(heavy))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""


_PIECES = [
    "Hello",
    " world",
    ".",
    " ",
    "\n",
    "\n\n",
    "Dr.",
    " 3.5",
    "...",
    "!",
    "?",
    ",",
    "e.g.",
    "**",
    "_",
    "`",
    "```",
    "{",
    "}",
    '"',
    "'",
    "[",
    "]",
    "(",
    ")",
    "<tool_call>",
    "</tool_call>",
    "<",
    ">",
    "# ",
    "- ",
    "1. ",
    "| a |",
    ":",
    "\u3002",
    "\u2026",
    "http://a.b/c",
]


def test_random_markup_never_breaks_the_segmenter_or_leaks_machine_text() -> None:
    rng = random.Random(11)
    for _ in range(1000):
        text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 40)))
        first_clause_chars = rng.choice([0, 10, 60])
        segmenter = SentenceSegmenter(first_clause_chars=first_clause_chars)
        chunks: list[SpeechChunk] = []
        start = 0
        while start < len(text):
            size = rng.randint(1, 6)
            chunks += segmenter.push(text[start : start + size])
            start += size
        chunks += segmenter.flush()
        # However the deltas were cut, the chunks are those of the text pushed whole.
        assert chunks == segment(text, first_clause_chars=first_clause_chars), text
        raws = "".join(chunk.raw for chunk in chunks)
        assert text.startswith(raws), text
        for chunk in chunks:
            assert chunk.text and chunk.text == chunk.text.strip()
            for mark in ("{", "}", "`", "<tool_call>", "**", "```"):
                assert mark not in chunk.text, (text, chunk)
