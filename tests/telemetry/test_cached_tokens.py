"""Cached prompt tokens (`usage.prompt_tokens_details.cached_tokens`, as OpenAI and llama.cpp
report them) reach OpenTelemetry: the chat span's `gen_ai.usage.cache_read.input_tokens` and
the `cache_read` type of `gen_ai.client.token.usage`, from a real turn against a scripted
OpenAI-compatible server to the SDK's in-memory exporter and reader."""

from __future__ import annotations

import pytest

from llmrtc import ToolExecutor, ToolRegistry, TurnRunner
from llmrtc.llm import OpenAIProvider, RetryPolicy
from llmrtc.telemetry.events import LLMEndEvent, LLMStartEvent
from llmrtc.testing import InMemoryTelemetry, ScriptedOpenAIServer, StreamReply, chunk

pytestmark = pytest.mark.anyio


def reply(text: str, prompt: int, cached: int) -> StreamReply:
    last = chunk(usage={"prompt_tokens": prompt, "completion_tokens": 3})
    last["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
    return StreamReply([chunk(content=text), chunk(finish_reason="stop"), last])


async def test_cached_prompt_tokens_are_on_the_chat_span_and_in_the_token_metric() -> None:
    telemetry = InMemoryTelemetry()
    replies = [reply("Hello there.", 90, 0), reply("Hi again.", 120, 88)]
    async with ScriptedOpenAIServer(replies) as server:
        llm = OpenAIProvider(
            "m", base_url=server.base_url, api_key="test", retry=RetryPolicy(max_retries=0)
        )
        runner = TurnRunner(
            llm, ToolExecutor(ToolRegistry()), system_prompt="Hi", hooks=telemetry.hooks
        )
        for text in ("Hello", "Hello again"):
            [_ async for _ in runner.run_turn(text)]
    cold, warm = telemetry.spans("chat m")
    assert dict(cold.attributes or {})["gen_ai.usage.cache_read.input_tokens"] == 0
    warm_attributes = dict(warm.attributes or {})
    assert warm_attributes["gen_ai.usage.input_tokens"] == 120  # the cached ones included
    assert warm_attributes["gen_ai.usage.cache_read.input_tokens"] == 88
    points = telemetry.points("gen_ai.client.token.usage")
    tokens = {p.attributes["gen_ai.token.type"]: (p.sum, p.count) for p in points}
    assert tokens == {"input": (210, 2), "output": (6, 2), "cache_read": (88, 2)}


def test_an_end_without_a_cache_count_records_no_cache_read() -> None:
    telemetry = InMemoryTelemetry()
    telemetry.hooks.on_llm_start(LLMStartEvent(request_id="r1", model="m"))
    telemetry.hooks.on_llm_end(
        LLMEndEvent(request_id="r1", model="m", input_tokens=5, output_tokens=2)
    )
    assert "gen_ai.usage.cache_read.input_tokens" not in (telemetry.span("chat m").attributes or {})
    points = telemetry.points("gen_ai.client.token.usage")
    assert {p.attributes["gen_ai.token.type"] for p in points} == {"input", "output"}
