"""Discovery mode through a text-mode provider (how the offline model and Ollama run): calls
written as text to hidden real tools are auto-routed, and the discovery chain keeps its tools."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from llmrtc.agent import TurnRunner
from llmrtc.catalog import ToolsConfig
from llmrtc.catalog.injection import ToolInjection
from llmrtc.execution import ToolExecutor
from llmrtc.llm import OpenAIProvider, RetryPolicy
from llmrtc.llm.local import LLAMA_CPP_PROFILE
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import RecordingHooks, ScriptedOpenAIServer, text_reply

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the shared helpers beside us
from _routing import business_tools, catalog_of

pytestmark = pytest.mark.anyio


async def _run(
    replies: list[Any], config: ToolsConfig | None = None, **options: Any
) -> tuple[RecordingHooks, ScriptedOpenAIServer]:
    injection = await ToolInjection.build(
        catalog_of(business_tools()), config=config, mode="discovery"
    )
    hooks = RecordingHooks()
    async with ScriptedOpenAIServer(replies) as server:
        llm = OpenAIProvider(
            "m",
            base_url=server.base_url,
            api_key="test",
            tool_call_format="text",
            retry=RetryPolicy(max_retries=0),
            **options,
        )
        executor = ToolExecutor(injection.registry, hooks=hooks)
        runner = TurnRunner(llm, executor, system_prompt="Bot.\n\n" + injection.prompt_section())
        [event async for event in runner.run_turn("read /a")]
    return hooks, server


@pytest.mark.parametrize("name", ["files__read", "files.read"])
async def test_a_text_call_to_a_hidden_real_tool_is_auto_routed(name: str) -> None:
    call = json.dumps({"name": name, "arguments": {"path": "/a"}})
    hooks, _ = await _run([text_reply(call, pieces=1), text_reply("It says hello.")])
    assert [e.tool_name for e in hooks.of(ToolEndEvent)] == ["files.read"]


@pytest.mark.parametrize("name", ["shell__run", "shell.run"])
async def test_a_text_call_to_a_refused_tool_gets_the_refusal_not_silence(name: str) -> None:
    """Dropping it as noise would leave the model (and the caller) thinking nothing was asked;
    the executor's refusal result says why it did not run."""
    call = json.dumps({"name": name, "arguments": {"cmd": "rm -rf /"}})
    hooks, server = await _run(
        [text_reply(call, pieces=1), text_reply("I cannot do that.")],
        config=ToolsConfig({"shell.run": False}),
    )
    assert [e.tool_name for e in hooks.of(ToolEndEvent)] == ["shell.run"]
    result = str(server.requests[1].body["messages"][-1]["content"])
    assert "not permitted" in result
    assert "shell" not in server.requests[0].body["messages"][0]["content"]  # never offered


async def test_the_local_profile_keeps_tools_through_the_discovery_chain() -> None:
    """The offline model's profile omits tools after tool results; not after a search, whose
    result only prepares the next call, so search → execute fits in one turn."""
    search = {"name": "search_tools", "arguments": {"query": "read a file"}}
    execute = {
        "name": "execute_tool",
        "arguments": {"name": "files.read", "params": {"path": "/a"}},
    }
    replies = [
        text_reply(json.dumps(search), pieces=1),
        text_reply(json.dumps(execute), pieces=1),
        text_reply("It says hello."),
    ]
    # Without the grammar, which keeps the tools in every prompt (tests/llm/test_grammar.py).
    free = dataclasses.replace(LLAMA_CPP_PROFILE, grammar=False, route_tools=False)
    hooks, server = await _run(replies, compat=free)
    assert [e.tool_name for e in hooks.of(ToolEndEvent)] == ["search_tools", "files.read"]
    prompts = [r.body["messages"][0]["content"] for r in server.requests]
    # Tool instructions: first request, after the search; not after the real tool's result.
    assert ["<tool_call>" in p for p in prompts] == [True, True, False]
