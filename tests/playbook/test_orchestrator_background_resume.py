"""PlaybookOrchestrator: background calls across `snapshot()` / `restore()`. A restore in the
same process adopts the running call (its result lands on the new orchestrator once, in the
restored stage); elsewhere it is an `aborted` late result; a malformed `"background"` part is
refused and the orchestrator stays as it was."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolCallResult, ToolContext, ToolRegistry, tool
from llmrtc.agent.late_results import MOVED_NOTE
from llmrtc.llm.messages import SystemMessage
from llmrtc.playbook import Playbook, PlaybookOrchestrator
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

gate: dict[str, Any] = {}


@tool(background=True, timeout=30.0)
async def bookTable(restaurant: str, ctx: ToolContext) -> dict[str, Any]:
    """Book a table."""
    gate["signal"] = ctx.abort_signal
    await gate["open"].wait()
    return {"confirmed": True, "reference": "A12"}


@tool
async def pay(amount: int) -> str:
    """Take a payment."""
    return "paid"


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
                "condition": {"type": "llm_decision", "description": "the booking is under way"},
                "action": {"target_stage": "pay"},
            }
        ],
    }
)
BOOK = ToolCall("b1", "bookTable", {"restaurant": "Nopa"})
MOVE = ToolCall("t1", "playbook_transition", {"target_stage": "pay"})


@pytest.fixture(autouse=True)
def _fresh() -> None:
    gate.clear()
    gate["open"] = anyio.Event()


def factory(script: list[Any]) -> PlaybookOrchestrator:
    return PlaybookOrchestrator(PLAYBOOK, ScriptedLLM(script), ToolRegistry([bookTable, pay]))


async def next_late(handler: Any) -> ToolCallResult:
    with anyio.fail_after(10):
        async for result in handler.late_results():
            return result
    raise AssertionError("unreachable")


def notes(messages: Any) -> list[SystemMessage]:
    return [m for m in messages if isinstance(m, SystemMessage) and "b1" in m.content]


async def saved_in_the_pay_stage() -> tuple[PlaybookOrchestrator, dict[str, Any]]:
    first = factory([[BOOK, MOVE], "Booking it; now the deposit."])
    [e async for e in first.run_turn("Book Nopa")]
    assert first.engine.current_stage.id == "pay"
    state = json.loads(json.dumps(first.snapshot()))
    assert state["playbook"]["current_stage"] == "pay"
    assert [c["call_id"] for c in state["background"]["running"]] == ["b1"]
    return first, state


async def test_same_process_restore_adopts_the_call_and_delivers_it_in_the_stage() -> None:
    first, state = await saved_in_the_pay_stage()
    second = factory(["Your table is booked, reference A12."])
    second.restore(state)
    await first.executor.aclose()  # the old one's close no longer reaches the call
    assert not gate["signal"].aborted
    gate["open"].set()
    landed = await next_late(second)
    assert (landed.call_id, landed.status) == ("b1", "ok")
    assert not first.late_results_waiting
    [e async for e in second.run_update_turn()]
    request = second.runner.llm.requests[0]  # type: ignore[attr-defined]
    assert second.engine.current_stage.id == "pay"
    offered = [d.name for d in request.tools]
    assert "pay" in offered and "bookTable" not in offered  # the stage's tools: new calls only
    [note] = notes(request.messages)
    assert '"reference":"A12"' in note.content


async def test_a_restore_elsewhere_gets_an_aborted_late_result() -> None:
    first, state = await saved_in_the_pay_stage()
    state["background"]["executor"] = "1-elsewhere"
    second = factory(["Sorry, the booking did not finish."])
    second.restore(state)
    landed = await next_late(second)
    assert (landed.call_id, landed.status, landed.error) == ("b1", "aborted", MOVED_NOTE)
    [e async for e in second.run_update_turn()]
    [note] = notes(second.runner.llm.requests[0].messages)  # type: ignore[attr-defined]
    assert MOVED_NOTE in note.content
    await first.executor.aclose()


async def test_a_malformed_background_part_is_refused_and_changes_nothing() -> None:
    first, state = await saved_in_the_pay_stage()
    state["background"]["running"][0]["arguments"] = 7
    second = factory([])
    with pytest.raises(ValueError, match=r"'running'\[0\]: arguments must be an object"):
        second.restore(state)
    assert second.engine.current_stage.id == "book"
    assert second.executor.background_calls == ()
    assert [c.call_id for c in first.executor.background_calls] == ["b1"]
    await first.executor.aclose()
