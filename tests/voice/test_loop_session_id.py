"""The session a `VoiceLoop` serves reaches its tool batches: a handler built without a
session id (an RTC agent factory knows none) still runs tools whose `ctx.session_id` is the
loop's, so `on_duplicate` works per session."""

from __future__ import annotations

import anyio
import pytest

from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.context import ToolContext
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import VoiceLoop

pytestmark = pytest.mark.anyio


async def test_tools_see_the_loops_session_and_repeats_are_reused() -> None:
    sessions: list[str | None] = []

    @tool(on_duplicate="reuse", side_effects=["books a table"])
    async def book_table(restaurant: str, ctx: ToolContext) -> str:
        """Book a table."""
        sessions.append(ctx.session_id)
        return f"booked {restaurant}"

    llm = ScriptedLLM(
        [
            [ToolCall("c1", "book_table", {"restaurant": "Nopa"})],
            "Booked.",
            [ToolCall("c2", "book_table", '{"restaurant": "Nopa"}')],
            "It is booked.",
        ]
    )
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([book_table])), system_prompt="Brief.")
    assert runner.session_id is None
    tts = FakeTTS()
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), session_id="s-7")
    async with loop:
        await loop.send_text("Book Nopa")
        with anyio.fail_after(10):
            while tts.spoken != ["Booked."]:
                await anyio.sleep(0.01)
        await loop.send_text("Did you book Nopa?")
        with anyio.fail_after(10):
            while tts.spoken[-1:] != ["It is booked."]:
                await anyio.sleep(0.01)
    assert sessions == ["s-7"]  # the handler ran once, for this session
    assert '"booked Nopa"' in str(llm.requests[-1].messages[-1])
