"""The playbook command line (`llmrtc validate`, `llmrtc chat PLAYBOOK`) and a stage change
seen through OpenTelemetry."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmrtc import OpenTelemetryHooks, PlaybookOrchestrator, ToolCall
from llmrtc.cli import main
from llmrtc.playbook import load_playbook, load_playbook_tools
from llmrtc.testing import ScriptedLLM, ScriptedOpenAIServer, text_reply, tool_call_reply

ROOT = Path(__file__).resolve().parents[2]
SUPPORT = ROOT / "playbooks" / "support.yaml"
WEATHER = ROOT / "playbooks" / "weather.yaml"


@pytest.mark.parametrize("path", [SUPPORT, WEATHER])
def test_validate_accepts_the_shipped_playbooks(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(path)]) == 0
    assert "0 errors, 0 warnings" in capsys.readouterr().out


def test_validate_graph_prints_a_mermaid_state_diagram(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(SUPPORT), "--graph"]) == 0
    out = capsys.readouterr().out
    assert "stateDiagram-v2" in out
    assert "[*] --> greeting" in out
    assert "identify --> billing : llm_decision" in out
    assert "wrap_up --> [*]" in out


def test_validate_reports_errors_with_path_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "id: broken\n"
        "initial_stage: start\n"
        "stages:\n"
        "  - id: start\n"
        "    tools: [nope]\n"
        "transitions:\n"
        "  - id: t1\n"
        "    from_stage: start\n"
        "    condition: {type: keyword, keywords: [x]}\n"
        "    action: {target_stage: elsewhere}\n"
    )
    assert main(["validate", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "broken.yaml" in err
    assert "transitions[0].action.target_stage (line 10)" in err
    assert "'elsewhere'" in err


def test_validate_reports_errors_and_warnings_in_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        "id: broken\n"
        "initial_stage: start\n"
        "stages:\n"
        "  - {id: start}\n"
        "  - {id: orphan}\n"
        "  - {id: deadend}\n"
        "transitions:\n"
        "  - {id: t1, from_stage: start, condition: {type: keyword, keywords: [a]},"
        " action: {target_stage: missing}}\n"
        "  - {id: t2, from_stage: start, condition: {type: keyword, keywords: [b]},"
        " action: {target_stage: deadend}}\n"
    )
    assert main(["validate", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "targets unknown stage 'missing'" in err
    assert "stage 'orphan' cannot be reached" in err  # not only on a second run
    assert "stage 'deadend' is not terminal but has no way out" in err
    assert "1 errors, 3 warnings" in err


def test_validate_prints_warnings_but_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lonely = tmp_path / "lonely.json"
    lonely.write_text(
        '{"id": "lonely", "initial_stage": "a", "stages": [{"id": "a"}, {"id": "b"}]}'
    )
    assert main(["validate", str(lonely)]) == 0
    out = capsys.readouterr().out
    assert "warning: stages[1]: stage 'b' cannot be reached from 'a'" in out
    assert "no way out" in out


def test_validate_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "no/such/playbook.yaml"]) == 1
    assert "error:" in capsys.readouterr().err


@pytest.mark.anyio
async def test_chat_runs_a_playbook_and_shows_stage_changes() -> None:
    replies = [
        text_reply("Hello! How can I help?"),
        tool_call_reply([("c1", "lookup_customer", '{"email": "ada@example.com"}')]),
        text_reply("Thanks Ada, I see a billing issue."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}
        result = await anyio.run_process(
            [sys.executable, "-m", "llmrtc.cli", "chat", str(SUPPORT)],
            input=b"Hi there\nMy email is ada@example.com\n",
            env=env,
            check=False,
        )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "[playbook support: stage greeting]" in out
    assert "[stage greeting -> identify (greeting-to-identify)]" in out
    assert "-> lookup_customer" in out
    assert "[stage identify -> billing (known-billing-issue)]" in out


@pytest.mark.anyio
async def test_a_stage_change_is_a_span_event_and_a_metric() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    hooks = OpenTelemetryHooks(
        tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    playbook = load_playbook(SUPPORT)
    llm = ScriptedLLM(
        [
            "Hello!",
            [ToolCall("c1", "lookup_customer", {"email": "bob@example.com"})],
            "Thanks Bob.",
        ]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, load_playbook_tools(playbook), hooks=hooks)
    for text in ("Hi", "I am bob@example.com"):
        async for _ in orchestrator.run_turn(text):
            pass
    turns = [s for s in exporter.get_finished_spans() if s.name == "llmrtc.turn"]
    events = [e for turn in turns for e in turn.events if e.name == "llmrtc.stage_transition"]
    assert [dict(e.attributes or {}) for e in events] == [
        {
            "llmrtc.stage.from": "greeting",
            "llmrtc.stage.to": "identify",
            "llmrtc.transition.id": "greeting-to-identify",
            "llmrtc.transition.condition": "max_turns",
        },
        {
            "llmrtc.stage.from": "identify",
            "llmrtc.stage.to": "technical",
            "llmrtc.transition.id": "known-technical-issue",
            "llmrtc.transition.condition": "intent",
        },
    ]
    assert [dict(s.attributes or {})["llmrtc.stage.id"] for s in turns] == ["greeting", "identify"]
    data = reader.get_metrics_data()
    assert data is not None
    points: list[Any] = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "llmrtc.playbook.transitions"
        for point in metric.data.data_points
    ]
    assert sorted((p.attributes["llmrtc.stage.to"], p.value) for p in points) == [
        ("identify", 1),
        ("technical", 1),
    ]


def test_orchestrator_is_created_outside_a_loop_and_serves_successive_loops() -> None:
    playbook = load_playbook(WEATHER)
    llm = ScriptedLLM(
        [
            [ToolCall("c1", "lookupWeather", {"city": "Oslo"})],
            "It is 4 degrees in Oslo.",
            "Goodbye!",
        ]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, load_playbook_tools(playbook))

    async def turn(text: str) -> list[Any]:
        return [event async for event in orchestrator.run_turn(text)]

    first = anyio.run(turn, "Weather in Oslo?")
    assert first[-1].text == "It is 4 degrees in Oslo."
    anyio.run(turn, "Thanks, bye", backend="trio")
    assert orchestrator.engine.current_stage.id == "goodbye"
    llm.assert_consumed()


@pytest.mark.anyio
async def test_a_barge_in_right_after_a_transition_call_still_moves_the_stage() -> None:
    from llmrtc import AbortController, ToolCallFinished

    playbook = load_playbook(SUPPORT)
    llm = ScriptedLLM(
        [
            "Hello!",
            [ToolCall("t1", "playbook_transition", {"target_stage": "technical"})],
            "never requested",
        ]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, load_playbook_tools(playbook))
    async for _ in orchestrator.run_turn("Hi"):
        pass
    controller = AbortController()
    events = []
    async for event in orchestrator.run_turn("My app crashes", abort_signal=controller.signal):
        events.append(event)
        if isinstance(event, ToolCallFinished):
            controller.abort("barge-in")  # the transition call already ran: it happened
    assert orchestrator.engine.current_stage.id == "technical"
    assert events[-1].stop_reason == "aborted"
    assert len(llm.requests) == 2  # no phase-2 request after the barge-in
