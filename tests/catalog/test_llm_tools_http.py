"""LLM-backed tools on the real `openai` client (`OpenAIProvider`) against
`ScriptedOpenAIServer`: fallback on HTTP 500, `response_format` on the wire where the server
honours it, JSON repair of a streamed answer, and abort / timeout in the middle of a request
(the HTTP stream is closed, the call gets its one result, with its model usage)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc.abort import AbortController
from llmrtc.catalog.llm_tools import LLMTool, ModelPreference, define_llm_tool
from llmrtc.catalog.llm_tools.model_pool import ModelPool
from llmrtc.execution import ToolExecutor
from llmrtc.llm import OpenAIProvider
from llmrtc.llm.compat import CompatProfile, RetryPolicy
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import (
    ErrorReply,
    ScriptedOpenAIServer,
    StreamReply,
    abort_after,
    chunk,
    text_reply,
)
from llmrtc.tools import ToolCall, ToolRegistry

pytestmark = pytest.mark.anyio

OUTPUT = {
    "type": "object",
    "properties": {"label": {"type": "string"}, "score": {"type": "number"}},
    "required": ["label"],
}


def classify_tool(**overrides: Any) -> LLMTool:
    options: dict[str, Any] = {
        "id": "test:classify@1.0.0",
        "description": "Label a text.",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        "system_prompt": "You label texts.",
        "user_template": "{{text}}",
        "output_format": "json",
        "output_schema": OUTPUT,
        "model_preference": ModelPreference(preferred="first/model-a", fallbacks=["second/b"]),
    }
    options.update(overrides)
    return define_llm_tool(**options)


def provider(server: ScriptedOpenAIServer, **options: Any) -> OpenAIProvider:
    options.setdefault("retry", RetryPolicy(max_retries=0))
    return OpenAIProvider("unused", base_url=server.base_url, api_key="test", **options)


class Fallbacks(Hooks):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_model_fallback(self, event: Any) -> None:
        self.events.append(event)


async def execute(pool: ModelPool, tool: LLMTool, **options: Any) -> Any:
    executor = ToolExecutor(ToolRegistry([tool]), models=pool, timeout=options.pop("timeout", 30))
    call = ToolCall("c1", tool.definition.wire_name, {"text": "I love this phone"})
    (result,) = await executor.execute([call], **options)
    return result


async def test_fallback_on_http_500_to_the_next_provider() -> None:
    hooks = Fallbacks()
    async with (
        ScriptedOpenAIServer([ErrorReply(500, "boom at the backend")]) as first,
        ScriptedOpenAIServer([text_reply('{"label": "positive"}', usage=(40, 6))]) as second,
    ):
        factories = {"first": lambda: provider(first), "second": lambda: provider(second)}
        async with ModelPool(factories, hooks=hooks) as pool:
            result = await execute(pool, classify_tool())
    assert result.status == "ok", result.error
    assert result.result == {"label": "positive"}
    usage = result.model_usage
    assert (usage.model, usage.attempts) == ("second/b", 2)
    assert (usage.input_tokens, usage.output_tokens) == (40, 6)
    assert "500" in usage.failures[0] and usage.failures[0].startswith("first/model-a: ")
    (event,) = hooks.events
    assert (event.failed_model, event.next_model) == ("first/model-a", "second/b")
    # The model part of each id went with each request.
    assert first.requests[0].body["model"] == "model-a"
    assert second.requests[0].body["model"] == "b"


async def test_response_format_is_sent_where_the_server_honours_it() -> None:
    answer = 'Here you go:\n```json\n{"label": "negative", "score": 0.2}\n```'
    async with (
        ScriptedOpenAIServer([text_reply(answer)]) as honours,
        ScriptedOpenAIServer([text_reply(answer)]) as ignores,
    ):
        for server, profile in ((honours, None), (ignores, CompatProfile(response_format=False))):
            pool = ModelPool({"first": lambda s=server, p=profile: provider(s, compat=p)})
            async with pool:
                result = await execute(pool, classify_tool())
            assert result.result == {"label": "negative", "score": 0.2}
    sent = honours.requests[0].body
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "test__classify", "schema": OUTPUT},
    }
    assert "response_format" not in ignores.requests[0].body
    system = ignores.requests[0].body["messages"][0]["content"]
    assert "Answer with a single JSON value" in system  # the instruction stays


def slow_stream() -> StreamReply:
    # The second chunk is never sent: the server hangs after the first.
    return StreamReply([chunk(content='{"label": '), chunk(finish_reason="stop")], hang_after=1)


async def test_an_abort_mid_request_closes_the_stream_and_tries_no_other_model() -> None:
    async with (
        ScriptedOpenAIServer([slow_stream()]) as first,
        ScriptedOpenAIServer([]) as second,
    ):
        factories = {"first": lambda: provider(first), "second": lambda: provider(second)}
        async with ModelPool(factories) as pool:
            controller = AbortController()
            with anyio.fail_after(10):
                async with abort_after(0.5, controller=controller):
                    result = await execute(pool, classify_tool(), abort_signal=controller.signal)
            with anyio.fail_after(5):
                while not first.disconnects:
                    await anyio.sleep(0.02)
    assert result.status == "aborted"
    assert result.model_usage.model == "first/model-a"
    assert second.requests == [] and second.unexpected == []


async def test_a_timeout_mid_request_closes_the_stream_and_reports_usage() -> None:
    async with ScriptedOpenAIServer([slow_stream()]) as server:
        pool = ModelPool({"first": lambda: provider(server)})
        tool = classify_tool(model_preference=ModelPreference(preferred="first/a"))
        async with pool:
            with anyio.fail_after(10):
                result = await execute(pool, tool, timeout=0.5)
        with anyio.fail_after(5):
            while not server.disconnects:
                await anyio.sleep(0.02)
    assert result.status == "timeout"
    assert (result.model_usage.model, result.model_usage.attempts) == ("first/a", 1)
