"""The offline model keeps its prefix warm: with the grammar (`CompatProfile.grammar`) the
answer after a tool result is asked with the same prompt as the call, so llama.cpp takes the
system prompt and the tools from its cache (`Usage.cached_input_tokens`), and the grammar
keeps the model from calling again."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests._requirements import require

pytestmark = pytest.mark.requires("local_model")
require("local_model")  # the imports below need the runtime

from llmrtc import Hooks, TextDelta, ToolCallStarted
from llmrtc.cli.bot import build_handler, load_bot
from llmrtc.llm.local import LocalModelServer, ensure_model_file, local_provider
from llmrtc.telemetry.events import LLMEndEvent

WEATHER = Path(__file__).resolve().parents[2] / "playbooks" / "weather.yaml"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[LocalModelServer]:
    ensure_model_file("1.5b")
    async with LocalModelServer("1.5b", n_ctx=2048) as running:
        yield running


class Requests(Hooks):
    def __init__(self) -> None:
        self.ends: list[LLMEndEvent] = []

    def on_llm_end(self, event: LLMEndEvent) -> None:
        self.ends.append(event)


@pytest.mark.anyio
@pytest.mark.parametrize("grammar", [True, False])
async def test_the_answer_after_a_tool_result_reuses_the_cached_prompt(
    server: LocalModelServer, grammar: bool
) -> None:
    llm = local_provider(server)
    # Without routing: its request's tokens are counted in the call's usage (tests of routing:
    # tests/llm/test_tool_routing.py), and this compares the call's prompt with the answer's.
    llm.compat = dataclasses.replace(llm.compat, grammar=grammar, route_tools=False)
    bot = load_bot(str(WEATHER), None)
    requests = Requests()
    handler = build_handler(llm, bot.registry, bot.playbook, hooks=requests)
    events = [e async for e in handler.run_turn("What's the weather in Tokyo?")]
    calls = [e.call.name for e in events if isinstance(e, ToolCallStarted)]
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    if calls != ["lookupWeather"]:
        pytest.skip(f"the model did not call the tool once this time: {calls}")  # its decision
    assert "21" in answer or "sunny" in answer.lower(), answer
    assert "{" not in answer and "lookupWeather" not in answer
    call, follow_up = requests.ends
    assert follow_up.input_tokens and follow_up.cached_input_tokens is not None
    if grammar:
        # The system prompt with its tools section (hundreds of tokens) came from the cache:
        # only the call and the tool result were processed.
        assert follow_up.cached_input_tokens >= (call.input_tokens or 0) - 16
        assert follow_up.input_tokens - follow_up.cached_input_tokens < 120
    else:
        # The prompt changed where the tools section began: that part is processed again.
        assert follow_up.cached_input_tokens < (call.input_tokens or 0) - 100
