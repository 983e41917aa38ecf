"""The offline model's talk about a tool never reaches the user: the real Qwen2.5-Coder 1.5B
introduces a call with "you can use the `lookupWeather` function. Here's how you can call
it:" on these questions (measured: 4 of the 6 chat questions), which a voice would speak."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest

from tests._requirements import require

pytestmark = pytest.mark.requires("local_model")
require("local_model")  # the imports below need the runtime

from llmrtc.llm.local import LocalModelServer, ensure_model_file

QUESTIONS = [
    "Is it raining in Oslo?",
    "Should I bring an umbrella in Oslo today?",
    "Is it sunny in Tokyo?",
    "Is it cold in Oslo?",
    "weather tokyo",
]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[LocalModelServer]:
    ensure_model_file("1.5b")
    async with LocalModelServer("1.5b", n_ctx=2048) as running:
        yield running


@pytest.mark.anyio
@pytest.mark.parametrize("question", QUESTIONS)
async def test_the_tool_is_called_without_being_talked_about(
    server: LocalModelServer, question: str
) -> None:
    from llmrtc import TextDelta, ToolCallStarted, ToolExecutor, ToolRegistry, TurnRunner, tool
    from llmrtc.llm.default import local_provider

    # The weather tool of demos/text_agent.py, and the chat's default system prompt.
    @tool
    async def lookupWeather(
        city: str, units: Literal["celsius", "fahrenheit"] = "celsius"
    ) -> dict[str, Any]:
        """Current weather for a city.

        Args:
            city: City name, e.g. "Tokyo".
            units: Temperature units.
        """
        return {"city": city, "temperature": 4, "units": units, "conditions": "rainy"}

    runner = TurnRunner(
        local_provider(server),
        ToolExecutor(ToolRegistry([lookupWeather])),
        system_prompt="You are a helpful assistant. Use the tools when they help. Answer briefly.",
    )
    events = [event async for event in runner.run_turn(question)]
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert answer.strip()
    assert "lookupWeather" not in answer and "`" not in answer and "{" not in answer
    # Whether it calls is the model's decision; when it does, only the declared tool.
    assert {e.call.name for e in events if isinstance(e, ToolCallStarted)} <= {"lookupWeather"}
