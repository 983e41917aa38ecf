"""`build_handler` (chat, voice, serve) with LLM-backed tools (`UTIL_TOOLS`): they run on the
command's own model by default, on the real `openai` client against `ScriptedOpenAIServer`,
or on an explicit `models=` pool (review R12 #4)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmrtc.agent import TurnCompleted
from llmrtc.catalog import UTIL_TOOLS, ModelPool
from llmrtc.cli.bot import build_handler
from llmrtc.llm import OpenAIProvider
from llmrtc.testing import ScriptedLLM, ScriptedOpenAIServer, text_reply, tool_call_reply
from llmrtc.tools import ToolRegistry

pytestmark = pytest.mark.anyio

ARGS = json.dumps({"text": "A long text about cats."})


def summarize_name() -> str:
    return next(
        d.wire_name for d in ToolRegistry(list(UTIL_TOOLS)).definitions() if "summar" in d.name
    )


async def turn(handler: Any) -> TurnCompleted:
    events = [event async for event in handler.run_turn("Summarise it")]
    last = events[-1]
    assert isinstance(last, TurnCompleted)
    return last


async def test_llm_tools_run_on_the_commands_own_model() -> None:
    registry = ToolRegistry(list(UTIL_TOOLS))
    replies = [
        tool_call_reply([("c1", summarize_name(), ARGS)]),
        text_reply("Cats are long."),  # the tool's own request
        text_reply("It says cats are long."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        llm = OpenAIProvider("chat-model", base_url=server.base_url, api_key="test")
        done = await turn(build_handler(llm, registry, None))
    (result,) = done.tool_results
    assert result.success and result.result == "Cats are long.", result.error
    assert done.text == "It says cats are long."
    tool_request = server.requests[1].body
    assert tool_request["model"] == "chat-model" and "tools" not in tool_request


async def test_an_explicit_pool_is_used() -> None:
    replies = [tool_call_reply([("c1", summarize_name(), ARGS)]), text_reply("Done.")]
    async with ScriptedOpenAIServer(replies) as server:
        llm = OpenAIProvider("chat-model", base_url=server.base_url, api_key="test")
        pool = ModelPool({"mine": ScriptedLLM(["From the pool."])}, default_model="mine/x")
        async with pool:
            handler = build_handler(llm, ToolRegistry(list(UTIL_TOOLS)), None, models=pool)
            done = await turn(handler)
    (result,) = done.tool_results
    assert result.success and result.result == "From the pool.", result.error
    assert len(server.requests) == 2


async def test_a_playbooks_orchestrator_gets_the_pool_too() -> None:
    from llmrtc.playbook import Playbook

    playbook = Playbook.model_validate(
        {
            "id": "p",
            "initial_stage": "main",
            "stages": [{"id": "main", "system_prompt": "Help.", "tools": [summarize_name()]}],
        }
    )
    replies = [
        tool_call_reply([("c1", summarize_name(), ARGS)]),
        text_reply("Cats are long."),
        text_reply("It says cats are long."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        llm = OpenAIProvider("chat-model", base_url=server.base_url, api_key="test")
        done = await turn(build_handler(llm, ToolRegistry(list(UTIL_TOOLS)), playbook))
    (result,) = done.tool_results
    assert result.success and result.result == "Cats are long.", result.error
    assert server.requests[1].body["model"] == "chat-model"
