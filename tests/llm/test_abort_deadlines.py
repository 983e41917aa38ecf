"""A deadline on the abort signal (its own or a parent's) stops a model request as an abort does:
while waiting for the server to answer, mid-stream, and in the retry backoff; and an abort that
lands between chunks already received stops the answer there."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream
from openai.types.chat import ChatCompletionChunk

from llmrtc import AbortController, AbortSignal, ToolExecutor, ToolRegistry
from llmrtc.agent import TurnRunner
from llmrtc.llm import (
    LLMDone,
    LLMRequest,
    LLMTextDelta,
    OpenAIProvider,
    RetryPolicy,
    SystemMessage,
    UserMessage,
)
from llmrtc.testing import (
    ErrorReply,
    ScriptedLLM,
    ScriptedOpenAIServer,
    ScriptedResponse,
    StreamReply,
    chunk,
)

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])]

SLOW = 3.0  # well past the 1 s deadlines below, which leave a loaded machine time to send
"""Seconds the server takes per chunk: the whole answer takes many times the test's bound."""
BOUND = 10.0
"""What a stopped request may take at most: generous, far below the time it would run."""
REQUEST = LLMRequest([SystemMessage("Be brief."), UserMessage("Hi.")])


def slow_answer(words: int = 5) -> StreamReply:
    return StreamReply(
        [*(chunk(content=f"word{i} ") for i in range(words)), chunk(finish_reason="stop")],
        delay=SLOW,
    )


def provider(base_url: str, **options: Any) -> OpenAIProvider:
    return OpenAIProvider("m", base_url=base_url, api_key="test", **options)


def soon(seconds: float) -> float:
    """A deadline `seconds` from now."""
    return time.monotonic() + seconds


async def events_of(llm: OpenAIProvider, signal: AbortSignal) -> tuple[list[Any], float]:
    started = time.monotonic()
    with anyio.fail_after(BOUND * 2):  # a hang fails the test instead of stalling the suite
        events = [event async for event in llm.stream(REQUEST, abort_signal=signal)]
    return events, time.monotonic() - started


@asynccontextmanager
async def silent_server() -> AsyncIterator[tuple[str, list[float]]]:
    """A server that accepts each connection and never answers: its base URL, and when it
    accepted each connection."""
    accepted: list[float] = []

    async def never_answer(stream: SocketStream) -> None:
        accepted.append(time.monotonic())
        async with stream:
            await anyio.sleep_forever()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as group:
        group.start_soon(listener.serve, never_answer)
        yield f"http://127.0.0.1:{port}/v1", accepted
        group.cancel_scope.cancel()


async def test_a_deadline_passing_mid_stream_ends_the_answer_as_aborted(
    anyio_backend: str,
) -> None:
    async with ScriptedOpenAIServer([slow_answer()]) as server:
        llm = provider(server.base_url)  # first: the first import of openai takes a while
        controller = AbortController(deadline=soon(1.0))
        events, took = await events_of(llm, controller.signal)
    assert events == [LLMDone("aborted")]  # nothing arrived before the deadline
    assert len(server.requests) == 1  # it was under way when the deadline passed
    assert took < BOUND


async def test_a_deadline_passing_before_the_server_answers_ends_the_request(
    anyio_backend: str,
) -> None:
    async with silent_server() as (base_url, accepted):
        llm = provider(base_url)
        controller = AbortController(deadline=soon(1.0))
        events, took = await events_of(llm, controller.signal)
    assert events == [LLMDone("aborted")]
    assert len(accepted) == 1 and accepted[0] < controller.deadline  # sent, then timed out
    assert took < BOUND


async def test_a_parents_deadline_stops_the_request_too(anyio_backend: str) -> None:
    async with ScriptedOpenAIServer([slow_answer()]) as server:
        llm = provider(server.base_url)
        turn = AbortController(deadline=soon(1.0))
        request = AbortController(parent=turn.signal)
        events, took = await events_of(llm, request.signal)
    assert events == [LLMDone("aborted")]
    assert len(server.requests) == 1 and took < BOUND


async def test_a_deadline_set_while_streaming_applies_at_once(anyio_backend: str) -> None:
    async with ScriptedOpenAIServer([slow_answer()]) as server:
        llm = provider(server.base_url)
        controller = AbortController()
        started = time.monotonic()
        events: list[Any] = []
        with anyio.fail_after(BOUND * 2):
            async with anyio.create_task_group() as group:

                async def tighten() -> None:
                    await anyio.sleep(0.2)
                    controller.deadline = time.monotonic()  # e.g. the user started speaking

                group.start_soon(tighten)
                async for event in llm.stream(REQUEST, abort_signal=controller.signal):
                    events.append(event)
        took = time.monotonic() - started
    assert events == [LLMDone("aborted")]
    assert len(server.requests) == 1 and took < BOUND


async def test_a_deadline_ends_the_retry_backoff(anyio_backend: str) -> None:
    wait_long = ErrorReply(429, headers={"retry-after": str(BOUND * 3)})
    async with ScriptedOpenAIServer([wait_long]) as server:
        llm = provider(server.base_url, retry=RetryPolicy(max_retries=1, max_delay=BOUND * 3))
        controller = AbortController(deadline=soon(0.3))
        events, took = await events_of(llm, controller.signal)
    assert events == [LLMDone("aborted")]
    assert len(server.requests) == 1 and took < BOUND


async def test_a_turn_with_a_deadline_stops_its_model_request(anyio_backend: str) -> None:
    async with ScriptedOpenAIServer([slow_answer()]) as server:
        runner = TurnRunner(
            provider(server.base_url), ToolExecutor(ToolRegistry()), system_prompt="Be brief."
        )
        controller = AbortController(deadline=soon(1.0))
        started = time.monotonic()
        with anyio.fail_after(BOUND * 2):
            events = [e async for e in runner.run_turn("hi", abort_signal=controller.signal)]
        took = time.monotonic() - started
    assert events[-1].stop_reason == "aborted"
    assert events[-1].text == ""  # not one word: the deadline passed before the first
    assert len(server.requests) == 1 and took < BOUND


async def test_the_scripted_model_follows_a_deadline_between_deltas(anyio_backend: str) -> None:
    llm = ScriptedLLM([ScriptedResponse(text="one two three", chunk_delay=SLOW)])
    controller = AbortController(deadline=soon(1.0))
    started = time.monotonic()
    with anyio.fail_after(BOUND * 2):
        events = [e async for e in llm.stream(REQUEST, abort_signal=controller.signal)]
    assert [e.text for e in events if isinstance(e, LLMTextDelta)] == ["one"]
    assert events[-1].stop_reason == "aborted"
    assert time.monotonic() - started < BOUND


# An abort that lands between chunks, while the next ones are already in memory ------------


async def deltas_after_abort_at_the_second(llm: OpenAIProvider) -> list[Any]:
    """Stream an answer, aborting while the consumer handles its second delta (as a barge-in
    does while the delta is spoken); what the provider still yields after that."""
    controller = AbortController()
    events: list[Any] = []
    with anyio.fail_after(BOUND * 2):
        async for event in llm.stream(REQUEST, abort_signal=controller.signal):
            events.append(event)
            if len(events) == 2:
                controller.abort("barge-in")
    return events[2:]


async def test_chunks_already_received_are_not_said_after_an_abort(anyio_backend: str) -> None:
    # No delay: the server sends the whole answer at once, so the rest sits in the client's
    # buffer when the abort lands.
    answer = StreamReply(
        [*(chunk(content=f"w{i} ") for i in range(50)), chunk(finish_reason="stop")]
    )
    async with ScriptedOpenAIServer([answer]) as server:
        after = await deltas_after_abort_at_the_second(provider(server.base_url))
    assert [type(e) for e in after] == [LLMDone] and after[0].stop_reason == "aborted"


class InMemoryStream:
    """A response whose chunks are all in memory: `anext` never reaches a checkpoint (as when
    a fast server's whole answer is in the socket buffer), on any backend."""

    def __init__(self, words: int) -> None:
        self.words = words
        self.closed = False

    async def _chunks(self) -> AsyncIterator[ChatCompletionChunk]:
        for i in range(self.words):
            yield ChatCompletionChunk.model_validate(chunk(content=f"w{i} "))
        yield ChatCompletionChunk.model_validate(chunk(finish_reason="stop"))

    def __aiter__(self) -> AsyncIterator[ChatCompletionChunk]:
        return self._chunks()

    async def close(self) -> None:
        self.closed = True


class InMemoryClient:
    """Just enough of `openai.AsyncOpenAI` to hand out one `InMemoryStream`."""

    def __init__(self, response: InMemoryStream) -> None:
        self.base_url = "http://in-memory/v1/"
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))
        self.response = response

    async def create(self, **params: Any) -> InMemoryStream:
        return self.response


async def test_an_abort_between_buffered_chunks_drops_the_rest_and_closes_the_stream(
    anyio_backend: str,
) -> None:
    response = InMemoryStream(words=20)
    llm = OpenAIProvider("m", client=InMemoryClient(response))  # type: ignore[arg-type]
    after = await deltas_after_abort_at_the_second(llm)
    assert [type(e) for e in after] == [LLMDone]  # not one stale delta
    assert after[0].stop_reason == "aborted"
    assert response.closed  # the stream was still closed


async def test_an_abort_while_the_request_returns_without_a_checkpoint_closes_the_stream(
    anyio_backend: str,
) -> None:
    response = InMemoryStream(words=3)
    controller = AbortController()
    client = InMemoryClient(response)

    async def create_and_abort(**params: Any) -> InMemoryStream:
        controller.abort("barge-in")  # lands while the request is being answered
        return response

    client.chat.completions.create = create_and_abort
    llm = OpenAIProvider("m", client=client)  # type: ignore[arg-type]
    with anyio.fail_after(BOUND * 2):
        events = [e async for e in llm.stream(REQUEST, abort_signal=controller.signal)]
    assert events == [LLMDone("aborted")]
    assert response.closed
