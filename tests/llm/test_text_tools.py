"""Tool calls written as text: found in any chunking, never spoken, only declared names."""

from __future__ import annotations

from typing import Any

import pytest

from llmrtc.llm import LLMTextDelta, LLMToolCall, TextToolCallParser

NAMES = {"lookupWeather", "book"}


def parse(text: str, *, step: int | None = None) -> list[Any]:
    parser = TextToolCallParser(NAMES)
    events: list[Any] = []
    pieces = [text] if step is None else [text[i : i + step] for i in range(0, len(text), step)]
    for piece in pieces:
        events += parser.feed(piece)
    return events + parser.finish()


def texts(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, LLMTextDelta))


def calls(events: list[Any]) -> list[tuple[str, Any]]:
    return [(e.call.name, e.call.arguments) for e in events if isinstance(e, LLMToolCall)]


CASES = [
    (
        'Sure. <tool_call>{"name": "lookupWeather", "arguments": {"city": "Tokyo"}}'
        "</tool_call> Done.",
        "Sure.  Done.",
        [("lookupWeather", {"city": "Tokyo"})],
    ),
    (
        '{"name": "lookupWeather", "arguments": {"city": "Oslo"}}',
        "",
        [("lookupWeather", {"city": "Oslo"})],
    ),
    (
        '<tools>[{"name": "lookupWeather", "arguments": {"city": "A"}}, '
        '{"name": "book", "parameters": {"n": 2}}]</tools>',
        "",
        [("lookupWeather", {"city": "A"}), ("book", {"n": 2})],
    ),
    (
        '<tools>\n{"name": "lookupWeather", "arguments": {"city": "A"}}\n'
        '{"name": "book", "arguments": {}}\n</tools>',
        "",
        [("lookupWeather", {"city": "A"}), ("book", {})],
    ),
    ('{"function": {"name": "book", "arguments": "{\\"n\\": 1}"}}', "", [("book", '{"n": 1}')]),
    (
        'A JSON example: {"a": 1, "b": "}"} is fine.',
        'A JSON example: {"a": 1, "b": "}"} is fine.',
        [],
    ),
    ("Use a < b and c > d.", "Use a < b and c > d.", []),
    ('{"name": "book", "arguments": {"n": 1}', "", [("book", '{"n": 1}')]),  # never closed
    (
        '[{"name": "book", "arguments": {}}, '
        '{"name": "lookupWeather", "arguments": {"city": "B"}}]',
        "",
        [("book", {}), ("lookupWeather", {"city": "B"})],
    ),
    ('{"name": "invented", "arguments": {}}', "", []),  # call-shaped: never spoken
    ("A list [1, 2] and a set {3}.", "A list [1, 2] and a set {3}.", []),
    (
        'Here:\n```json\n{"name": "book", "arguments": {"n": 3}}\n```\nok',
        "Here:\n\nok",
        [("book", {"n": 3})],
    ),
    ("Code:\n```python\nprint({1: 2})\n```", "Code:\n```python\nprint({1: 2})\n```", []),
    ("An unclosed { brace", "An unclosed { brace", []),
    # Keyed by a declared tool's name: a call to it; by any other key: ordinary JSON.
    ('{"book": {"n": 2}}', "", [("book", {"n": 2})]),
    ('Ok. {"book": {"n": 1}', "Ok. ", [("book", '{"n": 1}')]),  # never closed
    ('Data: {"invented": {"a": 1}}', 'Data: {"invented": {"a": 1}}', []),
    # An imagined tool result is never spoken and never a call, whatever it wraps.
    ('<tool_response>{"book": {"n": 1}}</tool_response> Done.', " Done.", []),
    ('Refunded. <tool_response>{"status": "ok"}</tool_response>', "Refunded. ", []),
    ("Hi <tool_response>it worked", "Hi ", []),  # unclosed at the end
    # Llama-style tags, and closing tags without an opening.
    (
        '<function=lookupWeather>{"city": "Oslo"}</function>',
        "",
        [("lookupWeather", {"city": "Oslo"})],
    ),
    ('<function=invented>{"x": 1}</function>Hi', "Hi", []),
    ('{"name": "book", "arguments": {}}</tool_call>\n', "\n", [("book", {})]),
    ("Done.</tool_response>", "Done.", []),
    # Talk introducing a call (the tool named as code) is dropped with the call.
    (
        "To check, you can use the `lookupWeather` function. Here's how you can call it:\n\n"
        '```json\n{\n  "name": "lookupWeather",\n  "arguments": {"city": "Oslo"}\n}\n```',
        "To check, you can use the ",
        [("lookupWeather", {"city": "Oslo"})],
    ),
    (
        'Call `book()` like this: {"name": "invented", "arguments": {}} ok',
        "Call  ok",
        [],
    ),
    # A tool named as code with no call after it: an answer, released at the end.
    ("The `book` tool is not needed here.", "The `book` tool is not needed here.", []),
    ("Use `grep` or a `book`.", "Use `grep` or a `book`.", []),
]


@pytest.mark.parametrize(("text", "expected_text", "expected_calls"), CASES)
@pytest.mark.parametrize("step", [None, 1, 3, 7])
def test_calls_and_text_in_any_chunking(
    text: str, expected_text: str, expected_calls: list[Any], step: int | None
) -> None:
    events = parse(text, step=step)
    assert texts(events) == expected_text
    assert calls(events) == expected_calls


def test_a_declared_call_that_does_not_parse_keeps_its_raw_arguments() -> None:
    events = parse('<tool_call>{"name": "lookupWeather", "arguments": {"city": "Tok</tool_call>')
    ((name, arguments),) = calls(events)
    assert name == "lookupWeather" and isinstance(arguments, str)
    assert arguments.startswith('{"city": "Tok')
    assert texts(events) == ""


def test_undeclared_names_are_never_calls_and_never_spoken() -> None:
    parser = TextToolCallParser(NAMES)
    events = parser.feed('Hi <tool_call>{"name": "invented", "arguments": {}}</tool_call>there')
    events += parser.finish()
    assert calls(events) == [] and texts(events) == "Hi there"
    assert parser.dropped and "invented" in parser.dropped[0]
    bare = parse('{"name": "invented", "arguments": {}}')
    assert calls(bare) == [] and texts(bare) == ""  # call-shaped JSON is never spoken
    other = parse('{"name": "invented", "color": "red"}')
    assert texts(other) == '{"name": "invented", "color": "red"}'  # other JSON is text


def test_text_before_a_possible_call_streams_immediately() -> None:
    parser = TextToolCallParser(NAMES)
    assert texts(parser.feed("Hello there <to")) == "Hello there "  # "<to" is held back
    assert texts(parser.feed("night is fine")) == "<tonight is fine"
    assert texts(parser.feed(' {"name"')) == " "
    assert calls(parser.feed(': "book", "arguments": {}}')) == [("book", {})]
    assert parser.finish() == []


def test_a_fenced_call_to_an_undeclared_tool_is_dropped_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    parser = TextToolCallParser(set())  # a stage that offers no tools
    text = 'Sure.\n```json\n{"name": "openweathermap", "arguments": {"appid": "YOUR_API_KEY"}}\n```'
    with caplog.at_level(logging.DEBUG, logger="llmrtc.llm.text_tools"):
        events = [*parser.feed(text), *parser.finish()]
    assert [e.text for e in events if isinstance(e, LLMTextDelta)] == ["Sure.\n"]
    assert parser.dropped
    assert all(r.levelno <= logging.DEBUG for r in caplog.records)  # never in a chat


def test_the_refund_the_model_printed_as_a_result_is_neither_run_nor_spoken() -> None:
    # Seen in the support playbook's billing stage: a call-shaped result in a result tag.
    text = '<tool_response>{"issue_refund": {"order_id": "A-17", "amount": 20}}</tool_response>'
    for step in (None, 1, 5):
        parser = TextToolCallParser({"issue_refund", "lookup_order"})
        pieces = [text] if step is None else [text[i : i + step] for i in range(0, len(text), step)]
        events = [event for piece in pieces for event in parser.feed(piece)] + parser.finish()
        assert events == []
        assert parser.dropped == [text]


def test_text_after_a_tool_named_as_code_waits_and_nothing_else_does() -> None:
    parser = TextToolCallParser(NAMES)
    assert texts(parser.feed("Sure, it is sunny. `")) == "Sure, it is sunny. "  # may be a mention
    assert texts(parser.feed("ls` lists files. You can use the `look")) == (
        "`ls` lists files. You can use the "
    )
    assert parser.feed("upWeather` tool. Here:") == []  # held: it may introduce a call
    events = parser.feed('{"name": "lookupWeather", "arguments": {"city": "Oslo"}} Then')
    assert calls(events) == [("lookupWeather", {"city": "Oslo"})] and texts(events) == " Then"
    assert parser.dropped == ["`lookupWeather` tool. Here:"]
    assert parser.finish() == []


def test_an_abort_never_releases_talk_that_may_introduce_a_call() -> None:
    parser = TextToolCallParser(NAMES)
    assert texts(parser.feed("One moment. I will use `book` to ")) == "One moment. I will use "
    assert parser.discard_undecided() == []
    assert parser.dropped == ["`book` to "]


def _stream_cost(parser: TextToolCallParser, text: str) -> float:
    import time

    started = time.perf_counter()
    for index in range(0, len(text), 4):  # 4-character deltas, as a model streams
        parser.feed(text[index : index + 4])
    parser.finish()
    return time.perf_counter() - started


def test_parsing_cost_does_not_grow_with_the_routable_names() -> None:
    """A discovery catalog routes thousands of hidden tools: the parser runs per streamed
    delta inside the voice loop, so its cost must not scan every name (it once took 1.3 s
    per answer with 5 000). Compared with 5 names in the same run (a ratio, not a time)."""
    offered = ["search_tools", "get_tool", "execute_tool", "list_categories", "browse_category"]
    hidden = [f"ns{i % 50}.tool_{i}" for i in range(5000)]
    text = "Sure, let me look that up for you, `maybe` {soon} [1]. " * 20
    few = min(_stream_cost(TextToolCallParser(offered, hidden[:5]), text) for _ in range(3))
    many = min(_stream_cost(TextToolCallParser(offered, hidden), text) for _ in range(3))
    assert many < 5 * few, (many, few)


def test_routable_names_are_calls_in_any_shape_but_only_offered_ones_hold_text() -> None:
    parser = TextToolCallParser(["search_tools"], ["crm.lookup"])
    events = parser.feed('{"name": "crm__lookup", "arguments": {"id": 1}}')
    events += parser.feed(' <function=crm.lookup>{"id": 2}</function> {"crm__lookup": {"id": 3}}')
    events += parser.finish()
    assert calls(events) == [("crm.lookup", {"id": i}) for i in (1, 2, 3)]
    # The model never saw a routable name: naming it as code is just text, spoken at once.
    parser = TextToolCallParser(["search_tools"], ["crm.lookup"])
    assert texts(parser.feed("Use `crm.lookup` for that.")) == "Use `crm.lookup` for that."
    assert texts(TextToolCallParser(["search_tools"]).feed("Try `search_tools` next.")) == "Try "


@pytest.mark.parametrize("step", [None, 3])
def test_seed_002s_flattened_calls_are_calls_and_never_spoken(step: int | None) -> None:
    """What a composed `allow_both` prompt teaches, written as text by a server that ignored
    the schema: a call to a declared tool; to any other name, dropped; never spoken."""
    events = parse('Sure. {"_tool": "lookupWeather", "city": "Oslo"} Done.', step=step)
    assert calls(events) == [("lookupWeather", {"city": "Oslo"})]
    assert texts(events) == "Sure.  Done."
    events = parse('[{"_tool": "book", "room": 7}, {"_tool": "lookupWeather", "city": "Rome"}]')
    assert calls(events) == [("book", {"room": 7}), ("lookupWeather", {"city": "Rome"})]
    assert texts(events) == ""
    events = parse('Ok. {"_tool": "launchMissiles", "target": "x"}', step=step)
    assert calls(events) == [] and texts(events) == "Ok. "
    events = parse('Ok. {"_tool": "lookupWeather", "ci', step=step)  # cut short
    assert texts(events) == "Ok. "
