"""TurnRunner with ScriptedLLM: streaming order, batches, round limit, abort, history validity."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from llmrtc import (
    AbortController,
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    tool,
)
from llmrtc.agent import (
    ConversationHistory,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnRunner,
)
from llmrtc.llm import AssistantMessage, ToolMessage, UserMessage
from llmrtc.llm.settings import ModelSettings
from llmrtc.telemetry.events import LLMEndEvent, LLMStartEvent, TurnEndEvent, TurnStartEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import ScriptedLLM, ScriptedResponse
from llmrtc.testing.scripted import check_chat_messages

pytestmark = pytest.mark.anyio

log: list[str] = []


@tool
async def lookupWeather(city: str) -> dict[str, Any]:
    """Current weather.

    Args:
        city: The city.
    """
    await anyio.sleep(0.05 if city == "Tokyo" else 0.01)
    log.append(f"weather {city}")
    return {"city": city, "temp": 21}


@tool(execution_policy="sequential")
async def save_note(text: str) -> str:
    """Save a note (sequential)."""
    log.append(f"save {text}")
    return "saved"


@tool(timeout=0.05)
async def slow_lookup(query: str) -> str:
    """Too slow."""
    await anyio.sleep(5)
    return query


@tool
async def wait_forever(ctx: ToolContext) -> None:
    """Runs until aborted."""
    await anyio.sleep(30)


REGISTRY = ToolRegistry([lookupWeather, save_note, slow_lookup, wait_forever])


def runner_for(script: list[Any], **options: Any) -> tuple[TurnRunner, ScriptedLLM]:
    llm = ScriptedLLM(script)
    options.setdefault("system_prompt", "You are helpful.")
    return TurnRunner(llm, ToolExecutor(REGISTRY), **options), llm


async def collect(runner: TurnRunner, text: str | None = "hi", **kw: Any) -> list[Any]:
    return [event async for event in runner.run_turn(text, **kw)]


def assert_valid(runner: TurnRunner) -> None:
    check_chat_messages(runner.history.for_request("sys"))


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, arguments)


async def test_parallel_calls_in_one_response_then_a_final_answer() -> None:
    runner, llm = runner_for(
        [
            ScriptedResponse(
                text="Checking.",
                tool_calls=[
                    call("c1", "lookupWeather", city="Tokyo"),
                    call("c2", "lookupWeather", city="Oslo"),
                ],
            ),
            "Both are 21.",
        ]
    )
    events = await collect(runner, "Weather in Tokyo and Oslo?")
    kinds = [type(e).__name__ for e in events]
    assert kinds[0] == "TextDelta"
    started = [e.call.call_id for e in events if isinstance(e, ToolCallStarted)]
    finished = [e.result.call_id for e in events if isinstance(e, ToolCallFinished)]
    assert started == ["c1", "c2"]
    assert finished == ["c2", "c1"]  # in the order they finished: Oslo is faster
    assert kinds.index("ToolCallStarted") > kinds.index("TextDelta")
    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    assert completed.text == "Checking. Both are 21."
    assert completed.text == "".join(e.text for e in events if isinstance(e, TextDelta))
    assert [r.call_id for r in completed.tool_results] == ["c1", "c2"]
    assert completed.stop_reason == "stop"
    assert completed.usage.output_tokens > 0
    second_request = llm.requests[1]
    assert [m.call_id for m in second_request.messages if isinstance(m, ToolMessage)] == [
        "c1",
        "c2",
    ]
    assert_valid(runner)
    llm.assert_consumed()


async def test_a_sequential_write_waits_for_the_reads_before_it() -> None:
    log.clear()
    runner, llm = runner_for(
        [
            [call("r1", "lookupWeather", city="Tokyo"), call("w1", "save_note", text="umbrella")],
            "Noted.",
        ]
    )
    await collect(runner)
    assert log == ["weather Tokyo", "save umbrella"]
    llm.assert_consumed()


async def test_a_timeout_becomes_a_result_the_model_sees() -> None:
    runner, llm = runner_for([[call("s1", "slow_lookup", query="x")], "Sorry, that timed out."])
    events = await collect(runner)
    (finished,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished.result.status == "timeout"
    tool_message = next(m for m in llm.requests[1].messages if isinstance(m, ToolMessage))
    assert '"status": "timeout"' in tool_message.content
    assert_valid(runner)


async def test_abort_during_tool_execution() -> None:
    runner, llm = runner_for(
        [[call("w1", "wait_forever"), call("q1", "lookupWeather", city="Rome")]]
    )
    controller = AbortController()
    events: list[Any] = []
    started = time.monotonic()
    async for event in runner.run_turn("go", abort_signal=controller.signal):
        events.append(event)
        if isinstance(event, ToolCallStarted) and event.call.call_id == "q1":
            controller.abort("barge-in")
    assert time.monotonic() - started < 5
    started_ids = [e.call.call_id for e in events if isinstance(e, ToolCallStarted)]
    finished = {
        e.result.call_id: e.result.status for e in events if isinstance(e, ToolCallFinished)
    }
    assert started_ids == ["w1", "q1"] and finished == {"w1": "aborted", "q1": "aborted"}
    assert events[-1].stop_reason == "aborted"
    assert len(llm.requests) == 1  # no further model request after the abort
    assert_valid(runner)


async def test_abort_while_text_streams_keeps_what_was_said() -> None:
    runner, _ = runner_for([ScriptedResponse(text="one two three four five six", chunk_delay=0.05)])
    controller = AbortController()
    events: list[Any] = []
    async for event in runner.run_turn("talk", abort_signal=controller.signal):
        events.append(event)
        if len(events) == 2:
            controller.abort("barge-in")
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["one", " two"]
    assert events[-1] == TurnCompleted("one two", (), events[-1].usage, "aborted")
    last = runner.history.messages[-1]
    assert last == AssistantMessage("one two", (), True)  # what was actually produced
    assert_valid(runner)


async def test_leaving_the_loop_early_aborts_and_leaves_a_valid_history() -> None:
    runner, _ = runner_for([[call("w1", "wait_forever"), call("w2", "wait_forever")]])
    async with _closing(runner.run_turn("go")) as events:
        async for event in events:
            if isinstance(event, ToolCallStarted):
                break  # the calls are in the history, without results yet
    tool_messages = [m for m in runner.history.messages if isinstance(m, ToolMessage)]
    assert [m.call_id for m in tool_messages] == ["w1", "w2"]
    assert all('"aborted"' in m.content for m in tool_messages)
    assert_valid(runner)


def _closing(generator: Any) -> Any:
    from contextlib import aclosing

    return aclosing(generator)


async def test_round_limit_forces_a_final_answer_and_drops_its_calls() -> None:
    loop = [call(f"c{i}", "lookupWeather", city="Oslo") for i in range(3)]
    runner, llm = runner_for(
        [[loop[0]], [loop[1]], ScriptedResponse(text="Done.", tool_calls=[loop[2]])],
        max_tool_rounds=2,
    )
    events = await collect(runner)
    assert len(llm.requests) == 3  # max_tool_rounds + 1
    assert [r.tool_choice for r in llm.requests] == ["auto", "auto", "none"]
    assert llm.requests[-1].tools  # tools are still listed in the last request
    assert events[-1].stop_reason == "max_tool_rounds"
    assert [e.call.call_id for e in events if isinstance(e, ToolCallStarted)] == ["c0", "c1"]
    assert "c2" not in str(runner.history.messages)  # not run, not stored
    assert_valid(runner)


async def test_forcing_tool_choice_applies_to_the_first_round_only() -> None:
    runner, llm = runner_for(
        [[call("c1", "lookupWeather", city="Oslo")], "Fine."],
        tool_choice={"name": "lookupWeather"},
    )
    await collect(runner)
    assert [r.tool_choice for r in llm.requests] == [{"name": "lookupWeather"}, "auto"]


async def test_tools_subset_and_request_options() -> None:
    runner, llm = runner_for(
        ["ok"],
        tools=["lookupWeather"],
        model_settings=ModelSettings(model="m2", temperature=0.1, max_tokens=20, top_p=0.5),
    )
    await collect(runner)
    request = llm.requests[0]
    assert [t.name for t in request.tools] == ["lookupWeather"]
    assert request.settings == ModelSettings("m2", 0.1, 20, 0.5)
    assert (
        request.settings.model,
        request.settings.temperature,
        request.settings.max_tokens,
        request.settings.top_p,
    ) == (
        "m2",
        0.1,
        20,
        0.5,
    )
    with pytest.raises(ValueError, match="unknown tools"):
        TurnRunner(llm, ToolExecutor(REGISTRY), system_prompt="s", tools=["nope"])
    with pytest.raises(ValueError, match="not among"):
        TurnRunner(
            llm,
            ToolExecutor(REGISTRY),
            system_prompt="s",
            tools=["save_note"],
            tool_choice={"name": "lookupWeather"},
        )


async def test_turn_and_llm_hooks() -> None:
    seen: list[Any] = []

    class Record(Hooks):
        def on_turn_start(self, event: TurnStartEvent) -> None:
            seen.append(event)

        def on_turn_end(self, event: TurnEndEvent) -> None:
            seen.append(event)

        def on_llm_start(self, event: LLMStartEvent) -> None:
            seen.append(event)

        def on_llm_end(self, event: LLMEndEvent) -> None:
            seen.append(event)

    runner, _ = runner_for(
        [[call("c1", "lookupWeather", city="Oslo")], "Fine."], hooks=Record(), session_id="s9"
    )
    await collect(runner, "hello")
    kinds = [type(e).__name__ for e in seen]
    assert kinds == [
        "TurnStartEvent",
        "LLMStartEvent",
        "LLMEndEvent",
        "LLMStartEvent",
        "LLMEndEvent",
        "TurnEndEvent",
    ]
    start, end = seen[0], seen[-1]
    assert start.user_text == "hello" and start.session_id == "s9"
    assert end.turn_id == start.turn_id and end.stop_reason == "stop" and end.tool_calls == 1
    assert seen[1].tool_names == ("lookupWeather", "save_note", "slow_lookup", "wait_forever")
    assert seen[2].stop_reason == "tool_calls" and seen[4].output_text == "Fine."


async def test_history_trimming_never_orphans_tool_messages() -> None:
    history = ConversationHistory(max_messages=6)
    runner, _ = runner_for(
        [[call(f"c{i}", "lookupWeather", city="Oslo")] if i % 2 == 0 else "ok" for i in range(8)],
        history=history,
    )
    for turn in range(4):
        await collect(runner, f"turn {turn}")
        assert len(history) <= 6 or isinstance(history.messages[0], UserMessage)
        assert isinstance(history.messages[0], UserMessage)
        assert_valid(runner)


async def test_history_round_trips_through_a_dict() -> None:
    runner, _ = runner_for([[call("c1", "lookupWeather", city="Oslo")], "Fine."])
    await collect(runner)
    runner.history.append(AssistantMessage("cut", (), True))
    data = runner.history.to_dict()
    import json

    restored = ConversationHistory.from_dict(json.loads(json.dumps(data)))
    assert restored.messages == runner.history.messages
    assert restored.max_messages == runner.history.max_messages


def test_runner_and_scripted_llm_work_across_event_loops() -> None:
    runner, llm = runner_for(["one", "two"])

    async def turn(text: str) -> str:
        events = await collect(runner, text)
        return str(events[-1].text)

    assert anyio.run(turn, "a") == "one"
    assert anyio.run(turn, "b", backend="trio") == "two"
    llm.assert_consumed()


async def test_a_turn_without_a_user_message() -> None:
    runner, llm = runner_for(["Are you still there?"])
    runner.history.append(UserMessage("earlier"))
    runner.history.append(AssistantMessage("answer"))
    events = await collect(runner, None)
    assert events[-1].text == "Are you still there?"
    messages = llm.requests[0].messages
    assert len(messages) == 3 and messages[-1] == AssistantMessage("answer")  # nothing added


async def test_warm_sends_the_prompt_and_tools_with_one_token() -> None:
    runner, llm = runner_for(["x"])
    await runner.warm()
    (request,) = llm.requests
    assert request.settings.max_tokens == 1
    assert request.messages[0].content == "You are helpful."
    assert len(request.tools) == 4


async def test_after_batch_and_after_answer_run_inside_the_turn() -> None:
    from llmrtc.agent.runner import BatchDecision

    seen: list[str] = []

    class Record(Hooks):
        def on_turn_end(self, event: TurnEndEvent) -> None:
            seen.append("turn end")

    async def after_batch(calls: list[ToolCall], results: list[Any]) -> BatchDecision:
        seen.append(f"batch {[r.status for r in results]}")
        return BatchDecision(events=("marker",), final=True)

    async def after_answer(text: str) -> list[Any]:
        seen.append(f"answer {text!r}")
        return ["after"]

    runner, llm = runner_for([[call("c1", "lookupWeather", city="Oslo")], "Done."], hooks=Record())
    events = [
        e async for e in runner.run_turn("x", after_batch=after_batch, after_answer=after_answer)
    ]
    assert seen == ["batch ['ok']", "answer 'Done.'", "turn end"]
    assert events.index("marker") > max(
        i for i, e in enumerate(events) if isinstance(e, ToolCallFinished)
    )
    assert events[-2] == "after" and isinstance(events[-1], TurnCompleted)
    assert llm.requests[1].tool_choice == "none"  # final=True: the next request answers


async def test_cancelling_the_caller_mid_batch_keeps_real_results_and_reports_once() -> None:
    ended: list[str] = []

    class Record(Hooks):
        def on_tool_end(self, event: Any) -> None:
            ended.append(f"{event.call_id}:{event.status}")

    runner, _ = runner_for(
        [[call("w1", "wait_forever"), call("q1", "lookupWeather", city="Rome")]], hooks=Record()
    )
    with anyio.move_on_after(0.3):
        async for _ in runner.run_turn("go"):
            pass
    results = {m.call_id: m.content for m in runner.history.messages if isinstance(m, ToolMessage)}
    assert '"temp":21' in results["q1"]  # it finished: its real result is kept
    assert '"aborted"' in results["w1"]
    assert sorted(ended) == ["q1:ok", "w1:aborted"]  # each call reported once
    assert_valid(runner)


async def test_text_of_separate_responses_keeps_its_words_apart() -> None:
    runner, _ = runner_for(
        [
            ScriptedResponse(
                text="Let me check", tool_calls=[call("c1", "lookupWeather", city="A")]
            ),
            "Goodbye!",
        ]
    )
    events = await collect(runner)
    assert events[-1].text == "Let me check Goodbye!"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == events[-1].text


async def test_no_tool_rounds_at_all_is_a_plain_stop() -> None:
    runner, llm = runner_for(["Just text."], max_tool_rounds=0)
    events = await collect(runner)
    assert events[-1].stop_reason == "stop"
    assert llm.requests[0].tool_choice == "none"


def test_trimming_never_cuts_into_the_turn_in_progress() -> None:
    from llmrtc.llm import SystemMessage

    history = ConversationHistory(max_messages=4)
    history.append(UserMessage("old question"))
    history.append(AssistantMessage("old answer"))
    history.append(UserMessage("new question"))
    history.append(AssistantMessage("", (call("c1", "lookupWeather", city="A"),)))
    history.append(ToolMessage("c1", "{}"))
    history.append(SystemMessage("Now in billing."))  # a playbook's mid-turn transition note
    assert history.messages[0] == UserMessage("new question")
    assert len(history) == 4
