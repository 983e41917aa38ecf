"""The prompt tokens a server took from its cache (`usage.prompt_tokens_details.cached_tokens`,
as OpenAI and llama.cpp report them) reach `Usage` and the `on_llm_end` hook."""

from __future__ import annotations

import pytest

from llmrtc import Hooks, ToolExecutor, ToolRegistry, TurnRunner
from llmrtc.llm import LLMDone, LLMRequest, OpenAIProvider, RetryPolicy, UserMessage
from llmrtc.llm.types import Usage
from llmrtc.telemetry.events import LLMEndEvent
from llmrtc.testing import ScriptedOpenAIServer, StreamReply, chunk

pytestmark = pytest.mark.anyio


def cached_reply(text: str, prompt: int, cached: int | None) -> StreamReply:
    last = chunk(usage={"prompt_tokens": prompt, "completion_tokens": 2})
    if cached is not None:
        last["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
    return StreamReply([chunk(content=text), chunk(finish_reason="stop"), last])


def provider(server: ScriptedOpenAIServer) -> OpenAIProvider:
    return OpenAIProvider(
        "m", base_url=server.base_url, api_key="test", retry=RetryPolicy(max_retries=0)
    )


async def test_cached_prompt_tokens_are_reported_and_the_processed_rest_follows() -> None:
    replies = [cached_reply("Hi.", 120, 100), cached_reply("Hi.", 120, None)]
    async with ScriptedOpenAIServer(replies) as server:
        llm = provider(server)
        request = LLMRequest([UserMessage("Hello")])
        warm = [e async for e in llm.stream(request)][-1]
        cold = [e async for e in llm.stream(request)][-1]
    assert isinstance(warm, LLMDone) and isinstance(cold, LLMDone)
    assert warm.usage == Usage(120, 2, 100) and warm.usage.processed_input_tokens == 20
    assert cold.usage == Usage(120, 2, 0) and cold.usage.processed_input_tokens == 120
    assert (warm.usage + cold.usage).cached_input_tokens == 100


async def test_the_llm_end_hook_carries_the_cached_tokens() -> None:
    ends: list[LLMEndEvent] = []

    class Record(Hooks):
        def on_llm_end(self, event: LLMEndEvent) -> None:
            ends.append(event)

    async with ScriptedOpenAIServer([cached_reply("Hello there.", 90, 64)]) as server:
        runner = TurnRunner(
            provider(server), ToolExecutor(ToolRegistry()), system_prompt="Hi", hooks=Record()
        )
        [_ async for _ in runner.run_turn("Hello")]
    assert [(e.input_tokens, e.cached_input_tokens) for e in ends] == [(90, 64)]
