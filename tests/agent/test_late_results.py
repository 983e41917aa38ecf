"""Late results of background calls in a conversation: the turn answers the call `"running"`,
its final result goes to the model before the next request (once, as a system note naming
the call), `late_results()` yields it, `run_update_turn()` lets the agent speak about it, and
`cancel_call()` stops the call."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolCallResult, ToolContext, ToolExecutor, ToolRegistry, tool
from llmrtc.abort import AbortController
from llmrtc.agent import (
    AgentEvent,
    TextDelta,
    ToolCallFinished,
    TurnCompleted,
    TurnHandler,
    TurnRunner,
)
from llmrtc.llm.messages import SystemMessage, ToolMessage, UserMessage
from llmrtc.llm.wire import to_openai_messages
from llmrtc.playbook import Playbook, PlaybookOrchestrator
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


@tool(background=True, timeout=30.0)
async def searchFlights(city: str) -> list[str]:
    """Search flights."""
    await gate["flights"].wait()
    return [f"LH123 to {city}"]


@tool
async def openGate() -> str:
    """Let the booking finish, and wait until it has (an ordinary call, mid-turn)."""
    gate["open"].set()
    with anyio.fail_after(10):
        while gate["executor"].background_calls:
            await anyio.sleep(0.01)
    return "opened"


REGISTRY = ToolRegistry([bookTable, searchFlights, openGate])
BOOK = ToolCall("b1", "bookTable", {"restaurant": "Nopa"})


@pytest.fixture(autouse=True)
def _fresh() -> None:
    gate.clear()
    gate["open"] = anyio.Event()
    gate["flights"] = anyio.Event()
    signals.clear()


def runner(script: list[Any]) -> TurnRunner:
    executor = ToolExecutor(REGISTRY)
    gate["executor"] = executor
    return TurnRunner(ScriptedLLM(script), executor, system_prompt="s")


async def turn(handler: Any, text: str | None) -> list[AgentEvent]:
    return [event async for event in handler.run_turn(text)]


async def update(handler: Any) -> list[AgentEvent]:
    return [event async for event in handler.run_update_turn()]


async def next_late(handler: Any) -> ToolCallResult:
    with anyio.fail_after(10):
        async for result in handler.late_results():
            return result
    raise AssertionError("unreachable")


def notes(messages: Any) -> list[SystemMessage]:
    return [m for m in messages if isinstance(m, SystemMessage) and "b1" in m.content]


def said(events: list[AgentEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def test_running_answer_then_the_late_result_in_the_next_request_exactly_once() -> None:
    r = runner([[BOOK], "I'm booking it.", "Sure, it is 3 pm.", "You're welcome."])
    first = await turn(r, "Book Nopa")
    [running] = [e.result for e in first if isinstance(e, ToolCallFinished)]
    assert running.status == "running" and said(first) == "I'm booking it."
    assert isinstance(first[-1], TurnCompleted)
    gate["open"].set()
    landed = await next_late(r)  # landed before anyone iterated: still yielded
    assert (landed.call_id, landed.status) == ("b1", "ok")
    assert r.late_results_waiting  # yielding it did not take it from the model
    await turn(r, "What time is it?")
    request = r.llm.requests[2].messages  # type: ignore[attr-defined]
    [note] = notes(request)
    assert "bookTable" in note.content and '"reference":"A12"' in note.content
    # After the user's words: the model still answers them (routing, grounding, a stage's
    # clear_history read them), and the note asks it to answer them first.
    assert request.index(note) == len(request) - 1
    assert request[-2] == UserMessage("What time is it?")
    assert "Answer the user's last message first" in note.content
    await turn(r, "Thanks")
    assert len(notes(r.llm.requests[3].messages)) == 1  # type: ignore[attr-defined]
    # The history holds the one "running" answer and the one final result.
    history = r.history.messages
    assert len([m for m in history if isinstance(m, ToolMessage)]) == 1
    assert len(notes(history)) == 1
    assert not r.late_results_waiting
    r.llm.assert_consumed()  # type: ignore[attr-defined]


async def test_the_note_is_valid_in_native_and_text_wire_forms() -> None:
    r = runner([[BOOK], "Booking.", "Done: A12."])
    await turn(r, "Book Nopa")
    gate["open"].set()
    await next_late(r)
    await update(r)
    for text_mode in (False, True):
        wire = to_openai_messages(r.history.for_request("s"), text_mode=text_mode)
        roles = [m["role"] for m in wire]
        running = "user" if text_mode else "tool"
        assert roles == ["system", "user", "assistant", running, "assistant", "system", "assistant"]
        assert "b1" in wire[5]["content"]


async def test_a_result_landing_mid_turn_reaches_the_next_request_of_that_turn() -> None:
    script = [[BOOK], [ToolCall("g1", "openGate", {})], "Booked: A12.", "Bye."]
    r = runner(script)
    events = await turn(r, "Book Nopa")
    assert said(events) == "Booked: A12."
    third = r.llm.requests[2].messages  # type: ignore[attr-defined]
    [note] = notes(third)
    assert third[-1] == note  # after the gate's tool message, before the request
    await turn(r, "Bye")
    assert len(notes(r.llm.requests[3].messages)) == 1  # type: ignore[attr-defined]


async def test_run_update_turn_speaks_the_late_result_and_nothing_when_none_waits() -> None:
    r = runner([[BOOK], "I'm on it.", "Your table is booked, reference A12."])
    assert await update(r) == []  # nothing waiting: no turn, no model request
    await turn(r, "Book Nopa")
    assert await update(r) == []  # still running: nothing to tell yet
    assert len(r.llm.requests) == 2  # type: ignore[attr-defined]
    gate["open"].set()
    await next_late(r)
    events = await update(r)
    assert said(events) == "Your table is booked, reference A12."
    assert isinstance(events[-1], TurnCompleted) and events[-1].stop_reason == "stop"
    request = r.llm.requests[2].messages  # type: ignore[attr-defined]
    assert notes(request) == [request[-1]]  # no user message: the note is what it answers
    assert await update(r) == []  # told once
    r.llm.assert_consumed()  # type: ignore[attr-defined]


async def test_late_results_yields_each_as_it_lands_while_iterating() -> None:
    r = runner([[BOOK], "On it."])
    await turn(r, "Book Nopa")
    got: list[ToolCallResult] = []

    async def listen() -> None:
        got.append(await next_late(r))

    async with anyio.create_task_group() as tg:
        tg.start_soon(listen)
        await anyio.sleep(0.05)
        assert got == []
        gate["open"].set()
    assert [(g.call_id, g.status) for g in got] == [("b1", "ok")]
    assert r.late_results_waiting  # the model still gets it


async def test_cancel_call_stops_it_and_the_model_hears_the_aborted_result() -> None:
    r = runner([[BOOK], "On it.", "The booking was cancelled."])
    await turn(r, "Book Nopa")
    assert await r.cancel_call("nope") is None
    result = await r.cancel_call("b1")
    assert result is not None and result.status == "aborted"
    assert signals["b1"].aborted
    assert r.executor.background_calls == ()
    events = await update(r)
    assert said(events) == "The booking was cancelled."
    [note] = notes(r.llm.requests[2].messages)  # type: ignore[attr-defined]
    assert "aborted" in note.content
    assert [(g.call_id, g.status) for g in [await next_late(r)]] == [("b1", "aborted")]


async def test_two_results_that_land_meanwhile_both_reach_the_model_in_landing_order() -> None:
    fly = ToolCall("f1", "searchFlights", {"city": "Oslo"})
    r = runner([[BOOK, fly], "Working on both.", "Both are done."])
    await turn(r, "Book Nopa and find flights to Oslo")
    gate["flights"].set()  # the second call lands first
    first = await next_late(r)
    gate["open"].set()
    second = await next_late(r)
    assert [first.call_id, second.call_id] == ["f1", "b1"]
    await update(r)
    request = r.llm.requests[2].messages  # type: ignore[attr-defined]
    late = [m.content for m in request if isinstance(m, SystemMessage)][1:]
    assert len(late) == 2 and "f1" in late[0] and "b1" in late[1]


async def test_an_aborted_turn_drops_no_late_result() -> None:
    r = runner([[BOOK], "On it.", "Booked: A12."])
    await turn(r, "Book Nopa")
    gate["open"].set()
    await next_late(r)
    barge_in = AbortController()
    barge_in.abort("the user spoke")
    aborted = [e async for e in r.run_turn("wait", abort_signal=barge_in.signal)]
    assert isinstance(aborted[-1], TurnCompleted) and aborted[-1].stop_reason == "aborted"
    # Aborted before its request: the result is not in the history yet, still waiting for
    # the next request (it is never dropped).
    assert len(notes(r.history.messages)) == 0
    assert r.late_results_waiting
    await turn(r, "so?")
    assert not r.late_results_waiting
    assert len(notes(r.llm.requests[2].messages)) == 1  # type: ignore[attr-defined]


PLAYBOOK = Playbook.model_validate(
    {"id": "p", "initial_stage": "a", "stages": [{"id": "a", "tools": ["bookTable"]}]}
)


async def test_the_orchestrator_passes_them_through() -> None:
    llm = ScriptedLLM([[BOOK], "On it.", "Booked: A12."])
    orchestrator = PlaybookOrchestrator(PLAYBOOK, llm, REGISTRY)
    gate["executor"] = orchestrator.runner.executor
    assert isinstance(orchestrator, TurnHandler)
    assert await update(orchestrator) == []
    await turn(orchestrator, "Book Nopa")
    gate["open"].set()
    landed = await next_late(orchestrator)
    assert (landed.call_id, landed.status) == ("b1", "ok")
    assert orchestrator.late_results_waiting
    events = await update(orchestrator)
    assert said(events) == "Booked: A12."
    assert len(notes(llm.requests[2].messages)) == 1
    assert await orchestrator.cancel_call("b1") is None  # it ended already
    assert (
        json.loads(
            next(m for m in orchestrator.history.messages if isinstance(m, ToolMessage)).content
        )["status"]
        == "running"
    )
    llm.assert_consumed()
