"""Each tool call's `tool_call_started` / `tool_call_finished` exactly once, started first, the
moment the executor reports it, whichever of the two sources (executor hooks, the agent's own
events) comes first; call ids reused across batches; calls refused before running."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import TurnRunner
from llmrtc.agent.events import ToolCallFinished, ToolCallStarted
from llmrtc.rtc._tool_events import ToolEventRelay
from llmrtc.telemetry.events import ToolEndEvent, ToolStartEvent
from llmrtc.testing import ScriptedLLM
from llmrtc.tools.calls import ToolCallResult
from tests._requirements import require

pytestmark = pytest.mark.anyio


def wire(sent: list[Any]) -> list[tuple[str, str, str | None]]:
    return [(m.type, m.call_id, getattr(m, "status", None)) for m in sent]


def start(call_id: str, name: str = "lookup") -> ToolStartEvent:
    return ToolStartEvent(execution_id=f"x-{call_id}", call_id=call_id, tool_name=name)


def end(call_id: str, status: str = "ok", *, started: bool = True) -> ToolEndEvent:
    return ToolEndEvent(
        execution_id=f"x-{call_id}",
        call_id=call_id,
        tool_name="lookup",
        status=status,
        started=started,
        duration_s=0.01234,
    )


def agent_started(call_id: str) -> ToolCallStarted:
    return ToolCallStarted(ToolCall(call_id, "lookup", {}))


def agent_finished(call_id: str, status: str = "ok") -> ToolCallFinished:
    return ToolCallFinished(
        ToolCallResult(call_id=call_id, tool_name="lookup", status=status)  # type: ignore[arg-type]
    )


def test_hooks_first_then_the_agents_events_send_each_message_once() -> None:
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    assert relay.relay(agent_started("a"))  # the agent announces the call
    relay.on_tool_start(start("a"))
    relay.on_tool_end(end("a"))
    assert relay.relay(agent_finished("a"))  # after the batch: already sent
    assert not relay.relay(object())
    assert wire(sent) == [("tool_call_started", "a", None), ("tool_call_finished", "a", "ok")]
    assert sent[1].duration_ms == 12.34  # one precision for every duration: the microsecond


def test_a_refused_call_gets_its_started_right_before_its_finished() -> None:
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    relay.on_tool_end(end("b", "not_found", started=False))
    relay.relay(agent_started("b"))
    relay.relay(agent_finished("b", "not_found"))
    assert wire(sent) == [
        ("tool_call_started", "b", None),
        ("tool_call_finished", "b", "not_found"),
    ]


def test_a_call_id_reused_in_the_next_batch_is_reported_again() -> None:
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    for status in ("ok", "error"):
        relay.on_tool_start(start("call_1"))
        relay.on_tool_end(end("call_1", status))
        # the agent's events for this batch come late, after the hooks
        relay.relay(agent_started("call_1"))
        relay.relay(agent_finished("call_1", status))
    relay.on_tool_end(end("call_1", "invalid_arguments", started=False))  # refused, 3rd batch
    relay.relay(agent_started("call_1"))
    relay.relay(agent_finished("call_1", "invalid_arguments"))
    assert not relay._calls  # both sources caught up: nothing kept per call
    assert wire(sent) == [
        ("tool_call_started", "call_1", None),
        ("tool_call_finished", "call_1", "ok"),
        ("tool_call_started", "call_1", None),
        ("tool_call_finished", "call_1", "error"),
        ("tool_call_started", "call_1", None),
        ("tool_call_finished", "call_1", "invalid_arguments"),
    ]


def test_without_hooks_the_agents_events_still_report_every_call() -> None:
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    relay.relay(agent_started("c"))
    relay.relay(agent_finished("c", "timeout"))
    assert wire(sent) == [("tool_call_started", "c", None), ("tool_call_finished", "c", "timeout")]


@tool
async def lookup(city: str) -> dict[str, Any]:
    """Look something up.

    Args:
        city: The city.
    """
    if city == "Nowhere":
        raise RuntimeError("no such place")
    return {"city": city}


async def test_a_real_turn_reports_each_call_once_across_batches_with_reused_ids() -> None:
    require("rtc")
    from llmrtc.rtc import RTCServer
    from llmrtc.testing import FakeTTS, RTCTestClient

    from .conftest import config, fake_speech

    llm = ScriptedLLM(
        [
            [ToolCall("call_1", "lookup", {"city": "Tokyo"}), ToolCall("call_2", "nope", {})],
            [ToolCall("call_1", "lookup", {"city": "Nowhere"})],
            "Done.",
        ]
    )

    def make() -> TurnRunner:
        return TurnRunner(llm, ToolExecutor(ToolRegistry([lookup])), system_prompt="Be brief.")

    async with (
        RTCServer(make, speech=fake_speech(), config=config()) as server,
        RTCTestClient(server.url, tts=FakeTTS()) as client,
    ):
        await client.send_text("Go")
        await client.wait_for("turn_completed")
        tools = [
            (e["type"], e["call_id"], e.get("status"))
            for e in client.events
            if e["type"].startswith("tool_call_")
        ]
    assert sorted(tools[:4]) == sorted(
        [
            ("tool_call_started", "call_1", None),
            ("tool_call_finished", "call_1", "ok"),
            ("tool_call_started", "call_2", None),
            ("tool_call_finished", "call_2", "not_found"),
        ]
    )
    for call in ("call_1", "call_2"):  # started before finished, per call
        kinds = [kind for kind, call_id, _ in tools[:4] if call_id == call]
        assert kinds == ["tool_call_started", "tool_call_finished"]
    assert tools[4:] == [
        ("tool_call_started", "call_1", None),
        ("tool_call_finished", "call_1", "error"),
    ]


def test_every_duration_is_sent_to_the_microsecond_and_a_tiny_one_is_not_made_up() -> None:
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    for call_id, seconds in (("slow", 0.0123456), ("tiny", 0.0000002), ("back", -0.001)):
        relay.on_tool_start(start(call_id))
        relay.on_tool_end(dataclasses.replace(end(call_id), duration_s=seconds))
    # 12.346 (not 12.3 beside 0.015: one field, one precision); 0.2 µs rounds to 0.0 (not a
    # made-up 0.001); a clock that went back is 0. The page says "did not run" from the
    # status, never from a 0.
    assert [m.duration_ms for m in sent if m.type == "tool_call_finished"] == [12.346, 0.0, 0.0]


def test_a_call_shorter_than_a_tenth_of_a_millisecond_keeps_its_microseconds() -> None:
    sent: list[Any] = []
    relay = ToolEventRelay(sent.append)
    quick = dataclasses.replace(end("q"), duration_s=0.0000153)  # 15.3 µs: a dict lookup
    relay.on_tool_start(start("q"))
    relay.on_tool_end(quick)
    relay.relay(agent_finished("r", "not_found"))  # refused: it never ran, 0 ms
    assert [m.duration_ms for m in sent if m.type == "tool_call_finished"] == [0.015, 0.0]


async def test_a_fast_tool_that_ran_is_sent_with_a_duration_above_zero() -> None:
    require("rtc")
    from llmrtc.rtc import RTCServer
    from llmrtc.testing import FakeTTS, RTCTestClient

    from .conftest import config, fake_speech

    @tool
    async def quick(city: str) -> str:
        """Answer at once.

        Args:
            city: The city.
        """
        return city

    llm = ScriptedLLM([[ToolCall("call_1", "quick", {"city": "Tokyo"})], "Done."])

    def make() -> TurnRunner:
        return TurnRunner(llm, ToolExecutor(ToolRegistry([quick])), system_prompt="Be brief.")

    async with (
        RTCServer(make, speech=fake_speech(), config=config()) as server,
        RTCTestClient(server.url, tts=FakeTTS()) as client,
    ):
        await client.send_text("Go")
        finished = await client.wait_for("tool_call_finished")
    # It ran (a few µs): the page must not read "0.0 ms" for it.
    assert finished["status"] == "ok" and 0 < finished["duration_ms"] < 50, finished
