"""The composed tool-call format on the real offline model (Qwen2.5-Coder 1.5B on llama.cpp):
decoding constrained to the `{calls, output}` schema gives a declared call with valid
arguments, or an answer, never both. Skipped without the runtime or the model parts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llmrtc.agent import TurnRunner
from llmrtc.execution import ToolExecutor
from llmrtc.llm import LLMRequest, SystemMessage, ToolMessage, UserMessage
from llmrtc.llm.types import LLMTextDelta, LLMToolCall
from llmrtc.tools import ToolDefinition, ToolRegistry, define_tool, tool
from tests._requirements import require

pytestmark = [pytest.mark.anyio, pytest.mark.requires("local_model")]
require("local_model")  # the imports below need the runtime

from llmrtc.llm.local import (
    LocalModelServer,
    ensure_model_file,
    local_provider,
)

SYSTEM = "You are a friendly voice assistant for an online shop. Keep answers short."


@tool
async def lookupWeather(city: str) -> dict[str, Any]:
    """Look up the current weather for a city"""
    return {"city": city, "temperature_c": 21, "conditions": "sunny"}


@tool
async def lookupOrder(order_id: str) -> str:
    """Look up the status of a customer order by its order number"""
    return "shipped yesterday"


@tool
async def transferToHuman(reason: str) -> str:
    """Transfer the caller to a human agent"""
    return "transferring"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[LocalModelServer]:
    ensure_model_file("1.5b")
    async with LocalModelServer("1.5b", n_ctx=4096) as running:
        yield running


async def test_a_weather_question_is_one_declared_call_with_valid_arguments(
    server: LocalModelServer,
) -> None:
    llm = local_provider(server, tool_call_format="composed")
    tools = [lookupWeather.definition, lookupOrder.definition, transferToHuman.definition]
    request = LLMRequest(
        [SystemMessage(SYSTEM), UserMessage("What's the weather in Tokyo?")], tools=tools
    )
    events = [event async for event in llm.stream(request)]
    calls = [e.call for e in events if isinstance(e, LLMToolCall)]
    assert [c.name for c in calls] == ["lookupWeather"]
    assert "tokyo" in json.loads(calls[0].arguments)["city"].lower()  # type: ignore[arg-type]
    assert not [e for e in events if isinstance(e, LLMTextDelta)]  # calls or an answer


async def test_a_latent_tool_through_a_turn_on_the_offline_model(
    server: LocalModelServer,
) -> None:
    capital = define_tool(
        ToolDefinition(
            name="capitalOf",
            description="The capital city of a country",
            parameters={
                "type": "object",
                "properties": {"country": {"type": "string"}},
                "required": ["country"],
            },
            output_schema={"type": "string", "description": "The capital city"},
        )
    )
    llm = local_provider(server, tool_call_format="composed")
    runner = TurnRunner(
        llm, ToolExecutor(ToolRegistry([capital, lookupOrder])), system_prompt=SYSTEM
    )
    events = [e async for e in runner.run_turn("Use the capitalOf tool: capital of France?")]
    assert events
    results = [m for m in runner.history.messages if isinstance(m, ToolMessage)]
    assert results, "the model did not call the latent tool"
    assert "paris" in results[0].content.lower()
