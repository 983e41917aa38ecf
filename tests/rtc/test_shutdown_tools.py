"""A session the server ends (idle timeout, shutdown) reports every started tool call finished
before it closes, and a shutdown past its grace aborts even `"finish"` tools, so it is bounded;
the aborted results are kept in the saved history."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import TurnRunner
from llmrtc.rtc import InMemorySessionStore, RTCServer
from llmrtc.testing import ScriptedLLM

from .conftest import config, fake_speech, raw_client

pytestmark = pytest.mark.anyio


@tool(on_interrupt="finish")
async def book_table(name: str) -> dict[str, Any]:
    """A booking that, once started, is not cut short by a barge-in.

    Args:
        name: Who the table is for.
    """
    await anyio.sleep(300)  # far past every bound of these tests
    return {"booked": name}


@tool
async def look_up(city: str) -> dict[str, Any]:
    """A lookup that takes its time.

    Args:
        city: The city.
    """
    await anyio.sleep(300)
    return {"city": city}


def runners(llm: ScriptedLLM) -> Any:
    registry = ToolRegistry([book_table, look_up])
    return lambda: TurnRunner(llm, ToolExecutor(registry), system_prompt="Book tables.")


def order_of(events: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    return [(e["type"], e.get("call_id") or e.get("code")) for e in events]


async def test_after_the_grace_a_finish_tool_is_aborted_reported_and_saved() -> None:
    llm = ScriptedLLM(
        [[ToolCall("f", "book_table", {"name": "Ada"}), ToolCall("c", "look_up", {"city": "Oslo"})]]
    )
    store = InMemorySessionStore()
    server = RTCServer(
        runners(llm), speech=fake_speech(), config=config(shutdown_grace=0.5), store=store
    )
    await server.__aenter__()
    exited = False
    try:
        async with raw_client(server.url) as client:
            opening = await client.connect()
            await client.send({"type": "text", "text": "A table for Ada, and Oslo's weather"})
            await client.wait_for("tool_call_started", call_id="f")
            await client.wait_for("tool_call_started", call_id="c")
            # leaving the server: the grace passes with the booking still running
            with anyio.fail_after(20):  # the booking alone would hold it for 300 s
                await server.__aexit__(None, None, None)
            exited = True
            await client.wait_closed()
    finally:
        if not exited:
            await server.__aexit__(None, None, None)
    finished = {e["call_id"]: e for e in client.of_type("tool_call_finished")}
    assert finished["f"]["status"] == "aborted"
    order = order_of(client.events)
    assert order.index(("tool_call_finished", "f")) < order.index(("error", "shutting_down"))
    assert order.index(("tool_call_finished", "c")) < order.index(("error", "shutting_down"))
    state = await store.load(opening["session_id"])
    assert state is not None and state.history is not None
    results = {m["call_id"]: m for m in state.history["messages"] if m.get("role") == "tool"}
    assert json.loads(results["f"]["content"])["status"] == "aborted"
    assert sorted(results) == ["c", "f"]  # one result each


async def test_an_idle_timeout_reports_every_started_call_finished_before_the_close() -> None:
    llm = ScriptedLLM([[ToolCall("c", "look_up", {"city": "Oslo"})]])
    async with (
        RTCServer(runners(llm), speech=fake_speech(), config=config(idle_timeout=1.5)) as server,
        raw_client(server.url) as client,
    ):
        await client.connect()
        await client.send({"type": "text", "text": "Weather in Oslo?"})
        await client.wait_for("tool_call_started", call_id="c")
        assert await client.wait_closed() == 1000
    order = order_of(client.events)
    assert ("error", "idle_timeout") in order
    assert order.index(("tool_call_finished", "c")) < order.index(("error", "idle_timeout"))
    assert client.of_type("tool_call_finished")[0]["status"] == "aborted"


async def test_a_forced_shutdown_mid_answer_saves_only_what_was_heard_marked_interrupted() -> None:
    sentence = "This is one more sentence of a long answer."
    answer = " ".join([sentence] * 30)  # about 20 s of FakeTTS speech, far past the grace
    llm = ScriptedLLM([answer])
    store = InMemorySessionStore()
    server = RTCServer(
        runners(llm), speech=fake_speech(), config=config(shutdown_grace=0.5), store=store
    )
    await server.__aenter__()
    exited = False
    try:
        async with raw_client(server.url) as client:
            opening = await client.connect()
            await client.send({"type": "text", "text": "Tell me everything"})
            await client.wait_for("agent_speech_started")
            with anyio.fail_after(20):
                await server.__aexit__(None, None, None)  # grace over mid-answer: aborted
            exited = True
            await client.wait_closed()
    finally:
        if not exited:
            await server.__aexit__(None, None, None)
    state = await store.load(opening["session_id"])
    assert state is not None and state.history is not None
    said = [m for m in state.history["messages"] if m.get("role") == "assistant"]
    assert len(said) == 1
    # the history keeps only the words played before the cut, and says it was cut
    assert said[0].get("interrupted") is True
    heard = said[0]["content"]
    assert answer.startswith(heard) and len(heard.split()) < len(answer.split()) // 2
    ended = client.of_type("agent_speech_ended")
    assert ended and ended[-1]["interrupted"] is True
    assert heard == ended[-1]["heard_text"]  # what the page was told the user heard
