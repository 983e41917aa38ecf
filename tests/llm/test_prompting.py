"""`complete_prompt`: the one-prompt call LLM-backed tools make, on every provider kind."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from llmrtc.llm import OpenAIProvider, PromptCompleter, RetryPolicy
from llmrtc.testing import ScriptedLLM, ScriptedOpenAIServer, text_reply

pytestmark = pytest.mark.anyio


@dataclass
class Prompt:
    system: str = "Answer in JSON."
    user: str = "Summarise: hello"
    model: str | None = "tiny"
    max_tokens: int | None = 20
    temperature: float | None = 0.0
    response_format: dict[str, Any] | None = None


async def test_openai_provider_sends_one_prompt_and_reports_usage() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "o", "schema": {"type": "object"}}}
    async with ScriptedOpenAIServer([text_reply('{"s": "hi"}')]) as server:
        llm = OpenAIProvider(
            base_url=server.base_url, api_key="k", model="m", retry=RetryPolicy(max_retries=0)
        )
        done = await llm.complete_prompt(Prompt(response_format=fmt))
        body = server.requests[0].body
    assert done.text == '{"s": "hi"}' and done.stop_reason == "stop"
    assert done.input_tokens is not None and done.output_tokens is not None
    assert body["model"] == "tiny" and body["max_tokens"] == 20 and body["response_format"] == fmt
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "tools" not in body


async def test_scripted_llm_and_any_provider_through_the_wrapper() -> None:
    scripted = ScriptedLLM(["one", "two"])
    assert (await scripted.complete_prompt(Prompt())).text == "one"
    assert (await PromptCompleter(scripted).complete_prompt(Prompt(model=None))).text == "two"
    assert scripted.requests[0].settings.model == "tiny"


async def test_a_tool_free_json_prompt_is_not_told_to_avoid_json() -> None:
    from llmrtc.llm.local.profile import LLAMA_CPP_PROFILE, PLAIN_ANSWER_HINT

    async with ScriptedOpenAIServer([text_reply("{}")]) as server:
        llm = OpenAIProvider(
            base_url=server.base_url,
            api_key="k",
            model="m",
            compat=LLAMA_CPP_PROFILE,
            retry=RetryPolicy(max_retries=0),
        )
        await llm.complete_prompt(Prompt())
        sent = json.dumps(server.requests[0].body["messages"])
    assert PLAIN_ANSWER_HINT not in sent
