"""Background calls across `snapshot()` / `restore()`: a restore in the same process adopts the
running calls (their final results land on the new runner, exactly once; the old runner
neither delivers nor closes them); anywhere else each becomes an `aborted` late result; the
late results that landed but were not in the history yet are delivered after a restore in both
cases; a malformed `"background"` part is refused with a precise error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolCallResult, ToolContext, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import AgentEvent, TurnRunner
from llmrtc.agent.late_results import MOVED_NOTE
from llmrtc.llm.messages import SystemMessage
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

gate: dict[str, Any] = {}
signals: dict[str, Any] = {}


@tool(background=True, timeout=30.0)
async def bookTable(restaurant: str, ctx: ToolContext) -> dict[str, Any]:
    """Book a table."""
    signals[ctx.call_id] = ctx.abort_signal
    await gate["open"].wait()
    return {"confirmed": True, "reference": "A12", "restaurant": restaurant}


REGISTRY = ToolRegistry([bookTable])
BOOK = ToolCall("b1", "bookTable", {"restaurant": "Nopa"})


@pytest.fixture(autouse=True)
def _fresh() -> None:
    gate.clear()
    gate["open"] = anyio.Event()
    signals.clear()


def runner(script: list[Any]) -> TurnRunner:
    return TurnRunner(ScriptedLLM(script), ToolExecutor(REGISTRY), system_prompt="s")


async def turn(handler: Any, text: str | None) -> list[AgentEvent]:
    return [event async for event in handler.run_turn(text)]


async def next_late(handler: Any) -> ToolCallResult:
    with anyio.fail_after(10):
        async for result in handler.late_results():
            return result
    raise AssertionError("unreachable")


def notes(messages: Any) -> list[SystemMessage]:
    return [m for m in messages if isinstance(m, SystemMessage) and "b1" in m.content]


async def wait_until(check: Any) -> None:
    with anyio.fail_after(10):
        while not check():
            await anyio.sleep(0.01)


async def saved_while_running() -> tuple[TurnRunner, dict[str, Any]]:
    first = runner([[BOOK], "I'm booking it."])
    await turn(first, "Book Nopa")
    assert [c.call_id for c in first.executor.background_calls] == ["b1"]
    state = json.loads(json.dumps(first.snapshot()))
    return first, state


async def test_a_snapshot_records_the_running_call_and_changes_nothing() -> None:
    first, state = await saved_while_running()
    background = state["background"]
    assert background["running"] == [
        {"call_id": "b1", "tool_name": "bookTable", "arguments": {"restaurant": "Nopa"}}
    ]
    assert background["landed"] == []
    assert background["executor"] == first.executor.background_token
    assert [c.call_id for c in first.executor.background_calls] == ["b1"]  # runs on
    gate["open"].set()
    await first.executor.aclose()
    idle = runner([])
    assert idle.snapshot()["background"] is None


async def test_same_process_restore_adopts_the_call_and_gets_its_result_once() -> None:
    first, state = await saved_while_running()
    second = runner(["Your table at Nopa is booked, reference A12.", "Anything else?"])
    second.restore(state)
    assert [c.call_id for c in second.executor.background_calls] == ["b1"]
    assert first.executor.background_calls == ()
    # The old runner's close does not reach the adopted call.
    await first.executor.aclose(reason="old session closed")
    assert not signals["b1"].aborted
    assert [c.call_id for c in second.executor.background_calls] == ["b1"]
    gate["open"].set()
    landed = await next_late(second)
    assert (landed.call_id, landed.status) == ("b1", "ok")
    assert landed.result["reference"] == "A12"
    assert not first.late_results_waiting
    assert first.executor.take_background_results() == []
    events = [e async for e in second.run_update_turn()]
    assert events
    [note] = notes(second.llm.requests[0].messages)  # type: ignore[attr-defined]
    assert '"reference":"A12"' in note.content
    await turn(second, "Thanks")
    assert len(notes(second.llm.requests[1].messages)) == 1  # type: ignore[attr-defined]
    assert not second.late_results_waiting


async def test_the_adopted_call_is_cancelled_and_closed_by_its_new_runner() -> None:
    _, state = await saved_while_running()
    second = runner([])
    second.restore(state)
    result = await second.cancel_call("b1")
    assert result is not None and result.status == "aborted"
    assert signals["b1"].aborted
    assert (await next_late(second)).call_id == "b1"


async def test_a_call_that_landed_on_the_old_runner_after_the_snapshot_moves_once() -> None:
    first, state = await saved_while_running()
    gate["open"].set()
    await wait_until(lambda: not first.executor.background_calls)
    assert first.late_results_waiting  # the old runner took it from its executor
    second = runner(["Booked."])
    second.restore(state)
    assert not first.late_results_waiting  # handed over, not copied
    landed = await next_late(second)
    assert (landed.call_id, landed.status) == ("b1", "ok")
    [e async for e in second.run_update_turn()]
    assert len(notes(second.llm.requests[0].messages)) == 1  # type: ignore[attr-defined]


async def test_a_restore_elsewhere_gets_an_aborted_late_result() -> None:
    first, state = await saved_while_running()
    # Another process: its pid is not ours, and no executor of ours has that token.
    state["background"]["executor"] = "1-" + state["background"]["executor"].split("-", 1)[1]
    second = runner(["Sorry, the booking did not go through; shall I try again?"])
    second.restore(state)
    assert second.executor.background_calls == ()
    landed = await next_late(second)
    assert (landed.call_id, landed.tool_name, landed.status) == ("b1", "bookTable", "aborted")
    assert landed.error == MOVED_NOTE
    [e async for e in second.run_update_turn()]
    [note] = notes(second.llm.requests[0].messages)  # type: ignore[attr-defined]
    assert "aborted" in note.content and MOVED_NOTE in note.content
    # The process that ran the call still has it (it stops it itself).
    assert [c.call_id for c in first.executor.background_calls] == ["b1"]
    await first.executor.aclose()


async def test_a_restore_in_another_process_gets_an_aborted_late_result(tmp_path: Path) -> None:
    first, state = await saved_while_running()
    saved = tmp_path / "state.json"
    saved.write_text(json.dumps(state))
    script = f"""
import json, anyio
from llmrtc import ToolExecutor
from llmrtc.agent import TurnRunner
from llmrtc.testing import ScriptedLLM
from tests.agent.test_background_resume import REGISTRY

async def main():
    runner = TurnRunner(ScriptedLLM([]), ToolExecutor(REGISTRY), system_prompt="s")
    runner.restore(json.loads(open({str(saved)!r}).read()))
    async for result in runner.late_results():
        print(json.dumps([result.call_id, result.status, result.error]))
        return

anyio.run(main)
"""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["b1", "aborted", MOVED_NOTE]
    await first.executor.aclose()


async def test_late_results_not_yet_heard_survive_a_restore_anywhere() -> None:
    first = runner([[BOOK], "I'm booking it."])
    await turn(first, "Book Nopa")
    gate["open"].set()
    await wait_until(lambda: not first.executor.background_calls)
    state = json.loads(json.dumps(first.snapshot()))
    assert state["background"]["running"] == []
    [saved] = state["background"]["landed"]
    assert saved["status"] == "ok" and saved["result"]["reference"] == "A12"
    for executor in (state["background"]["executor"], "1-gone"):  # here, and elsewhere
        state["background"]["executor"] = executor
        second = runner(["Booked, reference A12."])
        second.restore(state)
        assert second.late_results_waiting
        landed = await next_late(second)
        assert (landed.call_id, landed.status, landed.result["reference"]) == ("b1", "ok", "A12")
        [e async for e in second.run_update_turn()]
        [note] = notes(second.llm.requests[0].messages)  # type: ignore[attr-defined]
        assert '"reference":"A12"' in note.content


async def test_a_second_resume_from_the_same_state_finds_the_adopted_call() -> None:
    _, state = await saved_while_running()
    second = runner([])
    second.restore(state)  # e.g. a resume whose connection never answered: state put back
    third = runner([])
    third.restore(state)
    assert second.executor.background_calls == ()
    assert [c.call_id for c in third.executor.background_calls] == ["b1"]
    gate["open"].set()
    assert (await next_late(third)).status == "ok"


def _background(**part: Any) -> dict[str, Any]:
    entry = {"executor": "1-x", "running": [], "landed": []}
    entry.update(part)
    return {"history": None, "playbook": None, "background": entry}


RESULT = {
    "call_id": "b1",
    "tool_name": "bookTable",
    "status": "ok",
    "result": None,
    "error": None,
    "duration_ms": 3.0,
}
BROKEN = [
    ({"background": "x"}, "'background' must be a mapping"),
    (_background(extra=1), "'background' has unknown keys ['extra']"),
    (_background(executor=""), "'executor' must be a non-empty string"),
    (_background(running={}), "'running' must be a list"),
    (_background(running=[{"call_id": "b1"}]), "'running'[0] must be a mapping of call_id"),
    (
        _background(running=[{"call_id": "", "tool_name": "t", "arguments": {}}]),
        "'running'[0]: call_id and tool_name must be non-empty",
    ),
    (
        _background(running=[{"call_id": "b", "tool_name": "t", "arguments": 3}]),
        "'running'[0]: arguments must be an object or a string",
    ),
    (_background(landed=[{**RESULT, "status": "running"}]), "'landed'[0]: status 'running'"),
    (_background(landed=[RESULT, {**RESULT, "error": 1}]), "'landed'[1]: error must be"),
    (_background(landed=[{**RESULT, "duration_ms": -1}]), "'landed'[0]: duration_ms"),
    (_background(landed=[{"call_id": "b1"}]), "'landed'[0] must be a mapping of"),
]


@pytest.mark.parametrize(("state", "message"), BROKEN)
async def test_a_malformed_background_part_is_refused_and_changes_nothing(
    state: dict[str, Any], message: str
) -> None:
    fresh = runner([])
    with pytest.raises(ValueError) as caught:
        fresh.restore(state)
    assert message in str(caught.value)
    assert not fresh.late_results_waiting and fresh.executor.background_calls == ()
