"""Background tool calls on the wire: `tool_call_started` says `background`, each progress line
is a `tool_call_progress`, and the one `tool_call_finished` is the call's final result (sent
when it lands, after its turn), never the provisional `running` answer the model got."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolContext, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import TurnRunner
from llmrtc.agent.events import ToolCallFinished, ToolCallStarted
from llmrtc.rtc._tool_events import ToolEventRelay
from llmrtc.telemetry.events import ToolEndEvent, ToolProgressEvent, ToolStartEvent
from llmrtc.testing import ScriptedLLM
from llmrtc.tools.calls import RUNNING_NOTE, ToolCallResult
from tests._requirements import require

pytestmark = pytest.mark.anyio


def wire(sent: list[Any]) -> list[tuple[Any, ...]]:
    return [(m.type, m.call_id, getattr(m, "status", getattr(m, "message", None))) for m in sent]


def start(call_id: str, *, background: bool = True) -> ToolStartEvent:
    return ToolStartEvent(
        execution_id=f"x-{call_id}", call_id=call_id, tool_name="bookTable", background=background
    )


def final(call_id: str, status: str = "ok") -> ToolEndEvent:
    return ToolEndEvent(
        execution_id=f"x-{call_id}",
        call_id=call_id,
        tool_name="bookTable",
        status=status,
        started=True,
        duration_s=1.5,
        background=True,
    )


def progress(call_id: str, message: str) -> ToolProgressEvent:
    return ToolProgressEvent(
        execution_id=f"x-{call_id}",
        call_id=call_id,
        tool_name="bookTable",
        message=message,
        background=True,
    )


def agent_started(call_id: str) -> ToolCallStarted:
    return ToolCallStarted(ToolCall(call_id, "bookTable", {}), background=True)


def running(call_id: str) -> ToolCallFinished:
    return ToolCallFinished(ToolCallResult(call_id, "bookTable", "running", RUNNING_NOTE))


# The relay --------------------------------------------------------------------------------


def test_the_running_answer_is_swallowed_and_the_final_result_is_the_one_finished() -> None:
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    relay.on_tool_start(start("b"))
    assert relay.relay(agent_started("b"))
    relay.on_tool_progress(progress("b", "Checking availability"))
    assert relay.relay(running("b"))  # handled (not passed on), but nothing is sent
    assert wire(sent) == [
        ("tool_call_started", "b", None),
        ("tool_call_progress", "b", "Checking availability"),
    ]
    assert sent[0].background is True and sent[1].name == "bookTable"
    assert relay._calls  # the final result is still owed
    relay.on_tool_end(final("b"))  # the late final result, long after the turn
    assert wire(sent)[2:] == [("tool_call_finished", "b", "ok")]
    assert sent[2].duration_ms == 1500.0
    assert not relay._calls  # both sources reported it: nothing kept for the call


def test_a_final_result_before_the_agents_running_answer_is_sent_once() -> None:
    # A quick background tool can land before the turn's events reach the relay.
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    relay.on_tool_start(start("b"))
    relay.on_tool_end(final("b", "error"))
    relay.relay(agent_started("b"))
    relay.relay(running("b"))
    assert wire(sent) == [("tool_call_started", "b", None), ("tool_call_finished", "b", "error")]
    assert not relay._calls


def test_the_agents_started_event_carries_background_when_it_comes_first() -> None:
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    relay.relay(agent_started("b"))
    relay.relay(running("b"))
    relay.on_tool_start(start("b"))
    relay.on_tool_end(final("b", "aborted"))
    assert [(m.type, getattr(m, "background", None)) for m in sent] == [
        ("tool_call_started", True),
        ("tool_call_finished", None),
    ]
    assert sent[1].status == "aborted"
    assert not relay._calls


def test_a_background_call_id_reused_by_a_later_plain_call_is_reported_again() -> None:
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    relay.on_tool_start(start("call_1"))
    relay.relay(agent_started("call_1"))
    relay.relay(running("call_1"))
    relay.on_tool_end(final("call_1"))
    # the next batch reuses the id for a plain call
    relay.on_tool_start(start("call_1", background=False))
    relay.on_tool_end(
        ToolEndEvent(
            execution_id="y", call_id="call_1", tool_name="bookTable", status="ok", started=True
        )
    )
    relay.relay(ToolCallStarted(ToolCall("call_1", "bookTable", {})))
    relay.relay(ToolCallFinished(ToolCallResult("call_1", "bookTable", "ok")))
    assert [(m.type, getattr(m, "background", None)) for m in sent] == [
        ("tool_call_started", True),
        ("tool_call_finished", None),
        ("tool_call_started", False),
        ("tool_call_finished", None),
    ]
    assert not relay._calls


def test_a_plain_call_reusing_the_id_of_a_running_one_does_not_end_it_early() -> None:
    # Scripted and small models reuse `call_1`: the next turn's plain call ends (hook, then
    # the agent's event) while the background call of the same id still runs.
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    relay.on_tool_start(start("call_1"))
    relay.relay(agent_started("call_1"))
    relay.relay(running("call_1"))
    relay.on_tool_start(start("call_1", background=False))
    relay.relay(ToolCallStarted(ToolCall("call_1", "bookTable", {})))
    relay.on_tool_end(
        ToolEndEvent(
            execution_id="y", call_id="call_1", tool_name="bookTable", status="error", started=True
        )
    )
    relay.relay(ToolCallFinished(ToolCallResult("call_1", "bookTable", "error")))
    assert [m.type for m in sent] == ["tool_call_started"] * 2 + ["tool_call_finished"]
    relay.on_tool_end(final("call_1", "ok"))  # the background call lands last
    assert [getattr(m, "status", None) for m in sent] == [None, None, "error", "ok"]
    assert not relay._calls


# Over a real peer connection -------------------------------------------------------------


@tool(background=True, timeout=30.0)
async def bookTable(restaurant: str, ctx: ToolContext) -> dict[str, Any]:
    """Book a table.

    Args:
        restaurant: Where.
    """
    await ctx.progress(f"Checking availability at {restaurant}")
    await anyio.sleep(0.8)
    await ctx.progress("Table held, confirming")
    await anyio.sleep(0.7)
    return {"confirmed": True, "reference": "A12"}


async def test_progress_and_the_late_final_result_reach_the_client() -> None:
    require("rtc")
    from llmrtc.rtc import RTCServer
    from llmrtc.testing import FakeTTS, RTCTestClient

    from .conftest import config, fake_speech

    llm = ScriptedLLM(
        [
            [ToolCall("call_b", "bookTable", {"restaurant": "Nopa"})],
            "I am booking it now.",
            # Spare answers: the voice loop may run an update turn for the late result (this
            # test checks only the wire messages, not what the agent says then).
            "Your table at Nopa is booked.",
            "Anything else?",
        ]
    )

    def make() -> TurnRunner:
        return TurnRunner(llm, ToolExecutor(ToolRegistry([bookTable])), system_prompt="Be brief.")

    async with (
        RTCServer(make, speech=fake_speech(), config=config()) as server,
        RTCTestClient(server.url, tts=FakeTTS()) as client,
    ):
        await client.send_text("Book a table at Nopa")
        started = await client.wait_for("tool_call_started", call_id="call_b")
        first = await client.wait_for("tool_call_progress", call_id="call_b")
        completed = await client.wait_for("turn_completed")
        second = await client.wait_for("tool_call_progress", call_id="call_b")
        finished = await client.wait_for("tool_call_finished", call_id="call_b")
        events = list(client.events)
    assert started == {
        "type": "tool_call_started",
        "call_id": "call_b",
        "name": "bookTable",
        "background": True,
    }
    assert first == {
        "type": "tool_call_progress",
        "call_id": "call_b",
        "name": "bookTable",
        "message": "Checking availability at Nopa",
    }
    assert second["message"] == "Table held, confirming"
    assert completed["text"] == "I am booking it now."
    # The final result comes after the turn that started the call, once, and is not `running`.
    assert finished["status"] == "ok" and finished["duration_ms"] >= 1000, finished
    order = [id(e) for e in events]
    assert order.index(id(completed)) < order.index(id(finished))
    finishes = [e for e in events if e["type"] == "tool_call_finished"]
    assert finishes == [finished]
