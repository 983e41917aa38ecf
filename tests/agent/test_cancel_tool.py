"""The built-in `cancel_tool_call`: offered only while background calls run (their ids and tools
in its description), it stops the named call (its handler sees the abort; the call's one final
result, `aborted`, reaches the model as a late result), answers a wrong id precisely, is refused
like any tool when it was not offered, and works in a playbook. `aclose()` ends the session's
background calls for good."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolContext, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import (
    CANCEL_TOOL,
    AgentEvent,
    ToolCallFinished,
    TurnCompleted,
    TurnHandler,
    TurnRunner,
)
from llmrtc.agent.cancel_tool import CANCEL_REASON
from llmrtc.llm.messages import SystemMessage
from llmrtc.llm.types import LLMRequest
from llmrtc.playbook import Playbook, PlaybookOrchestrator
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import RecordingHooks, ScriptedLLM

pytestmark = pytest.mark.anyio

seen: dict[str, Any] = {}


@tool(background=True, timeout=60.0)
async def bookTable(restaurant: str, ctx: ToolContext) -> dict[str, Any]:
    """Book a table (waits until it is stopped)."""
    seen.setdefault("started", []).append(ctx.call_id)
    try:
        await anyio.sleep_forever()
    finally:
        # The handler sees its own abort signal when it is stopped.
        seen.setdefault("aborted", {})[ctx.call_id] = (
            ctx.abort_signal.aborted,
            ctx.abort_signal.reason,
        )
    raise AssertionError("unreachable")


@tool
async def lookupWeather(city: str) -> str:
    """Look up the weather."""
    return f"sunny in {city}"


@tool(execution_policy="sequential")
async def stopAll() -> str:
    """The application stops every background call (a barrier before later calls)."""
    executor = seen["executor"]
    for call in executor.background_calls:
        await executor.cancel_call(call.call_id, reason="stopped by the app")
    return "stopped"


REGISTRY = ToolRegistry([bookTable, lookupWeather, stopAll])
BOOK = ToolCall("b1", "bookTable", {"restaurant": "Nopa"})
BOOK2 = ToolCall("b2", "bookTable", {"restaurant": "Zuni"})


def cancel(call_id: str, *, id_: str = "x1") -> ToolCall:
    return ToolCall(id_, CANCEL_TOOL, {"call_id": call_id})


@pytest.fixture(autouse=True)
def _fresh() -> None:
    seen.clear()


def make_runner(script: list[Any], hooks: RecordingHooks | None = None) -> TurnRunner:
    return TurnRunner(ScriptedLLM(script), ToolExecutor(REGISTRY, hooks=hooks), system_prompt="s")


async def turn(handler: Any, text: str | None) -> list[AgentEvent]:
    return [event async for event in handler.run_turn(text)]


def requests(handler: Any) -> list[LLMRequest]:
    llm = handler.llm if isinstance(handler, TurnRunner) else handler.runner.llm
    return llm.requests  # type: ignore[no-any-return]


def tool_names(request: LLMRequest) -> list[str]:
    return [t.name for t in request.tools]


def finished(events: list[AgentEvent]) -> dict[str, Any]:
    return {e.result.call_id: e.result for e in events if isinstance(e, ToolCallFinished)}


def notes(request: LLMRequest, call_id: str) -> list[SystemMessage]:
    return [
        m
        for m in request.messages
        if isinstance(m, SystemMessage) and f"tool call {call_id} " in m.content
    ]


def wire_tools(request: LLMRequest) -> str:
    return json.dumps([t.to_openai() for t in request.tools], sort_keys=True)


async def test_the_model_cancels_a_running_call_and_hears_its_aborted_result_once() -> None:
    hooks = RecordingHooks()
    r = make_runner(
        [
            [BOOK],
            "I'm booking it.",
            [cancel("b1")],
            "Cancelled.",
            "Anything else?",
        ],
        hooks,
    )
    await turn(r, "Book Nopa")
    assert [c.call_id for c in r.executor.background_calls] == ["b1"]
    # The first request of the turn had no background call running: no cancel tool.
    assert CANCEL_TOOL not in tool_names(requests(r)[0])
    events = await turn(r, "Actually, cancel that booking")
    first, after = requests(r)[2], requests(r)[3]
    # Offered while b1 runs, naming it and its tool.
    [offered] = [t for t in first.tools if t.name == CANCEL_TOOL]
    assert "b1" in offered.description and "bookTable" in offered.description
    assert tool_names(first) == ["bookTable", "lookupWeather", "stopAll", CANCEL_TOOL]
    # Its own result says plainly what happened.
    result = finished(events)["x1"]
    assert (result.status, result.result) == ("ok", "cancelled call b1 (bookTable)")
    # The handler saw its abort signal, with the reason.
    assert seen["aborted"]["b1"] == (True, CANCEL_REASON)
    # The call's one final result is "aborted" and reaches the very next request.
    [note] = notes(after, "b1")
    assert "status: aborted" in note.content and "bookTable" in note.content
    assert CANCEL_TOOL not in tool_names(after)  # nothing runs any more
    assert isinstance(events[-1], TurnCompleted) and events[-1].text == "Cancelled."
    await turn(r, "No, thanks")
    assert len(notes(requests(r)[4], "b1")) == 1  # told once, not again
    ends = hooks.of(ToolEndEvent, call_id="b1")
    assert [e.status for e in ends] == ["aborted"]  # exactly one final result
    assert [e.status for e in hooks.of(ToolEndEvent, call_id="x1")] == ["ok"]  # an ordinary call
    assert r.executor.background_calls == ()
    r.llm.assert_consumed()  # type: ignore[attr-defined]


async def test_without_background_calls_the_requests_tools_are_unchanged() -> None:
    plain = make_runner(["Hi.", "Hello again."])
    await turn(plain, "hi")
    r = make_runner(["Hi.", [BOOK], "Booking.", [cancel("b1")], "Done.", "Hello again."])
    await turn(r, "hi")
    await turn(r, "Book Nopa")
    await turn(r, "Cancel it")
    await turn(r, "hi")
    reqs = requests(r)
    baseline = requests(plain)[0]
    # Before any background call, and after the last one ended: byte-identical tools.
    for request in (reqs[0], reqs[1], reqs[4], reqs[5]):
        assert request.tools == baseline.tools
        assert wire_tools(request) == wire_tools(baseline)
        assert request.tool_choice == baseline.tool_choice
    assert CANCEL_TOOL in tool_names(reqs[2]) and CANCEL_TOOL in tool_names(reqs[3])


async def test_a_call_to_it_when_it_was_not_offered_is_refused_like_any_unknown_tool() -> None:
    hooks = RecordingHooks()
    r = make_runner([[cancel("b1")], "Nothing to cancel."], hooks)
    events = await turn(r, "cancel it")
    result = finished(events)["x1"]
    assert result.status == "not_found"
    assert "unknown tool 'cancel_tool_call'" in result.error
    assert CANCEL_TOOL not in tool_names(requests(r)[0])
    assert isinstance(events[-1], TurnCompleted)


async def test_a_wrong_id_is_refused_naming_the_running_ids() -> None:
    r = make_runner(
        [[BOOK, BOOK2], "Booking both.", [cancel("b9")], "Sorry.", [cancel("b2")], "Done."]
    )
    await turn(r, "Book Nopa and Zuni")
    events = await turn(r, "cancel one")
    result = finished(events)["x1"]
    # The ids are an enum of the calls running: an unknown one is refused before it runs.
    assert result.status == "invalid_arguments"
    assert "'b9' is not one of ['b1', 'b2']" in (result.error or ""), result.error
    [offered] = [t for t in requests(r)[2].tools if t.name == CANCEL_TOOL]
    assert "b1: bookTable" in offered.description and "b2: bookTable" in offered.description
    assert len(r.executor.background_calls) == 2  # nothing was stopped
    events = await turn(r, "cancel Zuni")
    assert finished(events)["x1"].result == "cancelled call b2 (bookTable)"
    assert [c.call_id for c in r.executor.background_calls] == ["b1"]
    assert "b2" in seen["aborted"] and "b1" not in seen.get("aborted", {})
    await r.aclose()


async def test_a_call_that_ended_before_the_cancel_ran_gets_a_precise_error() -> None:
    # The model saw the cancel tool, but the call ended before its cancel ran (here the
    # application stopped it, in a sequential call the model made first in the same response).
    r = make_runner([[BOOK], "Booking.", [ToolCall("s1", "stopAll", {}), cancel("b1")], "Ok."])
    seen["executor"] = r.executor
    await turn(r, "Book Nopa")
    events = await turn(r, "cancel it")
    result = finished(events)["x1"]
    assert result.status == "error"
    assert result.error == (
        "no running background call has id 'b1'; no background call is running now"
    )
    assert seen["aborted"] == {"b1": (True, "stopped by the app")}


async def test_a_registry_may_not_define_the_built_in_tool() -> None:
    @tool(name=CANCEL_TOOL)
    async def own(call_id: str) -> str:
        """Mine."""
        return call_id

    with pytest.raises(ValueError, match="'cancel_tool_call' is built in"):
        TurnRunner(ScriptedLLM([]), ToolExecutor(ToolRegistry([own])), system_prompt="s")


async def test_aclose_stops_every_running_call_once_and_is_idempotent() -> None:
    hooks = RecordingHooks()
    r = make_runner([[BOOK, BOOK2], "Booking both."], hooks)
    assert isinstance(r, TurnHandler)
    await r.aclose()  # nothing running: returns at once
    await turn(r, "Book both")
    assert len(r.executor.background_calls) == 2
    with anyio.fail_after(10):
        await r.aclose()
    assert r.executor.background_calls == ()  # all landed when it returned
    assert seen["aborted"] == {"b1": (True, "session ended"), "b2": (True, "session ended")}
    ends = sorted((e.call_id, e.status) for e in hooks.of(ToolEndEvent))
    assert ends == [("b1", "aborted"), ("b2", "aborted")]
    await r.aclose()
    assert len(hooks.of(ToolEndEvent)) == 2  # no second result
    landed = []
    with anyio.fail_after(5):
        async for result in r.late_results():
            landed.append((result.call_id, result.status))
            if len(landed) == 2:
                break
    assert sorted(landed) == [("b1", "aborted"), ("b2", "aborted")]


PLAYBOOK = Playbook.model_validate(
    {
        "id": "p",
        "initial_stage": "booking",
        "stages": [
            {"id": "booking", "tools": ["bookTable"]},
            {"id": "weather", "tools": ["lookupWeather"]},
        ],
        "transitions": [
            {
                "id": "to_weather",
                "from_stage": "booking",
                "condition": {"type": "llm_decision", "description": "weather questions"},
                "action": {"target_stage": "weather"},
            }
        ],
    }
)


async def test_in_a_playbook_the_model_cancels_a_call_and_aclose_ends_the_rest() -> None:
    hooks = RecordingHooks()
    llm = ScriptedLLM(
        [
            [BOOK, BOOK2],
            "Booking both.",
            [ToolCall("w1", "lookupWeather", {"city": "Oslo"}), cancel("b1")],
            "Cancelled Nopa.",
        ]
    )
    orchestrator = PlaybookOrchestrator(PLAYBOOK, llm, REGISTRY, hooks=hooks)
    assert isinstance(orchestrator, TurnHandler)
    await turn(orchestrator, "Book Nopa and Zuni")
    assert CANCEL_TOOL not in tool_names(llm.requests[0])
    events = await turn(orchestrator, "cancel Nopa")
    offered = tool_names(llm.requests[2])
    assert offered == ["bookTable", "playbook_transition", CANCEL_TOOL]
    results = finished(events)
    assert results["x1"].result == "cancelled call b1 (bookTable)"
    # Another stage's tool is still refused in this stage's words while the cancel tool is on.
    assert results["w1"].status == "not_found"
    assert "not available in stage 'booking'" in results["w1"].error
    assert seen["aborted"] == {"b1": (True, CANCEL_REASON)}
    [note] = notes(llm.requests[3], "b1")
    assert "status: aborted" in note.content
    # Still running: b2, named in the next request's cancel tool.
    [tool_def] = [t for t in llm.requests[3].tools if t.name == CANCEL_TOOL]
    assert "b2: bookTable" in tool_def.description and "b1" not in tool_def.description
    with anyio.fail_after(10):
        await orchestrator.aclose()
    await orchestrator.aclose()
    assert seen["aborted"]["b2"] == (True, "session ended")
    assert sorted((e.call_id, e.status) for e in hooks.of(ToolEndEvent) if e.call_id[0] == "b") == [
        ("b1", "aborted"),
        ("b2", "aborted"),
    ]
    llm.assert_consumed()


async def test_a_preemptive_answer_offers_the_cancel_tool_as_the_turn_would() -> None:
    r = make_runner([[BOOK], "Booking.", [cancel("b1")], "Cancelled.", "Sure."])
    await turn(r, "Book Nopa")
    early = r.preempt("cancel it")
    assert CANCEL_TOOL in tool_names(early.request)
    await early.run()
    events = [e async for e in r.run_turn("cancel it", preemption=early)]
    assert early.adopted  # the turn's first request was exactly the preempted one
    assert finished(events)["x1"].result == "cancelled call b1 (bookTable)"
    # Nothing runs any more: the next preemption offers what a plain runner does.
    late = r.preempt("thanks")
    assert CANCEL_TOOL not in tool_names(late.request)
    await late.run()
    [e async for e in r.run_turn("thanks", preemption=late)]
    assert late.adopted


async def test_a_tool_router_never_forces_the_cancel_tool() -> None:
    # The offline profile routes tools with a required free-text argument and keeps the call
    # only if its words were said: no user says a call id, so the id is no free text.
    from llmrtc.llm.tool_routing import routable_tools

    r = make_runner([[BOOK], "Booking.", "Ok."])
    await turn(r, "Book Nopa")
    await turn(r, "how long")
    [offered] = [t for t in requests(r)[2].tools if t.name == CANCEL_TOOL]
    assert offered.parameters["properties"]["call_id"]["enum"] == ["b1"]
    assert routable_tools([offered]) == []
    await r.aclose()
