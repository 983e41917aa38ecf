"""Late results at the edges (found in review): an iterator is never left asleep by a result
another reader took first; a stage change that clears the history keeps the outcome the model
has not told yet; a call that cannot be taken over after a resume elsewhere is reported as
unknown, never as "did not finish"; results nobody reads do not pile up."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import TurnRunner
from llmrtc.agent.late_results import (
    _KEPT_FOR_READERS,
    MOVED_NOTE,
    LateResults,
    is_late_result_message,
)
from llmrtc.llm.messages import UserMessage
from llmrtc.playbook import Playbook, PlaybookOrchestrator
from llmrtc.testing import ScriptedLLM
from llmrtc.tools.calls import ToolCallResult

pytestmark = pytest.mark.anyio

gate: dict[str, anyio.Event] = {}


@tool(background=True, timeout=30.0)
async def bookTable(restaurant: str) -> dict[str, Any]:
    """Book a table."""
    await gate["open"].wait()
    return {"confirmed": True, "reference": "A12"}


@tool
async def pay(amount: int) -> str:
    """Take a payment."""
    return "paid"


BOOK = ToolCall("b1", "bookTable", {"restaurant": "Nopa"})


async def test_an_iterator_wakes_for_a_result_another_reader_took_first() -> None:
    gate["open"] = anyio.Event()
    runner = TurnRunner(
        ScriptedLLM([[BOOK], "On it."]), ToolExecutor(ToolRegistry([bookTable])), system_prompt="s"
    )
    async for _ in runner.run_turn("book Nopa"):
        pass
    got: list[str] = []

    async def listen() -> None:
        async for result in runner.late_results():
            got.append(result.call_id)

    async with anyio.create_task_group() as group:
        group.start_soon(listen)
        await anyio.sleep(0.05)  # the iterator waits
        gate["open"].set()
        # Another reader (a voice loop asking whether results wait) takes it first.
        with anyio.fail_after(5):
            while not runner.late_results_waiting:
                await anyio.sleep(0)
            while got != ["b1"]:
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()


PLAYBOOK = Playbook.model_validate(
    {
        "id": "dinner",
        "initial_stage": "book",
        "stages": [
            {"id": "book", "system_prompt": "Book a table.", "tools": ["bookTable"]},
            {"id": "pay", "system_prompt": "Take the deposit.", "tools": ["pay"]},
        ],
        "transitions": [
            {
                "id": "to-pay",
                "from_stage": "book",
                "condition": {"type": "llm_decision", "description": "user wants to pay"},
                "action": {"target_stage": "pay", "clear_history": True},
            }
        ],
    }
)


async def test_a_clearing_stage_change_keeps_the_outcome_not_told_yet() -> None:
    gate["open"] = anyio.Event()
    llm = ScriptedLLM(
        [
            [BOOK],
            "Booking under way.",
            [ToolCall("t1", "playbook_transition", {"target_stage": "pay"})],
            "Sure; and your table is booked.",
        ]
    )
    orchestrator = PlaybookOrchestrator(PLAYBOOK, llm, ToolRegistry([bookTable, pay]))
    async for _ in orchestrator.run_turn("book Nopa"):
        pass
    gate["open"].set()
    with anyio.fail_after(5):
        while not orchestrator.late_results_waiting:
            await anyio.sleep(0.01)
    async for _ in orchestrator.run_turn("I want to pay now"):
        pass
    # The new stage's request (after the cleared history) still carries the outcome.
    last = llm.requests[-1].messages
    assert any(is_late_result_message(m) and "A12" in m.content for m in last)
    assert UserMessage("I want to pay now") in last
    llm.assert_consumed()


def test_a_call_not_taken_over_is_reported_as_unknown_not_unfinished() -> None:
    # The process that ran it may still finish it: "did not finish" would invite a retry
    # that books twice (livekit/agents #3702).
    assert "may have completed" in MOVED_NOTE and "did not finish" not in MOVED_NOTE
    assert "check before trying it again" in MOVED_NOTE


def test_results_nobody_reads_do_not_pile_up_but_all_reach_the_model() -> None:
    late = LateResults(ToolExecutor(ToolRegistry()))
    for n in range(_KEPT_FOR_READERS + 50):
        late._add(ToolCallResult(f"c{n}", "bookTable", "ok", {"n": n}, None, 1.0))
    assert len(late.take_unheard()) == _KEPT_FOR_READERS + 50  # the model gets every one
    assert len(late._unyielded) == _KEPT_FOR_READERS
    assert late._unyielded[0].call_id == "c50"  # the oldest went first
