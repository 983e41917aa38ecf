"""`ToolExecutor(reasoning_for_call=True)` in a real turn: the field is offered to the model,
stripped before the handler, and recorded on the hooks."""

from __future__ import annotations

from typing import Any

import pytest

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, TurnRunner, tool
from llmrtc.testing import RecordingHooks, ScriptedLLM
from llmrtc.tools import REASONING_FIELD

pytestmark = pytest.mark.anyio

seen: list[dict[str, Any]] = []


@tool
async def lookupWeather(city: str) -> str:
    """Weather.

    Args:
        city: City name.
    """
    seen.append({"city": city})
    return "sunny"


async def test_the_turn_offers_the_field_and_the_handler_never_sees_it() -> None:
    call = ToolCall("c1", "lookupWeather", {"city": "Oslo", REASONING_FIELD: "user asked"})
    llm = ScriptedLLM([[call], "Sunny."])
    hooks = RecordingHooks()
    executor = ToolExecutor(ToolRegistry([lookupWeather]), reasoning_for_call=True, hooks=hooks)
    runner = TurnRunner(llm, executor, system_prompt="Be brief.")
    async for _ in runner.run_turn("Weather in Oslo?"):
        pass
    offered = llm.requests[0].tools[0].parameters["properties"]
    assert REASONING_FIELD in offered
    assert REASONING_FIELD in runner.tool_definitions()[0].parameters["properties"]
    assert seen == [{"city": "Oslo"}]
    (end,) = [e for e in hooks.events if type(e).__name__ == "ToolEndEvent"]
    assert end.status == "ok" and end.reasoning == "user asked"
