"""A barge-in during a tool batch, through `TurnRunner`: the `"cancel"` call is aborted, the
`on_interrupt="finish"` call completes and its real result answers its call in the history
before the next model request is sent."""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from llmrtc import AbortController, ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import ToolCallFinished, ToolCallStarted, TurnCompleted, TurnRunner
from llmrtc.agent.events import AgentEvent
from llmrtc.llm import AssistantMessage, ToolMessage, UserMessage
from llmrtc.telemetry.events import ToolEndEvent, TurnEndEvent
from llmrtc.testing import RecordingHooks, ScriptedLLM

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Bank:
    """A refund tool that must never pay twice, and a slow search a barge-in may cancel."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.refunds = 0
        bank = self

        @tool
        async def search_orders(query: str) -> str:
            """Slow search."""
            await anyio.sleep(10)
            return query

        @tool(on_interrupt="finish", timeout=5)
        async def refund(order: str) -> dict[str, Any]:
            """Refund an order; once started it completes."""
            bank.log.append("refund started")
            await anyio.sleep(0.3)
            bank.refunds += 1
            bank.log.append("refund done")
            return {"refunded": order}

        self.registry = ToolRegistry([search_orders, refund])


BATCH = [
    ToolCall("s1", "search_orders", {"query": "shoes"}),
    ToolCall("r1", "refund", {"order": "A-17"}),
]


async def test_a_barge_in_mid_batch_waits_for_the_finish_tool_and_keeps_both_results() -> None:
    bank = Bank()
    hooks = RecordingHooks()
    llm = ScriptedLLM([BATCH, "Your refund for A-17 went through."])
    runner = TurnRunner(
        llm, ToolExecutor(bank.registry), system_prompt="You are a bank.", hooks=hooks
    )
    controller = AbortController()
    events: list[AgentEvent] = []

    async def barge_in() -> None:  # as the voice loop's VAD does, while the batch runs
        while "refund started" not in bank.log:
            await anyio.sleep(0.01)
        await anyio.sleep(0.05)
        controller.abort("barge-in")

    async with anyio.create_task_group() as group:
        group.start_soon(barge_in)
        async for event in runner.run_turn("Refund A-17", abort_signal=controller.signal):
            events.append(event)
            if isinstance(event, TurnCompleted):
                bank.log.append("turn completed")

    completed = events[-1]
    assert isinstance(completed, TurnCompleted) and completed.stop_reason == "aborted"
    # The turn ended only after the refund completed (the voice loop's next turn waits for it).
    assert bank.log == ["refund started", "refund done", "turn completed"]
    finished = {e.result.call_id: e.result for e in events if isinstance(e, ToolCallFinished)}
    assert finished["s1"].status == "aborted"
    assert finished["r1"].status == "ok" and finished["r1"].result == {"refunded": "A-17"}
    assert {r.call_id: r.status for r in completed.tool_results} == {"s1": "aborted", "r1": "ok"}
    assert len(llm.requests) == 1  # no model request after the barge-in

    # Both calls are answered in the history, in request order, and the turn says aborted.
    messages = runner.history.messages
    assert isinstance(messages[0], UserMessage) and isinstance(messages[1], AssistantMessage)
    tool_messages = [m for m in messages if isinstance(m, ToolMessage)]
    assert [m.call_id for m in tool_messages] == ["s1", "r1"]
    assert '"aborted"' in tool_messages[0].content
    assert json.loads(tool_messages[1].content) == {"refunded": "A-17"}
    (turn_end,) = hooks.of(TurnEndEvent)
    assert turn_end.stop_reason == "aborted" and turn_end.tool_calls == 2
    assert sorted((e.call_id, e.status) for e in hooks.of(ToolEndEvent)) == [
        ("r1", "ok"),
        ("s1", "aborted"),
    ]

    # The next turn's request sees a valid history with both results (ScriptedLLM checks the
    # pairing of every call with its tool message), and nothing was refunded twice.
    async for event in runner.run_turn("Thanks, and?"):
        events.append(event)
    request = llm.requests[1]
    answered = [m for m in request.messages if isinstance(m, ToolMessage)]
    assert [m.call_id for m in answered] == ["s1", "r1"]
    assert json.loads(answered[1].content) == {"refunded": "A-17"}
    assert isinstance(request.messages[-1], UserMessage)
    assert bank.refunds == 1
    llm.assert_consumed()


async def test_a_barge_in_before_the_batch_runs_nothing_not_even_a_finish_tool() -> None:
    bank = Bank()
    llm = ScriptedLLM([BATCH, "Hello again."])
    runner = TurnRunner(llm, ToolExecutor(bank.registry), system_prompt="You are a bank.")
    controller = AbortController()
    events: list[AgentEvent] = []
    async for event in runner.run_turn("Refund A-17", abort_signal=controller.signal):
        events.append(event)
        if isinstance(event, ToolCallStarted):
            controller.abort("barge-in")  # the calls are stored; no handler started yet
    completed = events[-1]
    assert isinstance(completed, TurnCompleted) and completed.stop_reason == "aborted"
    assert {r.call_id: r.status for r in completed.tool_results} == {
        "s1": "aborted",
        "r1": "aborted",
    }
    assert bank.log == [] and bank.refunds == 0  # nothing happened, so nothing to finish
    async for event in runner.run_turn("Hi"):
        events.append(event)
    llm.assert_consumed()


async def test_leaving_the_turn_before_the_batch_settles_the_finish_call_unrun() -> None:
    bank = Bank()
    llm = ScriptedLLM([BATCH, "Hello again."])
    runner = TurnRunner(llm, ToolExecutor(bank.registry), system_prompt="You are a bank.")
    # Leaving the turn at the first ToolCallStarted settles the stored calls unrun
    # (settle_unrun): the refund never started, so it is aborted, not run.
    async with aclosing(runner.run_turn("Refund A-17")) as stream:
        async for event in stream:
            if isinstance(event, ToolCallStarted):
                break
    assert bank.log == [] and bank.refunds == 0
    tool_messages = [m for m in runner.history.messages if isinstance(m, ToolMessage)]
    assert [m.call_id for m in tool_messages] == ["s1", "r1"]
    assert all('"aborted"' in m.content for m in tool_messages)
    async for _ in runner.run_turn("Hi"):
        pass
    assert bank.refunds == 0
    llm.assert_consumed()


async def test_cancelling_the_turn_task_stops_the_finish_tool_with_a_valid_history() -> None:
    bank = Bank()
    llm = ScriptedLLM([BATCH, "Hello again."])
    runner = TurnRunner(llm, ToolExecutor(bank.registry), system_prompt="You are a bank.")
    controller = AbortController()

    async def turn() -> None:
        async for _ in runner.run_turn("Refund A-17", abort_signal=controller.signal):
            pass

    with anyio.move_on_after(0.1):  # session teardown while the refund runs
        await turn()
    assert bank.log == ["refund started"] and bank.refunds == 0
    tool_messages = [m for m in runner.history.messages if isinstance(m, ToolMessage)]
    assert [m.call_id for m in tool_messages] == ["s1", "r1"]
    assert all('"aborted"' in m.content for m in tool_messages)
    async for _ in runner.run_turn("Hi"):
        pass
    llm.assert_consumed()
