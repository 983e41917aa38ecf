"""OpenAIProvider with the real `openai` client against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import pytest

from llmrtc import AbortController, ToolCall, ToolDefinition
from llmrtc.llm import (
    AssistantMessage,
    CompatProfile,
    LLMDone,
    LLMError,
    LLMRequest,
    LLMTextDelta,
    LLMToolCall,
    OpenAIProvider,
    RetryPolicy,
    SystemMessage,
    ToolMessage,
    UserMessage,
)
from llmrtc.llm.settings import ModelSettings
from llmrtc.testing import (
    DisconnectReply,
    ErrorReply,
    ScriptedOpenAIServer,
    StreamReply,
    chunk,
    text_reply,
    tool_call_reply,
)

pytestmark = pytest.mark.anyio

WEATHER = ToolDefinition(
    "lookupWeather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
REQUEST = LLMRequest(
    [SystemMessage("You are a weather bot."), UserMessage("Weather in Tokyo?")], tools=[WEATHER]
)


def provider(
    server: ScriptedOpenAIServer,
    *,
    max_retries: int = 2,
    max_delay: float = 8.0,
    retry_status_errors: bool = True,
    **options: Any,
) -> OpenAIProvider:
    retry = RetryPolicy(
        max_retries=max_retries,
        base_delay=0.01,
        max_delay=max_delay,
        retry_status_errors=retry_status_errors,
    )
    return OpenAIProvider(
        "scripted-model", base_url=server.base_url, api_key="test", retry=retry, **options
    )


LLAMA_LIKE = CompatProfile(
    retry_without_tools=True,
    continue_after_stream_error=True,
    omit_tools_after_tool_results=True,
    plain_answer_hint="Answer in plain words.",
)


async def events_of(llm: OpenAIProvider, request: LLMRequest = REQUEST, **kw: Any) -> list[Any]:
    return [event async for event in llm.stream(request, **kw)]


async def test_text_streams_in_deltas_with_usage() -> None:
    async with ScriptedOpenAIServer([text_reply("Sunny and warm.", pieces=3)]) as server:
        events = await events_of(provider(server))
    texts = [e.text for e in events if isinstance(e, LLMTextDelta)]
    assert len(texts) == 3 and "".join(texts) == "Sunny and warm."
    assert events[-1] == LLMDone("stop", events[-1].usage, "scripted-model")
    assert (events[-1].usage.input_tokens, events[-1].usage.output_tokens) == (10, 5)


async def test_the_request_carries_messages_tools_and_options() -> None:
    async with ScriptedOpenAIServer([text_reply("ok")]) as server:
        request = LLMRequest(
            [
                SystemMessage("sys"),
                UserMessage("hi"),
                AssistantMessage("", (ToolCall("c1", "lookupWeather", {"city": "Oslo"}),)),
                ToolMessage("c1", '{"temp": 3}'),
            ],
            tools=[WEATHER],
            tool_choice={"name": "lookupWeather"},
            settings=ModelSettings(temperature=0.2, max_tokens=50, top_p=0.9),
        )
        await events_of(provider(server), request)
        body = server.requests[0].body
        headers = server.requests[0].headers
    assert server.requests[0].path == "/v1/chat/completions"
    assert headers["authorization"] == "Bearer test"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"], body["top_p"]) == (0.2, 50, 0.9)
    assert body["tools"] == [WEATHER.to_openai()]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookupWeather"}}
    assert body["messages"][2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "lookupWeather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    }
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 3}'}


async def test_split_tool_call_deltas_and_two_parallel_calls() -> None:
    reply = tool_call_reply(
        [("c1", "lookupWeather", '{"city": "Tokyo"}'), ("c2", "lookupWeather", '{"city": "Oslo"}')],
        split=5,
    )
    async with ScriptedOpenAIServer([reply]) as server:
        events = await events_of(provider(server))
    calls = [e.call for e in events if isinstance(e, LLMToolCall)]
    assert calls == [
        ToolCall("c1", "lookupWeather", '{"city": "Tokyo"}'),
        ToolCall("c2", "lookupWeather", '{"city": "Oslo"}'),
    ]
    assert events[-1].stop_reason == "tool_calls"


async def test_a_call_is_yielded_as_soon_as_the_next_one_starts() -> None:
    reply = tool_call_reply(
        [("c1", "lookupWeather", '{"city": "A"}'), ("c2", "lookupWeather", '{"city": "B"}')]
    )
    reply.delay = 0.05  # slow stream: c1 must not wait for the end of c2
    async with ScriptedOpenAIServer([reply]) as server:
        seen: list[tuple[str, float]] = []
        started = time.monotonic()
        async for event in provider(server).stream(REQUEST):
            if isinstance(event, LLMToolCall):
                seen.append((event.call.call_id, time.monotonic() - started))
    assert [call_id for call_id, _ in seen] == ["c1", "c2"]
    assert seen[1][1] - seen[0][1] >= 0.1  # c1 arrived while c2 was still streaming


async def test_malformed_arguments_are_kept_raw_and_replayed_as_an_empty_object() -> None:
    async with ScriptedOpenAIServer(
        [tool_call_reply([("c1", "lookupWeather", '{"city": "Tok')]), text_reply("ok")]
    ) as server:
        llm = provider(server)
        events = await events_of(llm)
        (call,) = [e.call for e in events if isinstance(e, LLMToolCall)]
        assert call.arguments == '{"city": "Tok'  # never silently {}
        follow_up = LLMRequest(
            [
                *REQUEST.messages,
                AssistantMessage("", (call,)),
                ToolMessage("c1", '{"error": "arguments are not valid JSON", "status": "x"}'),
            ],
            tools=[WEATHER],
        )
        await events_of(llm, follow_up)
        replayed = server.requests[1].body["messages"][2]["tool_calls"][0]["function"]
    assert replayed["arguments"] == "{}"  # a form every server accepts


async def test_429_is_retried_after_its_retry_after_then_succeeds() -> None:
    async with ScriptedOpenAIServer(
        [ErrorReply(429, "slow down", {"retry-after": "0.2"}), text_reply("made it")]
    ) as server:
        started = time.monotonic()
        events = await events_of(provider(server, max_retries=2))
        elapsed = time.monotonic() - started
    assert "".join(e.text for e in events if isinstance(e, LLMTextDelta)) == "made it"
    assert len(server.requests) == 2
    assert elapsed >= 0.18


async def test_5xx_and_connection_drops_are_retried_then_fail_clearly() -> None:
    replies = [ErrorReply(503), DisconnectReply(), ErrorReply(502)]
    async with ScriptedOpenAIServer(replies) as server:
        with pytest.raises(LLMError) as info:
            await events_of(provider(server, max_retries=2))
    assert len(server.requests) == 3
    assert info.value.status_code == 502 and info.value.retryable
    assert "HTTP 502" in str(info.value) and "scripted-model" in str(info.value)


async def test_400_is_not_retried() -> None:
    async with ScriptedOpenAIServer([ErrorReply(400, "bad tool schema")]) as server:
        with pytest.raises(LLMError, match="HTTP 400: bad tool schema") as info:
            await events_of(provider(server))
    assert len(server.requests) == 1
    assert info.value.status_code == 400 and not info.value.retryable


async def test_abort_mid_stream_closes_the_http_stream_at_once() -> None:
    slow = StreamReply([chunk(content=f"word{i} ") for i in range(100)], delay=0.05)
    async with ScriptedOpenAIServer([slow]) as server:
        controller = AbortController()
        events: list[Any] = []
        async for event in provider(server).stream(REQUEST, abort_signal=controller.signal):
            events.append(event)
            if len(events) == 2:
                aborted_at = time.monotonic()
                controller.abort("barge-in")
        with anyio.fail_after(2):
            while not server.disconnects:
                await anyio.sleep(0.01)
    assert events[-1].stop_reason == "aborted"
    assert len(events) == 3  # two words, then done: nothing after the abort
    assert server.disconnected_at[0] - aborted_at < 0.5  # the server saw the hang-up


async def test_abort_interrupts_the_retry_backoff() -> None:
    async with ScriptedOpenAIServer([ErrorReply(429, headers={"retry-after": "5"})]) as server:
        controller = AbortController()
        llm = provider(server, max_delay=5.0)
        with anyio.fail_after(2):
            async with anyio.create_task_group() as group:
                group.start_soon(_abort_after, controller, 0.1)
                events = await events_of(llm, abort_signal=controller.signal)
    assert events == [LLMDone("aborted")]


async def _abort_after(controller: AbortController, seconds: float) -> None:
    await anyio.sleep(seconds)
    controller.abort("stop")


async def test_server_500_with_tools_is_retried_once_without_tools_when_asked() -> None:
    async with ScriptedOpenAIServer([ErrorReply(500), text_reply("no tool then")]) as server:
        llm = provider(server, compat=LLAMA_LIKE, max_retries=0)
        events = await events_of(llm)
        first, second = (r.body for r in server.requests)
    assert "tools" in first and "tools" not in second and "tool_choice" not in second
    assert "".join(e.text for e in events if isinstance(e, LLMTextDelta)) == "no tool then"


async def test_text_mode_puts_schemas_in_the_prompt_and_parses_calls() -> None:
    answer = (
        'Checking. <tool_call>{"name": "lookupWeather", "arguments": {"city": "Lima"}}</tool_call>'
    )
    async with ScriptedOpenAIServer([text_reply(answer, pieces=7)]) as server:
        hint = CompatProfile(tool_hint="Answer with JSON only.")
        llm = provider(server, tool_call_format="text", compat=hint)
        events = await events_of(llm)
        body = server.requests[0].body
    assert "tools" not in body
    system = body["messages"][0]["content"]
    assert system.startswith("You are a weather bot.")
    assert "<tool_call>" in system and "lookupWeather" in system
    assert system.index("Answer with JSON only.") < system.index("lookupWeather")
    texts = "".join(e.text for e in events if isinstance(e, LLMTextDelta))
    assert texts == "Checking. "  # the JSON is never text
    (call,) = [e.call for e in events if isinstance(e, LLMToolCall)]
    assert (call.name, call.arguments) == ("lookupWeather", {"city": "Lima"})
    assert events[-1].stop_reason == "tool_calls"


async def test_text_mode_history_uses_text_calls_and_user_tool_results() -> None:
    async with ScriptedOpenAIServer([text_reply("ok")]) as server:
        request = LLMRequest(
            [
                SystemMessage("sys"),
                UserMessage("hi"),
                AssistantMessage("", (ToolCall("c1", "lookupWeather", {"city": "Oslo"}),)),
                ToolMessage("c1", '{"temp": 3}'),
            ],
            tools=[WEATHER],
        )
        await events_of(provider(server, tool_call_format="text"), request)
        messages = server.requests[0].body["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": '<tool_call>{"name": "lookupWeather", "arguments": {"city": "Oslo"}}'
        "</tool_call>",
    }
    assert messages[3]["role"] == "user" and '{"temp": 3}' in messages[3]["content"]


async def test_auto_mode_sends_native_tools_and_still_parses_text_calls() -> None:
    answer = '{"name": "lookupWeather", "arguments": {"city": "Rome"}}'
    async with ScriptedOpenAIServer([text_reply(answer)]) as server:
        events = await events_of(provider(server, tool_call_format="auto"))
        body = server.requests[0].body
    assert body["tools"] == [WEATHER.to_openai()]
    assert body["messages"][0]["content"] == "You are a weather bot."  # no schemas in prompt
    (call,) = [e.call for e in events if isinstance(e, LLMToolCall)]
    assert call.arguments == {"city": "Rome"}
    assert not [e for e in events if isinstance(e, LLMTextDelta)]


async def test_complete_collects_the_stream() -> None:
    async with ScriptedOpenAIServer([text_reply("All good.")]) as server:
        response = await provider(server).complete(REQUEST)
    assert response.text == "All good." and response.tool_calls == ()
    assert response.to_message() == AssistantMessage("All good.")


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="tool_call_format"):
        OpenAIProvider("m", base_url="http://127.0.0.1:1/v1", tool_call_format="xml")  # type: ignore[arg-type]


def test_a_missing_api_key_for_openai_itself_is_a_clear_error(monkeypatch: Any) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIProvider("gpt-4o-mini")


def test_request_validates_tool_choice() -> None:
    with pytest.raises(ValueError, match="not among the request's tools"):
        LLMRequest([SystemMessage("s")], tools=[WEATHER], tool_choice={"name": "other"})
    with pytest.raises(ValueError, match="tool_choice must be"):
        LLMRequest([SystemMessage("s")], tool_choice="sometimes")  # type: ignore[arg-type]


def test_arguments_dicts_are_sent_as_json_strings() -> None:
    from llmrtc.llm.wire import to_openai_messages

    (message,) = to_openai_messages(
        [AssistantMessage("x", (ToolCall("c", "t", {"a": [1, 2]}), ToolCall("d", "t", "[1]")))]
    )
    arguments = [call["function"]["arguments"] for call in message["tool_calls"]]
    assert [json.loads(a) for a in arguments] == [{"a": [1, 2]}, {}]


async def test_a_stream_cut_before_the_model_finished_is_retried_or_reported() -> None:
    cut_early = StreamReply([chunk(content="never "), chunk(content="sent")], drop_after=0)
    cut_late = StreamReply([chunk(content="half an ans"), chunk(content="wer")], drop_after=1)
    async with ScriptedOpenAIServer([cut_early, text_reply("second try")]) as server:
        events = await events_of(provider(server))
    assert "".join(e.text for e in events if isinstance(e, LLMTextDelta)) == "second try"
    async with ScriptedOpenAIServer([cut_late]) as server:
        seen: list[Any] = []
        with pytest.raises(LLMError, match="before the model finished"):
            async for event in provider(server).stream(REQUEST):
                seen.append(event)
    assert seen == [LLMTextDelta("half an ans")]  # streamed text cannot be retried


def error_event_stream(before: list[dict[str, Any]]) -> StreamReply:
    """Chunks, then an error event inside the stream (llama.cpp's way of failing mid-stream)."""
    return StreamReply([*before, {"error": {"message": "does not match the expected format"}}])


async def test_an_error_inside_the_stream_is_retried_without_tools_when_nothing_was_said() -> None:
    fenced = [chunk(content="```json\n"), chunk(content='{"name": "getStock')]
    async with ScriptedOpenAIServer([error_event_stream(fenced), text_reply("I can't.")]) as server:
        llm = provider(server, compat=LLAMA_LIKE, tool_call_format="auto")
        events = await events_of(llm)
        first, second = (r.body for r in server.requests)
    assert "tools" in first and "tools" not in second
    assert "".join(e.text for e in events if isinstance(e, LLMTextDelta)) == "I can't."  # no ```


async def test_an_error_inside_the_stream_after_text_is_an_llm_error() -> None:
    async with ScriptedOpenAIServer([error_event_stream([chunk(content="Sure, ")])]) as server:
        with pytest.raises(LLMError, match="does not match"):
            await events_of(provider(server))


async def test_tools_can_be_left_out_after_tool_results() -> None:
    after_results = LLMRequest(
        [
            *REQUEST.messages,
            AssistantMessage("", (ToolCall("c1", "lookupWeather", {"city": "Tokyo"}),)),
            ToolMessage("c1", '{"temp": 21}'),
        ],
        tools=[WEATHER],
    )
    answer = '{"name": "lookupWeather", "arguments": {"city": "Tokyo"}}'
    async with ScriptedOpenAIServer([text_reply("It is 21."), text_reply(answer)]) as server:
        llm = provider(server, compat=LLAMA_LIKE, tool_call_format="auto")
        await events_of(llm, after_results)
        repeated = await events_of(llm, after_results)
        body = server.requests[0].body
    assert "tools" not in body and "tool_choice" not in body
    assert [e.call.name for e in repeated if isinstance(e, LLMToolCall)] == ["lookupWeather"]


async def test_server_errors_can_be_left_unretried_while_connections_are_retried() -> None:
    async with ScriptedOpenAIServer([DisconnectReply(), text_reply("second try")]) as server:
        llm = provider(server, retry_status_errors=False, max_retries=1)
        events = await events_of(llm)
    assert "".join(e.text for e in events if isinstance(e, LLMTextDelta)) == "second try"
    async with ScriptedOpenAIServer([ErrorReply(503)]) as server:
        with pytest.raises(LLMError, match="HTTP 503"):
            await events_of(provider(server, retry_status_errors=False, max_retries=1))
        assert len(server.requests) == 1


def _call_delta(
    index: int | None, call_id: str | None = None, name: str | None = None, arguments: str = ""
) -> dict[str, Any]:
    delta: dict[str, Any] = {"function": {"arguments": arguments}}
    if index is not None:
        delta["index"] = index
    if call_id is not None:
        delta.update(id=call_id, type="function")
    if name is not None:
        delta["function"]["name"] = name
    return chunk(tool_calls=[delta])


@pytest.mark.parametrize(
    "deltas",
    [
        pytest.param(  # Ollama: every parallel call under index 0, told apart by id
            [
                (0, "a", "lookupWeather", '{"city": "A"}'),
                (0, "b", "lookupWeather", '{"city": "B"}'),
            ],
            id="same-index",
        ),
        pytest.param(  # no index at all: an id starts a call, the rest continues it
            [
                (None, "a", "lookupWeather", '{"ci'),
                (None, None, None, 'ty": "A"}'),
                (None, "b", "lookupWeather", '{"city": "B"}'),
            ],
            id="no-index",
        ),
        pytest.param(  # interleaved indexes
            [
                (0, "a", "lookupWeather", '{"ci'),
                (1, "b", "lookupWeather", '{"ci'),
                (0, None, None, 'ty": "A"}'),
                (1, None, None, 'ty": "B"}'),
            ],
            id="interleaved",
        ),
    ],
)
async def test_tool_call_deltas_from_every_kind_of_server(deltas: list[Any]) -> None:
    chunks = [_call_delta(*d) for d in deltas] + [chunk(finish_reason="tool_calls")]
    async with ScriptedOpenAIServer([StreamReply(chunks)]) as server:
        events = await events_of(provider(server))
    calls = [
        (e.call.call_id, e.call.name, json.loads(str(e.call.arguments)))
        for e in events
        if isinstance(e, LLMToolCall)
    ]
    assert calls == [("a", "lookupWeather", {"city": "A"}), ("b", "lookupWeather", {"city": "B"})]


async def test_an_abort_in_text_mode_never_speaks_a_half_written_call() -> None:
    hanging = StreamReply(
        [
            chunk(content="Ok "),
            chunk(content='{"name":"lookupWeather","argum'),
            chunk(finish_reason="stop"),  # never sent: the server hangs before it
        ],
        hang_after=2,
    )
    async with ScriptedOpenAIServer([hanging]) as server:
        controller = AbortController()
        events: list[Any] = []
        async with anyio.create_task_group() as group:
            group.start_soon(_abort_after, controller, 0.3)
            async for event in provider(server, tool_call_format="text").stream(
                REQUEST, abort_signal=controller.signal
            ):
                events.append(event)
    assert [e.text for e in events if isinstance(e, LLMTextDelta)] == ["Ok "]
    assert events[-1].stop_reason == "aborted"


async def test_an_answer_cut_before_its_first_word_goes_out_as_empty_text_not_null() -> None:
    """A barge-in before any word was heard leaves AssistantMessage("", interrupted=True); the
    OpenAI API refuses a null content without tool calls, so the next request sends ""."""
    from llmrtc.llm.messages import AssistantMessage, UserMessage
    from llmrtc.llm.wire import to_openai_messages

    sent = to_openai_messages(
        [UserMessage("weather?"), AssistantMessage("", (), True), UserMessage("go on")]
    )
    assert sent[1] == {"role": "assistant", "content": ""}


async def test_response_format_is_sent_where_the_profile_allows_it() -> None:
    schema = {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}}
    request = LLMRequest([UserMessage("hi")], response_format=schema)
    async with ScriptedOpenAIServer([text_reply("{}"), text_reply("{}")]) as server:
        await events_of(provider(server), request)
        await events_of(provider(server, compat=CompatProfile(response_format=False)), request)
    assert server.requests[0].body["response_format"] == schema
    assert "response_format" not in server.requests[1].body
