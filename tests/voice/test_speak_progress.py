"""`VoiceConfig.speak_progress`: what a running tool reports (`ToolContext.progress`) is spoken
when the line is free, at most one every `progress_interval`, and never enters the history."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.context import ToolContext
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import VoiceConfig, VoiceLoop

pytestmark = pytest.mark.anyio


async def wait_for(predicate: Any, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


def searching(release: anyio.Event, *, background: bool) -> ToolRegistry:
    @tool(background=background, timeout=60.0)
    async def search_flights(city: str, ctx: ToolContext) -> str:
        """Search flights."""
        await ctx.progress("Searching the airlines")
        await anyio.sleep(0.4)  # past the progress rate limit of ToolContext
        await ctx.progress("Comparing prices")  # within progress_interval: shown, not spoken
        await release.wait()
        return "two flights"

    return ToolRegistry([search_flights])


def loop_for(llm: ScriptedLLM, registry: ToolRegistry, config: VoiceConfig) -> tuple[Any, Any]:
    runner = TurnRunner(llm, ToolExecutor(registry), system_prompt="Be brief.")
    tts = FakeTTS()
    return VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), config=config), tts


SEARCH = [ToolCall("c1", "search_flights", {"city": "Oslo"})]


async def test_a_slow_tools_progress_is_spoken_during_its_batch_and_kept_out_of_history() -> None:
    release = anyio.Event()
    llm = ScriptedLLM([SEARCH, "I found two flights."])
    config = VoiceConfig(speak_progress=True, progress_interval=5.0, filler_text="")
    loop, tts = loop_for(llm, searching(release, background=False), config)
    async with loop:
        await loop.send_text("Flights to Oslo")
        await wait_for(lambda: tts.spoken == ["Searching the airlines"])
        await anyio.sleep(0.6)
        assert tts.spoken == ["Searching the airlines"]  # the second came within the interval
        release.set()
        await wait_for(lambda: tts.spoken[-1:] == ["I found two flights."])
        await wait_for(lambda: loop._turns.reply is None)
    assert not any("Searching" in str(m) for m in loop.history.messages)


async def test_a_background_calls_progress_is_spoken_while_the_agent_is_idle() -> None:
    step, release = anyio.Event(), anyio.Event()

    @tool(background=True, timeout=60.0)
    async def search_flights(city: str, ctx: ToolContext) -> str:
        """Search flights."""
        await ctx.progress("Searching the airlines")  # while the answer plays: not spoken
        await step.wait()
        await ctx.progress("Comparing prices")  # the agent is idle: spoken
        await release.wait()
        return "two flights"

    llm = ScriptedLLM([SEARCH, "I am searching.", "I found two flights."])
    config = VoiceConfig(speak_progress=True, progress_interval=0.1)
    loop, tts = loop_for(llm, ToolRegistry([search_flights]), config)
    async with loop:
        await loop.send_text("Flights to Oslo")
        await wait_for(lambda: "I am searching." in tts.spoken)
        await wait_for(lambda: loop._turns.reply is None)
        step.set()
        await wait_for(lambda: "Comparing prices" in tts.spoken)
        await wait_for(lambda: loop._turns.reply is None)
        release.set()
        await wait_for(lambda: tts.spoken[-1:] == ["I found two flights."])
        await wait_for(lambda: loop._turns.reply is None)
    assert tts.spoken == ["I am searching.", "Comparing prices", "I found two flights."]
    assert not any("Comparing" in str(m) for m in loop.history.messages)
    llm.assert_consumed()


async def test_off_by_default_progress_is_never_spoken() -> None:
    release = anyio.Event()
    llm = ScriptedLLM([SEARCH, "I found two flights."])
    loop, tts = loop_for(llm, searching(release, background=False), VoiceConfig(filler_text=""))
    assert VoiceConfig().speak_progress is False
    async with loop:
        await loop.send_text("Flights to Oslo")
        await anyio.sleep(0.8)
        release.set()
        await wait_for(lambda: tts.spoken[-1:] == ["I found two flights."])
    assert tts.spoken == ["I found two flights."]


def test_speak_progress_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="speak_progress"):
        VoiceConfig(speak_progress="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="progress_interval"):
        VoiceConfig(progress_interval=-1.0)
