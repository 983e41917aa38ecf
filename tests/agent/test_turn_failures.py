"""A turn always ends with something to say: model failures apologise, empty answers retry."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from llmrtc import OpenAIProvider, ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import (
    TextDelta,
    ToolCallFinished,
    TurnCompleted,
    TurnFailed,
    TurnRunner,
    TurnSettings,
)
from llmrtc.agent.settings import DEFAULT_EMPTY_REPLY, DEFAULT_ERROR_REPLY
from llmrtc.llm import AssistantMessage, RetryPolicy, ToolMessage, UserMessage
from llmrtc.telemetry.events import ErrorEvent, LLMEndEvent, TurnEndEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import (
    ErrorReply,
    ScriptedLLM,
    ScriptedOpenAIServer,
    ScriptedResponse,
    ScriptExhaustedError,
    text_reply,
)
from llmrtc.testing.scripted import check_chat_messages

pytestmark = pytest.mark.anyio


@tool
async def lookupWeather(city: str) -> dict[str, Any]:
    """Current weather.

    Args:
        city: The city.
    """
    return {"city": city, "temp": 21}


REGISTRY = ToolRegistry([lookupWeather])


class Seen(Hooks):
    def __init__(self) -> None:
        self.errors: list[ErrorEvent] = []
        self.turn_ends: list[TurnEndEvent] = []
        self.llm_ends: list[LLMEndEvent] = []

    def on_error(self, event: ErrorEvent) -> None:
        self.errors.append(event)

    def on_turn_end(self, event: TurnEndEvent) -> None:
        self.turn_ends.append(event)

    def on_llm_end(self, event: LLMEndEvent) -> None:
        self.llm_ends.append(event)


def runner_for(llm: Any, **options: Any) -> TurnRunner:
    options.setdefault("system_prompt", "You are helpful.")
    return TurnRunner(llm, ToolExecutor(REGISTRY), **options)


async def collect(runner: TurnRunner, text: str | None = "hi") -> list[Any]:
    return [event async for event in runner.run_turn(text)]


def said(events: list[Any]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def assert_valid(runner: TurnRunner) -> None:
    check_chat_messages(runner.history.for_request("sys"))


# Model failures -----------------------------------------------------------------------------


async def test_a_model_failure_apologises_and_the_next_turn_works() -> None:
    hooks = Seen()
    llm = ScriptedLLM([ScriptedResponse(error="HTTP 500: boom"), "Sunny."])
    runner = runner_for(llm, hooks=hooks)
    events = await collect(runner, "first")
    assert [type(e) for e in events] == [TurnFailed, TextDelta, TurnCompleted]
    error = events[0]
    assert error.error_type == "LLMError" and "boom" in error.message
    assert said(events) == DEFAULT_ERROR_REPLY
    assert events[-1].stop_reason == "error" and events[-1].text == DEFAULT_ERROR_REPLY
    assert runner.history.messages == (UserMessage("first"), AssistantMessage(DEFAULT_ERROR_REPLY))
    assert [(e.where, type(e.error).__name__) for e in hooks.errors] == [("llm", "LLMError")]
    assert [(e.stop_reason, e.error_type) for e in hooks.turn_ends] == [("error", "LLMError")]
    assert hooks.llm_ends[0].error_type == "LLMError"

    events = await collect(runner, "second")
    assert said(events) == "Sunny." and events[-1].stop_reason == "stop"
    assert_valid(runner)
    llm.assert_consumed()


async def test_a_failure_mid_stream_keeps_what_was_said_then_apologises() -> None:
    llm = ScriptedLLM([ScriptedResponse(text="It is", error="stream broke"), "ok"])
    runner = runner_for(llm)
    events = await collect(runner)
    assert said(events) == "It is " + DEFAULT_ERROR_REPLY
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["TextDelta"] * 2 + ["TurnFailed"] + ["TextDelta"] * 2 + ["TurnCompleted"]
    assert runner.history.messages[1:] == (
        AssistantMessage("It is", (), True),
        AssistantMessage(DEFAULT_ERROR_REPLY),
    )
    await collect(runner)
    assert_valid(runner)


async def test_a_failure_after_a_tool_batch_keeps_every_result() -> None:
    llm = ScriptedLLM(
        [
            [ToolCall("c1", "lookupWeather", {"city": "Oslo"})],
            ScriptedResponse(error="HTTP 500: the model's output did not match the format"),
        ]
    )
    runner = runner_for(llm)
    events = await collect(runner)
    assert [e.result.status for e in events if isinstance(e, ToolCallFinished)] == ["ok"]
    assert events[-1].stop_reason == "error"
    assert events[-1].tool_results[0].status == "ok"
    assert isinstance(runner.history.messages[2], ToolMessage)
    assert_valid(runner)


async def test_the_error_reply_is_a_setting() -> None:
    llm = ScriptedLLM([ScriptedResponse(error="down")])
    runner = runner_for(llm)
    runner.settings = replace(runner.settings, error_reply="Entschuldigung, noch einmal bitte?")
    assert said(await collect(runner)) == "Entschuldigung, noch einmal bitte?"
    with pytest.raises(ValueError, match="error_reply"):
        TurnSettings("s", error_reply="  ")


async def test_programming_errors_still_raise() -> None:
    runner = runner_for(ScriptedLLM([ScriptedResponse(error=RuntimeError("a bug"))]))
    with pytest.raises(RuntimeError, match="a bug"):
        await collect(runner)
    assert_valid(runner)
    with pytest.raises(ScriptExhaustedError):
        await collect(runner)


@pytest.mark.parametrize("status", [500, 400])
async def test_an_http_error_from_a_real_client_ends_the_turn_with_an_apology(
    status: int,
) -> None:
    replies = [
        ErrorReply(status, "the model produced output that does not match"),
        text_reply("Hi!"),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        llm = OpenAIProvider(
            "m", base_url=server.base_url, api_key="k", retry=RetryPolicy(max_retries=0)
        )
        runner = runner_for(llm, tools=[])
        events = await collect(runner, "Is it raining in Oslo?")
        assert isinstance(events[0], TurnFailed) and f"HTTP {status}" in events[0].message
        assert said(events) == DEFAULT_ERROR_REPLY and events[-1].stop_reason == "error"
        events = await collect(runner, "again")
        assert said(events) == "Hi!"
        sent = server.requests[1].body["messages"]
        assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
        assert sent[2]["content"] == DEFAULT_ERROR_REPLY


# Empty answers ------------------------------------------------------------------------------


async def test_an_empty_answer_is_asked_again_once_without_tools() -> None:
    llm = ScriptedLLM(["", "Why did the cat sit on the laptop? To keep an eye on the mouse."])
    runner = runner_for(llm)
    events = await collect(runner, "Tell me a short joke about cats.")
    assert said(events).startswith("Why did the cat")
    first, retry = llm.requests
    assert [t.name for t in first.tools] == ["lookupWeather"] and first.tool_choice == "auto"
    assert retry.tools == [] and retry.tool_choice == "none"
    assert retry.messages == first.messages  # the empty answer is not stored
    assert runner.history.messages[-1] == AssistantMessage(said(events))
    assert events[-1].stop_reason == "stop"


async def test_an_empty_answer_after_tool_results_is_asked_again() -> None:
    llm = ScriptedLLM([[ToolCall("c1", "lookupWeather", {"city": "Oslo"})], "", "Rainy, 4°C."])
    runner = runner_for(llm)
    events = await collect(runner)
    assert said(events) == "Rainy, 4°C."
    assert llm.requests[2].tools == []
    assert_valid(runner)


async def test_twice_empty_says_the_empty_reply_or_nothing_if_unset() -> None:
    runner = runner_for(ScriptedLLM(["", ""]))
    events = await collect(runner)
    assert said(events) == DEFAULT_EMPTY_REPLY
    assert runner.history.messages[-1] == AssistantMessage(DEFAULT_EMPTY_REPLY)

    silent = runner_for(ScriptedLLM(["", ""]))
    silent.settings = replace(silent.settings, empty_reply=None)
    events = await collect(silent)
    assert said(events) == "" and isinstance(silent.history.messages[-1], UserMessage)
    assert_valid(silent)


async def test_no_retry_when_the_turn_already_said_something() -> None:
    llm = ScriptedLLM(
        [
            ScriptedResponse(
                text="Let me check.", tool_calls=[ToolCall("c1", "lookupWeather", {"city": "Lima"})]
            ),
            "",
        ]
    )
    runner = runner_for(llm)
    events = await collect(runner)
    assert said(events) == "Let me check."
    llm.assert_consumed()  # exactly two requests


async def test_an_aborted_empty_answer_is_not_retried() -> None:
    from llmrtc import AbortController

    controller = AbortController()
    controller.abort("barge-in")
    llm = ScriptedLLM([""])
    runner = runner_for(llm)
    events = [e async for e in runner.run_turn("hi", abort_signal=controller.signal)]
    assert events[-1].stop_reason == "aborted" and said(events) == ""
    assert len(llm.requests) == 0
