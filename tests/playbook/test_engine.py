"""Playbook models, loading, validation and the pure engine (no model, no I/O)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from llmrtc import ToolCall, ToolRegistry, tool
from llmrtc.playbook import (
    CustomCondition,
    IntentCondition,
    KeywordCondition,
    LLMConfig,
    LLMDecisionCondition,
    MaxTurnsCondition,
    Playbook,
    PlaybookEngine,
    PlaybookError,
    Stage,
    StageHookEvent,
    TimeoutCondition,
    ToolCallCondition,
    Transition,
    TransitionAction,
    TurnFacts,
    load_playbook,
    load_playbook_tools,
    to_mermaid,
    validate_playbook,
)
from llmrtc.tools.calls import ToolCallResult

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


def playbook(**fields: Any) -> Playbook:
    """A playbook from plain data: stages a (initial) and b (terminal) unless given."""
    data: dict[str, Any] = {
        "id": "p",
        "initial_stage": "a",
        "stages": [{"id": "a"}, {"id": "b", "terminal": True}],
        "transitions": [],
    }
    data.update(fields)
    return Playbook.model_validate(data)


def move(
    transition_id: str, condition: dict[str, Any], target: str = "b", **extra: Any
) -> dict[str, Any]:
    action = {"target_stage": target, **extra.pop("action", {})}
    return {
        "id": transition_id,
        "from_stage": extra.pop("from_stage", "a"),
        "condition": condition,
        "action": action,
        **extra,
    }


def ok(call: ToolCall, result: Any = "done") -> ToolCallResult:
    return ToolCallResult(call.call_id, call.name, "ok", result)


def failed(call: ToolCall) -> ToolCallResult:
    return ToolCallResult(call.call_id, call.name, "error", error="boom")


@tool
async def known_tool(x: str) -> str:
    """A registered tool."""
    return x


# Models -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "data", "missing"),
    [
        (Playbook, {"stages": [{"id": "a"}], "initial_stage": "a"}, "id"),
        (Playbook, {"id": "p", "initial_stage": "a"}, "stages"),
        (Playbook, {"id": "p", "stages": [{"id": "a"}]}, "initial_stage"),
        (Stage, {"name": "A"}, "id"),
        (
            Transition,
            {"from_stage": "a", "condition": {"type": "max_turns", "count": 1}, "action": {}},
            "id",
        ),
        (Transition, {"id": "t", "condition": {"type": "llm_decision"}}, "from_stage"),
        (Transition, {"id": "t", "from_stage": "a", "action": {"target_stage": "b"}}, "condition"),
        (Transition, {"id": "t", "from_stage": "a", "condition": {"type": "intent"}}, "action"),
        (TransitionAction, {"clear_history": True}, "target_stage"),
    ],
)
def test_required_fields_are_required(model: Any, data: dict[str, Any], missing: str) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(data)
    assert missing in {str(e["loc"][0]) for e in info.value.errors()}


@pytest.mark.parametrize(
    ("condition", "key"),
    [
        ({"type": "tool_call"}, "tool_name"),
        ({"type": "keyword"}, "keywords"),
        ({"type": "intent"}, "intent"),
        ({"type": "max_turns"}, "count"),
        ({"type": "timeout"}, "seconds"),
        ({"type": "custom"}, "evaluate"),
    ],
)
def test_each_condition_requires_its_own_key(condition: dict[str, Any], key: str) -> None:
    with pytest.raises(ValidationError) as info:
        Transition.model_validate(
            {"id": "t", "from_stage": "a", "condition": condition, "action": {"target_stage": "b"}}
        )
    assert key in str(info.value)


def test_plain_condition_dicts_validate_into_their_class_by_type() -> None:
    expected = {
        "tool_call": (ToolCallCondition, {"tool_name": "x", "arguments": {"a": 1}}),
        "keyword": (KeywordCondition, {"keywords": ["bye"]}),
        "intent": (IntentCondition, {"intent": "billing"}),
        "llm_decision": (LLMDecisionCondition, {"description": "when asked"}),
        "max_turns": (MaxTurnsCondition, {"count": 2}),
        "timeout": (TimeoutCondition, {"seconds": 1.5}),
        "custom": (CustomCondition, {"evaluate": "pkg.mod:fn"}),
    }
    book = playbook(
        transitions=[
            move(f"t-{kind}", {"type": kind, **fields}) for kind, (_, fields) in expected.items()
        ]
    )
    for transition, (kind, (cls, fields)) in zip(book.transitions, expected.items(), strict=True):
        assert isinstance(transition.condition, cls)
        assert transition.condition.type == kind
        for key, value in fields.items():
            assert getattr(transition.condition, key) == value
    keyword = book.transitions[1].condition
    intent = book.transitions[2].condition
    assert isinstance(keyword, KeywordCondition) and keyword.source == "user"
    assert isinstance(intent, IntentCondition) and intent.min_confidence == 0.5


def test_unknown_condition_type_extra_keys_and_bad_values_are_rejected() -> None:
    with pytest.raises(ValidationError, match="sometimes"):
        playbook(transitions=[move("t", {"type": "sometimes"})])
    with pytest.raises(ValidationError, match="colour"):
        playbook(stages=[{"id": "a", "colour": "red"}])
    with pytest.raises(ValidationError):
        playbook(transitions=[move("t", {"type": "keyword", "keywords": ["x"], "source": "bot"})])
    with pytest.raises(ValidationError):
        playbook(transitions=[move("t", {"type": "max_turns", "count": 0})])
    with pytest.raises(ValidationError):
        playbook(transitions=[move("t", {"type": "timeout", "seconds": 0})])
    with pytest.raises(ValidationError):
        playbook(transitions=[move("t", {"type": "intent", "intent": "x", "min_confidence": 2})])
    with pytest.raises(ValidationError, match="module:function"):
        playbook(transitions=[move("t", {"type": "custom", "evaluate": "no_colon"})])
    with pytest.raises(ValidationError):
        LLMConfig(temperature=3)
    with pytest.raises(ValidationError):
        LLMConfig(max_tokens=0)
    with pytest.raises(ValidationError):
        LLMConfig(top_p=0)


def test_priority_is_any_int_including_negative() -> None:
    book = playbook(
        transitions=[
            move("low", {"type": "max_turns", "count": 1}, priority=-5),
            move("high", {"type": "max_turns", "count": 1}, priority=3),
        ]
    )
    assert [t.priority for t in book.transitions] == [-5, 3]
    engine = PlaybookEngine(book)
    assert [t.id for t in engine.candidates()] == ["high", "low"]


def test_playbook_stage_lookup_names_known_stages() -> None:
    book = playbook()
    assert book.stage("b").terminal
    with pytest.raises(KeyError, match="'a', 'b'"):
        book.stage("zzz")


# Loading ------------------------------------------------------------------------------------

SMALL_YAML = """\
id: small
name: Small
description: A small playbook.
version: "2"
initial_stage: a
tools_file: tools/small_tools.py
global_tools: [known_tool]
global_system_prompt: Be brief.
default_llm_config: {temperature: 0.3}
metadata: {owner: tests}
stages:
  - id: a
    system_prompt: Stage A.
    metadata: {color: blue}
  - id: b
    terminal: true
transitions:
  - id: a-to-b
    from_stage: a
    condition: {type: keyword, keywords: [done]}
    action: {target_stage: b}
"""

TOOLS_PY = '''\
from llmrtc import tool


@tool
async def known_tool(x: str) -> str:
    """Known."""
    return x
'''


def write_small(directory: Path, suffix: str = ".yaml") -> Path:
    (directory / "tools").mkdir(exist_ok=True)
    (directory / "tools" / "small_tools.py").write_text(TOOLS_PY)
    path = directory / f"small{suffix}"
    if suffix == ".json":
        import yaml

        path.write_text(json.dumps(yaml.safe_load(SMALL_YAML)))
    else:
        path.write_text(SMALL_YAML)
    return path


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".json"])
def test_load_playbook_reads_yaml_and_json_alike(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_small(tmp_path, suffix)
    monkeypatch.chdir(tmp_path.parent)  # tools_file is relative to the playbook, not the cwd
    book = load_playbook(path)
    assert book.id == "small" and book.name == "Small" and book.version == "2"
    assert book.metadata == {"owner": "tests"} and book.stages[0].metadata == {"color": "blue"}
    assert book.global_tools == ["known_tool"] and book.global_system_prompt == "Be brief."
    assert PlaybookEngine(book).snapshot()["playbook_version"] == "2"
    assert book.default_llm_config == LLMConfig(temperature=0.3)
    assert book.source_path == str(path)
    assert [s.id for s in book.stages] == ["a", "b"]
    registry = load_playbook_tools(book)
    assert registry.names() == ["known_tool"]


def test_load_playbook_tools_needs_a_tools_file() -> None:
    with pytest.raises(ValueError, match="names no tools_file"):
        load_playbook_tools(playbook())


def test_a_missing_tools_file_is_a_playbook_error(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(SMALL_YAML)  # tools/small_tools.py is not there
    with pytest.raises(PlaybookError, match=r"p\.yaml[\s\S]*tools_file \(line 6\)"):
        load_playbook(path)


BAD_FILES = {
    "extra_field": (
        """\
        id: p
        initial_stage: a
        stages:
          - id: a
            terminal: true
          - id: b
            colour: red
        """,
        "stages[1].colour",
        7,
    ),
    "missing_field": (
        """\
        id: p
        initial_stage: a
        stages:
          - id: a
        transitions:
          - id: t
            from_stage: a
            condition:
              type: keyword
              source: any
            action: {target_stage: a}
        """,
        "transitions[0].condition.keywords",
        9,  # the condition mapping: the missing key's parent
    ),
    "extra_condition_key": (
        """\
        id: p
        initial_stage: a
        stages:
          - id: a
        transitions:
          - id: t
            from_stage: a
            condition:
              type: max_turns
              count: 1
              every: 2
            action: {target_stage: a}
        """,
        "transitions[0].condition.every",
        11,
    ),
    "unknown_tool": (
        """\
        id: p
        initial_stage: a
        tools_file: tools.py
        stages:
          - id: a
            terminal: true
            tools:
              - known_tool
              - nope_tool
        """,
        "stages[0].tools[1]",
        9,
    ),
    "unknown_stage": (
        """\
        id: p
        initial_stage: a
        stages:
          - id: a
        transitions:
          - id: t
            from_stage: a
            condition: {type: max_turns, count: 1}
            action:
              target_stage: nowhere
        """,
        "transitions[0].action.target_stage",
        10,
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_load_errors_name_the_file_the_key_path_and_the_line(tmp_path: Path, case: str) -> None:
    text, path, line = BAD_FILES[case]
    (tmp_path / "tools.py").write_text(TOOLS_PY)
    file = tmp_path / f"{case}.yaml"
    file.write_text(textwrap.dedent(text))
    with pytest.raises(PlaybookError) as info:
        load_playbook(file)
    message = str(info.value)
    assert f"{case}.yaml" in message
    assert f"{path} (line {line})" in message
    assert isinstance(info.value, ValueError)
    assert info.value.findings and all(f.severity == "error" for f in info.value.findings)


def test_json_errors_name_the_key_path_without_a_line(tmp_path: Path) -> None:
    file = tmp_path / "bad.json"
    file.write_text(json.dumps({"id": "p", "initial_stage": "a", "stages": [{"id": "a", "x": 1}]}))
    with pytest.raises(PlaybookError, match=r"bad\.json[\s\S]*stages\[0\]\.x:") as info:
        load_playbook(file)
    assert "(line" not in str(info.value)


def test_unparseable_and_non_mapping_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("id: [unclosed\n")
    with pytest.raises(PlaybookError, match=r"broken\.yaml[\s\S]*cannot parse"):
        load_playbook(broken)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(PlaybookError, match="expected a mapping"):
        load_playbook(listing)
    with pytest.raises(FileNotFoundError):
        load_playbook(tmp_path / "absent.yaml")


def test_shipped_playbooks_load_with_their_tools() -> None:
    support = load_playbook(PLAYBOOKS / "support.yaml")
    weather = load_playbook(PLAYBOOKS / "weather.yaml")
    assert set(load_playbook_tools(support).names()) == {
        "lookup_customer",
        "lookup_order",
        "issue_refund",
        "create_ticket",
    }
    assert load_playbook_tools(weather).names() == ["lookupWeather"]
    for book in (support, weather):
        registry = load_playbook_tools(book)
        assert [f for f in validate_playbook(book, registry) if f.severity == "error"] == []


# Validation ---------------------------------------------------------------------------------


def findings_at(book: Playbook, registry: ToolRegistry | None = None) -> dict[str, Any]:
    return {f.path: f for f in validate_playbook(book, registry)}


def test_validate_reports_reference_errors_without_raising() -> None:
    book = playbook(
        initial_stage="start",
        stages=[{"id": "a", "tools": ["ghost"]}, {"id": "a"}, {"id": "b", "terminal": True}],
        global_tools=["phantom"],
        transitions=[
            move("t1", {"type": "max_turns", "count": 1}, target="nowhere"),
            move("t1", {"type": "max_turns", "count": 2}, from_stage="elsewhere"),
            move("t3", {"type": "tool_call", "tool_name": "missing"}),
        ],
    )
    registry = ToolRegistry([known_tool])
    found = findings_at(book, registry)
    expected = {
        "stages[1].id": "'a'",
        "transitions[1].id": "'t1'",
        "initial_stage": "'start'",
        "transitions[0].action.target_stage": "'nowhere'",
        "transitions[1].from_stage": "'elsewhere'",
        "global_tools[0]": "'phantom'",
        "stages[0].tools[0]": "'ghost'",
        "transitions[2].condition.tool_name": "'missing'",
    }
    for path, named in expected.items():
        assert found[path].severity == "error", path
        assert named in found[path].message, found[path]
    assert "duplicate" in found["stages[1].id"].message
    assert "known_tool" in found["global_tools[0]"].message  # says what is registered


def test_tool_names_are_checked_only_against_a_registry() -> None:
    book = playbook(stages=[{"id": "a", "tools": ["ghost"], "terminal": True}])
    assert validate_playbook(book) == []
    assert [f.path for f in validate_playbook(book, ToolRegistry([known_tool]))] == [
        "stages[0].tools[0]"
    ]


def test_listing_the_built_in_transition_tool_is_an_error() -> None:
    book = playbook(global_tools=["playbook_transition"])
    assert "built in" in findings_at(book)["global_tools[0]"].message


def test_a_forced_tool_choice_must_name_an_offered_tool() -> None:
    book = playbook(stages=[{"id": "a", "tool_choice": {"name": "x"}, "terminal": True}])
    finding = findings_at(book)["stages[0].tool_choice"]
    assert finding.severity == "error" and "'x'" in finding.message


def test_callables_that_cannot_be_imported_are_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pb_rules.py").write_text("def yes(facts):\n    return True\nVALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    book = playbook(
        stages=[
            {"id": "a", "on_enter": "pb_rules:yes", "on_exit": "pb_missing_module:x"},
            {"id": "b", "terminal": True, "on_enter": "pb_rules:VALUE"},
        ],
        transitions=[
            move("ok", {"type": "custom", "evaluate": "pb_rules:yes"}),
            move("bad", {"type": "custom", "evaluate": "pb_rules:absent"}),
        ],
    )
    found = findings_at(book)
    assert set(found) == {
        "stages[0].on_exit",
        "stages[1].on_enter",
        "transitions[1].condition.evaluate",
    }
    assert all(f.severity == "error" for f in found.values())
    assert "pb_missing_module:x" in found["stages[0].on_exit"].message
    assert "'bad'" in found["transitions[1].condition.evaluate"].message


def test_structure_warnings() -> None:
    book = playbook(
        stages=[
            {"id": "a"},
            {"id": "stuck"},
            {"id": "island", "terminal": True},
            {"id": "b", "terminal": True},
        ],
        transitions=[
            move("first", {"type": "max_turns", "count": 1}, target="stuck", priority=5),
            move("never", {"type": "keyword", "keywords": ["x"]}, target="b"),
            move("llm", {"type": "llm_decision"}, target="b"),  # not shadowed: fires mid-turn
            move("from-b", {"type": "max_turns", "count": 1}, from_stage="b", target="a"),
        ],
    )
    found = validate_playbook(book)
    assert all(f.severity == "warning" for f in found)
    by_path = {f.path: f.message for f in found}
    assert "'island'" in by_path["stages[2]"] and "cannot be reached" in by_path["stages[2]"]
    assert "'stuck'" in by_path["stages[1]"] and "no way out" in by_path["stages[1]"]
    assert "'never'" in by_path["transitions[1]"] and "'first'" in by_path["transitions[1]"]
    assert "transitions[2]" not in by_path
    assert "'from-b'" in by_path["stages[3]"]  # a terminal stage's own transitions never fire
    # a shadowing max_turns of a lower priority does not hide the higher ones
    fine = playbook(
        transitions=[
            move("kw", {"type": "keyword", "keywords": ["x"]}, priority=1),
            move("turns", {"type": "max_turns", "count": 1}),
        ]
    )
    assert validate_playbook(fine) == []


def test_every_finding_is_reported_in_one_pass() -> None:
    book = playbook(
        stages=[
            {"id": "a", "tools": ["ghost"]},
            {"id": "stuck"},
            {"id": "island", "terminal": True},
            {"id": "stuck"},  # a duplicate: an error, and checked once for structure
            {"id": "b", "terminal": True},
        ],
        transitions=[
            move("first", {"type": "max_turns", "count": 1}, target="stuck", priority=5),
            move("never", {"type": "keyword", "keywords": ["x"]}, target="b"),
            move("lost", {"type": "max_turns", "count": 2}, target="nowhere", from_stage="b"),
            move("orphan", {"type": "max_turns", "count": 2}, from_stage="elsewhere"),
        ],
    )
    found = {(f.severity, f.path): f.message for f in validate_playbook(book, ToolRegistry())}
    assert set(found) == {
        ("error", "stages[0].tools[0]"),  # unknown tool
        ("error", "stages[3].id"),  # duplicate stage id
        ("error", "transitions[2].action.target_stage"),  # unknown target
        ("error", "transitions[3].from_stage"),  # unknown source
        ("warning", "stages[1]"),  # stuck: no way out
        ("warning", "stages[2]"),  # island: unreachable
        ("warning", "stages[4]"),  # b: a terminal stage with a transition of its own
        ("warning", "transitions[1]"),  # never: shadowed by max_turns 1
    }
    assert "cannot be reached" in found[("warning", "stages[2]")]
    assert "no way out" in found[("warning", "stages[1]")]


def test_an_unknown_initial_stage_still_gets_the_other_structure_checks() -> None:
    book = playbook(initial_stage="zzz", stages=[{"id": "a"}, {"id": "b", "terminal": True}])
    found = {(f.severity, f.path) for f in validate_playbook(book)}
    # no "unreachable" noise from an unknown start, but the dead end is still reported
    assert found == {("error", "initial_stage"), ("warning", "stages[0]")}


def test_runtime_queries_live_on_the_playbook() -> None:
    book = playbook(
        stages=[{"id": "a"}, {"id": "b"}, {"id": "c", "terminal": True}],
        transitions=[
            move("low", {"type": "llm_decision"}, target="b"),
            move("high", {"type": "llm_decision"}, target="b", priority=2),
            move("to-c", {"type": "llm_decision"}, target="c", from_stage="*"),
            move("quiet", {"type": "timeout", "seconds": 5}, target="c"),
            move("b-out", {"type": "max_turns", "count": 1}, target="c", from_stage="b"),
        ],
    )
    assert [t.id for t in book.transitions_from("a")] == ["high", "low", "to-c", "quiet"]
    assert [t.id for t in book.llm_decision_targets("a")] == ["high", "to-c"]
    assert book.timeout_transition("a").id == "quiet"  # type: ignore[union-attr]
    assert book.timeout_transition("b") is None


def test_llm_config_converts_to_model_settings() -> None:
    from llmrtc.llm.settings import ModelSettings

    config = LLMConfig(model="m", temperature=0.2, max_tokens=50, top_p=0.9)
    assert config.to_settings() == ModelSettings("m", 0.2, 50, 0.9)
    assert LLMConfig().to_settings() == ModelSettings()
    assert config.to_settings().merged(LLMConfig(temperature=0.0).to_settings()) == (
        ModelSettings("m", 0.0, 50, 0.9)
    )


def test_engine_and_loader_raise_playbook_errors_listing_the_findings() -> None:
    book = playbook(initial_stage="zzz")
    with pytest.raises(PlaybookError, match=r"initial_stage.*'zzz'") as info:
        PlaybookEngine(book)
    assert isinstance(info.value, ValueError)
    assert [f.path for f in info.value.findings] == ["initial_stage"]


# Engine --------------------------------------------------------------------------------------


def test_a_new_engine_starts_in_the_initial_stage_and_runs_its_on_enter() -> None:
    entered: list[StageHookEvent] = []
    book = playbook(
        stages=[{"id": "a", "on_enter": entered.append}, {"id": "b", "terminal": True}],
        transitions=[move("t", {"type": "max_turns", "count": 1})],
    )
    engine = PlaybookEngine(book)
    assert engine.current_stage.id == "a"
    assert engine.turns_in_stage == 0
    assert dict(engine.context) == {}
    assert engine.transitions == [] and not engine.completed
    assert [(e.stage_id, e.other_stage_id) for e in entered] == [("a", None)]
    assert engine.entry_errors == ()


def test_context_is_read_only_and_changed_through_update_context() -> None:
    engine = PlaybookEngine(playbook(transitions=[move("t", {"type": "max_turns", "count": 9})]))
    with pytest.raises(TypeError):
        engine.context["x"] = 1  # type: ignore[index]
    engine.update_context(x=1, y="two")
    engine.control.update_context(z=3)
    assert dict(engine.context) == {"x": 1, "y": "two", "z": 3}
    with pytest.raises(ValueError, match="between 0 and 1"):
        engine.set_intent("billing", 1.5)


def keyword_engine(source: str = "user", keywords: list[str] | None = None) -> PlaybookEngine:
    condition = {"type": "keyword", "keywords": keywords or ["bye", "that's all"], "source": source}
    return PlaybookEngine(playbook(transitions=[move("kw", condition)]))


@pytest.mark.parametrize(
    ("user", "fires"),
    [
        ("OK, BYE then", True),
        ("Bye.", True),
        ("that's ALL, thanks", True),
        ("bye-bye", True),
        ("byelaws are strict", False),
        ("goodbye", False),  # whole words only
        ("", False),
    ],
)
def test_keyword_is_a_case_insensitive_whole_word_match(user: str, fires: bool) -> None:
    engine = keyword_engine()
    transition = engine.after_turn(user, "assistant says nothing relevant")
    assert (transition is not None) is fires


def test_keyword_source_chooses_whose_words_count() -> None:
    assert keyword_engine("user").after_turn("hello", "bye") is None
    assert keyword_engine("user").after_turn("bye", "hello") is not None
    assert keyword_engine("assistant").after_turn("bye", "hello") is None
    assert keyword_engine("assistant").after_turn("hello", "Bye!") is not None
    assert keyword_engine("any").after_turn("hello", "Bye!") is not None
    assert keyword_engine("any").after_turn("bye", "hello") is not None
    assert keyword_engine("any").after_turn(None, "hello") is None  # a turn without user text


def test_tool_call_fires_only_for_an_ok_call_with_matching_arguments() -> None:
    book = playbook(
        transitions=[
            move(
                "refund",
                {"type": "tool_call", "tool_name": "issue_refund", "arguments": {"order": "A1"}},
            ),
            move("any-note", {"type": "tool_call", "tool_name": "note"}),
        ]
    )
    engine = PlaybookEngine(book)
    refund = ToolCall("c1", "issue_refund", {"order": "A1", "amount": 5})
    other = ToolCall("c2", "issue_refund", {"order": "B2"})
    as_json = ToolCall("c3", "issue_refund", '{"order": "A1"}')
    note = ToolCall("c4", "note", {"text": "x"})
    assert engine.after_tool_batch([refund], [failed(refund)]) is None  # a failed call
    assert engine.after_tool_batch([other], [ok(other)]) is None  # other arguments
    assert engine.after_tool_batch([note], [failed(note)]) is None
    fired = engine.after_tool_batch([other, refund], [ok(other), ok(refund)])
    assert fired is not None and fired.id == "refund"
    fired = engine.after_tool_batch([as_json], [ok(as_json)])
    assert fired is not None and fired.id == "refund"
    fired = engine.after_tool_batch([note], [ok(note)])
    assert fired is not None and fired.id == "any-note"
    # after-answer conditions are not tool-batch conditions, and vice versa
    assert engine.after_turn("x", "y") is None


def test_llm_decision_fires_only_for_the_requested_target() -> None:
    book = playbook(
        stages=[{"id": "a"}, {"id": "b", "terminal": True}, {"id": "c", "terminal": True}],
        transitions=[
            move("to-b", {"type": "llm_decision"}),
            move("to-c", {"type": "llm_decision"}, target="c", from_stage="*"),
        ],
    )
    engine = PlaybookEngine(book)
    assert engine.after_tool_batch([], [], None) is None
    fired = engine.after_tool_batch([], [], "c")
    assert fired is not None and fired.id == "to-c"
    assert engine.llm_decision_transition("b") is not None
    assert engine.llm_decision_transition("a") is None


def test_intent_needs_the_intent_with_enough_confidence_and_resets_per_stage() -> None:
    book = playbook(
        stages=[{"id": "a"}, {"id": "mid"}, {"id": "b", "terminal": True}],
        transitions=[
            move("billing", {"type": "intent", "intent": "billing", "min_confidence": 0.8}, "mid"),
            move("again", {"type": "intent", "intent": "billing"}, from_stage="mid"),
        ],
    )
    engine = PlaybookEngine(book)
    assert engine.after_turn("hi", "hello") is None  # no intent yet
    engine.set_intent("technical", 1.0)
    assert engine.after_turn("hi", "hello") is None
    engine.set_intent("billing", 0.7)
    assert engine.after_turn("hi", "hello") is None  # not confident enough
    engine.control.set_intent("billing", 0.8)
    assert engine.intent == ("billing", 0.8)
    fired = engine.after_turn("hi", "hello")
    assert fired is not None and fired.id == "billing"
    engine.apply(fired)
    assert engine.intent is None  # a new stage starts without the old intent
    assert engine.after_turn("hi", "hello") is None
    engine.set_intent("billing")  # confidence 1.0 by default
    assert engine.after_turn("hi", "hello") is not None


def test_max_turns_fires_when_the_turns_in_the_stage_reach_count() -> None:
    engine = PlaybookEngine(
        playbook(transitions=[move("three", {"type": "max_turns", "count": 3})])
    )
    assert engine.after_turn("1", "a") is None
    assert engine.after_turn("2", "b") is None
    assert engine.turns_in_stage == 2
    fired = engine.after_turn("3", "c")
    assert fired is not None and fired.id == "three"
    assert engine.turns_in_stage == 3
    change = engine.apply(fired)
    assert change.to_stage == "b" and engine.turns_in_stage == 0


def test_custom_condition_gets_the_turn_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[TurnFacts] = []

    def vip(facts: TurnFacts) -> bool:
        seen.append(facts)
        return facts.context.get("tier") == "vip"

    engine = PlaybookEngine(
        playbook(transitions=[move("vip", {"type": "custom", "evaluate": vip})])
    )
    engine.set_intent("billing", 0.6)
    assert engine.after_turn("hello", "hi there") is None
    engine.update_context(tier="vip")
    assert engine.after_turn("again", "sure") is not None
    facts = seen[-1]
    assert facts.stage_id == "a" and facts.turns_in_stage == 2
    assert facts.user_text == "again" and facts.assistant_text == "sure"
    assert facts.intent == "billing" and facts.intent_confidence == 0.6

    (tmp_path / "pb_custom_rules.py").write_text(
        "def long_answer(facts):\n    return len(facts.assistant_text) > 10\n"
        "def broken(facts):\n    raise RuntimeError('bad rule')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    by_name = PlaybookEngine(
        playbook(
            transitions=[
                move(
                    "broken", {"type": "custom", "evaluate": "pb_custom_rules:broken"}, priority=1
                ),
                move("long", {"type": "custom", "evaluate": "pb_custom_rules:long_answer"}),
            ]
        )
    )
    assert by_name.after_turn("q", "short") is None  # a raising rule counts as false
    fired = by_name.after_turn("q", "a much longer answer")
    assert fired is not None and fired.id == "long"


def test_timeout_conditions_are_not_evaluated_after_turns() -> None:
    engine = PlaybookEngine(playbook(transitions=[move("t", {"type": "timeout", "seconds": 0.01})]))
    assert engine.after_turn("x", "y") is None
    assert engine.after_tool_batch([], []) is None


def test_candidates_by_descending_priority_ties_in_file_order_first_that_holds_wins() -> None:
    book = playbook(
        stages=[{"id": "a"}, {"id": "b", "terminal": True}, {"id": "c", "terminal": True}],
        transitions=[
            move("tie-1", {"type": "keyword", "keywords": ["go"]}, target="b"),
            move("global", {"type": "keyword", "keywords": ["go"]}, from_stage="*", target="c"),
            move("tie-2", {"type": "keyword", "keywords": ["go"]}, target="c"),
            move("top", {"type": "keyword", "keywords": ["stop"]}, priority=2),
            move("bottom", {"type": "max_turns", "count": 1}, priority=-1, target="c"),
            move("other-stage", {"type": "max_turns", "count": 1}, from_stage="c", target="b"),
        ],
    )
    engine = PlaybookEngine(book)
    assert [t.id for t in engine.candidates()] == ["top", "tie-1", "global", "tie-2", "bottom"]
    fired = engine.after_turn("go now", "ok")  # top does not hold; tie-1 is first in the file
    assert fired is not None and fired.id == "tie-1"
    fired = PlaybookEngine(book).after_turn("please stop, go", "ok")
    assert fired is not None and fired.id == "top"
    fired = PlaybookEngine(book).after_turn("hmm", "ok")
    assert fired is not None and fired.id == "bottom"


def test_count_only_counts_the_turn_without_evaluating() -> None:
    engine = keyword_engine()
    assert engine.after_turn("bye", "bye", count_only=True) is None
    assert engine.turns_in_stage == 1


def test_a_terminal_stage_completes_the_playbook_and_nothing_fires_from_it() -> None:
    book = playbook(
        stages=[{"id": "a"}, {"id": "b", "terminal": True}],
        transitions=[
            move("done", {"type": "keyword", "keywords": ["done"]}),
            move(
                "restart", {"type": "keyword", "keywords": ["restart"]}, from_stage="*", target="a"
            ),
            move("llm", {"type": "llm_decision"}, from_stage="*", target="a"),
        ],
    )
    engine = PlaybookEngine(book)
    engine.apply(engine.after_turn("done", "ok"))  # type: ignore[arg-type]
    assert engine.completed and engine.current_stage.id == "b"
    assert engine.candidates() == []
    assert engine.after_turn("restart", "ok") is None
    assert engine.after_tool_batch([], [], "a") is None
    assert engine.llm_decision_transition("a") is None
    assert engine.turns_in_stage == 1  # turns still answer (and count) in it
    assert engine.snapshot()["completed"] is True


def test_apply_runs_callbacks_merges_data_and_records_the_transition() -> None:
    log: list[tuple[str, StageHookEvent, dict[str, Any]]] = []
    book = playbook(
        stages=[
            {"id": "a", "on_exit": lambda e: log.append(("exit", e, dict(e.context)))},
            {
                "id": "b",
                "terminal": True,
                "on_enter": lambda e: log.append(("enter", e, dict(e.context))),
            },
        ],
        transitions=[
            move(
                "t",
                {"type": "max_turns", "count": 1},
                action={
                    "transition_message": "Moved on.",
                    "clear_history": True,
                    "data": {"routed": "yes"},
                },
            )
        ],
    )
    times = iter([100.0, 250.5])
    engine = PlaybookEngine(book, clock=lambda: next(times))
    engine.update_context(kept=1)
    assert engine.stage_entered_at == 100.0
    change = engine.apply(book.transitions[0], reason="because")
    assert (change.from_stage, change.to_stage, change.transition_id) == ("a", "b", "t")
    assert change.condition == "max_turns" and change.reason == "because"
    assert change.transition_message == "Moved on." and change.clear_history
    assert dict(change.data) == {"routed": "yes"} and change.errors == ()
    assert dict(engine.context) == {"kept": 1, "routed": "yes"}
    assert engine.stage_entered_at == 250.5
    assert engine.transitions == [
        {"from_stage": "a", "to_stage": "b", "transition_id": "t", "reason": "because", "at": 250.5}
    ]
    (_, exit_event, exit_context), (_, enter_event, enter_context) = log
    assert [entry[0] for entry in log] == ["exit", "enter"]
    assert exit_event.stage_id == "a" and exit_event.other_stage_id == "b"
    assert exit_context == {"kept": 1}  # exit runs before the data lands
    assert enter_event.stage_id == "b" and enter_event.other_stage_id == "a"
    assert dict(enter_event.data) == {"routed": "yes"}
    assert enter_context == {"kept": 1, "routed": "yes"}


def test_stage_callback_errors_are_isolated() -> None:
    def explode(event: StageHookEvent) -> None:
        raise RuntimeError(f"{event.stage_id} exploded")

    book = playbook(
        stages=[
            {"id": "a", "on_enter": explode, "on_exit": explode},
            {"id": "b", "terminal": True, "on_enter": explode},
        ],
        transitions=[move("t", {"type": "max_turns", "count": 1})],
    )
    engine = PlaybookEngine(book)
    assert [(where, str(exc)) for where, exc in engine.entry_errors] == [
        ("stage.on_enter", "a exploded")
    ]
    change = engine.apply(book.transitions[0])
    assert engine.current_stage.id == "b"  # the move happened anyway
    assert [(where, str(exc)) for where, exc in change.errors] == [
        ("stage.on_exit", "a exploded"),
        ("stage.on_enter", "b exploded"),
    ]


def test_string_stage_callbacks_are_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pb_stage_hooks.py").write_text(
        "EVENTS = []\n"
        "def record(event):\n"
        "    EVENTS.append((event.stage_id, event.other_stage_id))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    book = playbook(
        stages=[
            {"id": "a", "on_enter": "pb_stage_hooks:record", "on_exit": "pb_stage_hooks:record"},
            {"id": "b", "terminal": True},
        ],
        transitions=[move("t", {"type": "max_turns", "count": 1})],
    )
    engine = PlaybookEngine(book)
    engine.apply(book.transitions[0])
    import pb_stage_hooks  # type: ignore[import-not-found]

    assert pb_stage_hooks.EVENTS == [("a", None), ("a", "b")]


def test_snapshot_is_json_safe_and_changes_only_with_the_state() -> None:
    book = load_playbook(PLAYBOOKS / "support.yaml")
    engine = PlaybookEngine(book)
    first = engine.snapshot()
    assert json.loads(json.dumps(first)) == first
    assert first["playbook_id"] == "support" and first["current_stage"] == "greeting"
    assert first["turns_in_stage"] == 0 and first["context"] == {}
    assert first["transitions"] == [] and first["completed"] is False
    assert isinstance(first["stage_entered_at"], float)
    assert engine.snapshot() == first  # no change without a state change
    engine.after_turn("hi", "hello")
    assert engine.snapshot() != first and engine.snapshot()["turns_in_stage"] == 1
    engine.apply(book.transitions[0])
    engine.update_context(customer_id="C-1")
    engine.set_intent("billing", 0.9)
    saved = engine.snapshot()
    assert saved["current_stage"] == "identify" and saved["context"] == {"customer_id": "C-1"}
    assert [t["transition_id"] for t in saved["transitions"]] == ["greeting-to-identify"]

    restored = PlaybookEngine.restore(book, json.loads(json.dumps(saved)))
    assert restored.snapshot() == saved
    assert restored.current_stage.id == "identify" and restored.intent == ("billing", 0.9)
    fired = restored.after_turn("my email", "found you")  # the restored intent still counts
    assert fired is not None and fired.id == "known-billing-issue"


def test_restore_runs_no_callbacks_and_refuses_another_playbook() -> None:
    entered: list[str] = []
    book = playbook(
        stages=[
            {"id": "a"},
            {"id": "b", "terminal": True, "on_enter": lambda e: entered.append(e.stage_id)},
        ],
        transitions=[move("t", {"type": "max_turns", "count": 1})],
    )
    engine = PlaybookEngine(book)
    engine.apply(book.transitions[0])
    assert entered == ["b"]
    restored = PlaybookEngine.restore(book, engine.snapshot())
    assert entered == ["b"] and restored.completed
    with pytest.raises(ValueError, match="'other'"):
        PlaybookEngine.restore(playbook(id="other"), engine.snapshot())


def test_mermaid_graph_draws_stages_and_transitions() -> None:
    graph = to_mermaid(load_playbook(PLAYBOOKS / "support.yaml"))
    assert graph.startswith("stateDiagram-v2\n    [*] --> greeting")
    assert "greeting --> identify : max_turns" in graph
    assert "billing --> wrap_up : tool_call" in graph
    assert "technical --> wrap_up : keyword" in graph  # a "*" transition from every stage
    assert "wrap_up --> [*]" in graph
