"""VoiceLoop recovering from a failed turn: a handler raising mid-synthesis, the error apology
said once, proactive timing after a failed turn; and concurrent pushes, lead-ins after unspoken
text, heard-word estimates."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from llmrtc.agent.events import TextDelta, TurnCompleted
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, UserMessage
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import AudioFrame, VoiceConfig, VoiceLoop
from llmrtc.voice.events import AgentSpeechEnded, AgentSpeechStarted, SpeechError

pytestmark = pytest.mark.anyio


@pytest.fixture
def quiet_logs() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


class Failing:
    """A handler that says a sentence, waits `pause` s, then raises (on its first turn only)."""

    def __init__(self, pause: float) -> None:
        self.history = ConversationHistory()
        self.pause = pause
        self.turns = 0

    async def run_turn(self, user_text: str | None, *, abort_signal: Any = None) -> Any:
        self.turns += 1
        self.history.append(UserMessage(user_text or ""))
        yield TextDelta("First sentence here. ")
        if self.turns == 1:
            await anyio.sleep(self.pause)
            raise RuntimeError("model server 500")

    def next_deadline(self) -> None:
        return None

    async def run_timeout_turn(self, *, abort_signal: Any = None) -> Any:
        return
        yield


async def until_ended(events: Any, timeout: float = 10) -> list[Any]:
    seen: list[Any] = []
    with anyio.fail_after(timeout):
        async for event in events:
            seen.append(event)
            if isinstance(event, AgentSpeechEnded):
                return seen
    raise AssertionError(f"events ended: {seen}")


async def test_a_handler_raising_mid_synthesis_apologises_and_serves_the_next_turn(
    quiet_logs: None,
) -> None:
    tts = FakeTTS(delay=0.1)  # synthesis at about real time: the sentence is mid-synthesis
    handler: Any = Failing(pause=0.15)
    loop = VoiceLoop(handler, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    async with loop:
        events = loop.events()
        await loop.send_text("hi")
        seen = await until_ended(events)
        assert [e.source for e in seen if isinstance(e, SpeechError)] == ["turn"]
        assert tts.spoken[-1] == loop.config.error_text
        await loop.send_text("hello again")
        await until_ended(events)
    assert handler.turns == 2


async def test_the_error_apology_is_said_once_after_a_tts_failure_and_a_handler_error(
    quiet_logs: None,
) -> None:
    tts = FakeTTS()
    handler: Any = Failing(pause=0.5)
    loop = VoiceLoop(handler, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    tts.fail_next()
    async with loop:
        events = loop.events()
        await loop.send_text("hi")
        await until_ended(events)
        await anyio.sleep(0.3)
    assert tts.spoken.count(loop.config.error_text) == 1


async def test_concurrent_pushes_reach_the_endpointer_in_call_order() -> None:
    tts = FakeTTS()
    handler: Any = Failing(pause=0)
    loop = VoiceLoop(handler, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    seen: list[int] = []
    async with loop:
        endpointer: Any = loop._endpointer
        original = endpointer.push

        def spy(window: bytes, probability: float) -> Any:
            seen.append(int.from_bytes(window[:2], "little", signed=True))
            return original(window, probability)

        endpointer.push = spy
        long = AudioFrame(b"\x01\x00" * 512 * 32, 16000)  # 32 VAD windows, 4 checkpoints
        short = AudioFrame(b"\x02\x00" * 512 * 2, 16000)
        async with anyio.create_task_group() as group:
            group.start_soon(loop.push_audio, long)
            await anyio.lowlevel.checkpoint()
            group.start_soon(loop.push_audio, short)
    assert seen == [1] * 32 + [2] * 2


async def test_an_open_call_after_a_code_block_leaves_the_code_in_the_history() -> None:
    @tool
    async def run_sql(query: str) -> str:
        """Run SQL."""
        return "3 rows"

    text = (
        "I will count the orders.\n```sql\nSELECT count(*) FROM orders\n```\nLet me call run_sql("
    )
    call = ToolCall("c1", "run_sql", {"query": "SELECT count(*) FROM orders"})
    tts = FakeTTS()
    llm = ScriptedLLM([ScriptedResponse(text=text, tool_calls=[call]), "There are 3 orders."])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([run_sql])), system_prompt="Be brief.")
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    async with loop:
        events = loop.events()
        await loop.send_text("how many orders?")
        await until_ended(events)
    assert tts.spoken == ["I will count the orders.", "There are 3 orders."]
    first = runner.history.messages[1]
    assert isinstance(first, AssistantMessage) and first.content is not None
    assert "SELECT count(*) FROM orders" in first.content and "run_sql(" not in first.content


async def test_a_proactive_turn_after_a_turn_that_raised_counts_from_that_turn(
    quiet_logs: None,
) -> None:
    timeout = 1.0

    class Timed:  # a silence timer like PlaybookOrchestrator's: restarted when any turn ends
        def __init__(self) -> None:
            self.history = ConversationHistory()
            self.last = time.monotonic()
            self.turns = 0
            self.fired: float | None = None

        async def run_turn(self, user_text: str | None, *, abort_signal: Any = None) -> Any:
            self.turns += 1
            try:
                self.history.append(UserMessage(user_text or ""))
                if self.turns == 2:
                    raise RuntimeError("bug")
                yield TextDelta("Hi.")
                self.history.append(AssistantMessage("Hi."))
                yield TurnCompleted("Hi.")
            finally:
                self.last = time.monotonic()

        def next_deadline(self) -> float | None:
            return None if self.fired else self.last + timeout

        async def run_timeout_turn(self, *, abort_signal: Any = None) -> Any:
            self.fired = time.monotonic()
            yield TextDelta("Still there?")
            self.history.append(AssistantMessage("Still there?"))
            yield TurnCompleted("Still there?")

    tts = FakeTTS()
    handler = Timed()
    loop = VoiceLoop(handler, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    async with loop:
        events = loop.events()
        await loop.send_text("hi")
        await until_ended(events)
        await anyio.sleep(0.6)  # quiet, but less than the timeout
        await loop.send_text("tell me")  # raises: the error apology is said
        await until_ended(events)
        quiet = time.monotonic()
        with anyio.fail_after(10):
            while handler.fired is None:
                await anyio.sleep(0.02)
    assert handler.fired is not None
    # Counted from the failed turn: ~1.0 s (from the first turn it would be ~1.6 s).
    assert handler.fired - quiet < timeout + 0.45


async def test_heard_text_after_the_rate_is_measured_keeps_the_words_played() -> None:
    # A streaming TTS at a normal rate (0.065 s/char, audio arriving about in real time): once
    # a reply finished, the measured rate (not the slow floor) estimates unfinished segments.
    spc = 0.065
    text = (
        "Alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
        "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu."
    )
    tts = FakeTTS(seconds_per_char=spc, delay=0.09)
    llm = ScriptedLLM(["Hello there, nice to meet you. How are you doing today?", text])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([])), system_prompt="Be brief.")
    config = VoiceConfig(output_sample_rate=24000)
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), config=config)
    async with loop:
        events = loop.events()
        await loop.send_text("hi")
        await until_ended(events)
        await loop.send_text("spell")
        with anyio.fail_after(10):
            async for event in events:
                if isinstance(event, AgentSpeechStarted):
                    break
        await anyio.sleep(3.0)
        segment = loop._playout._queue[0]
        assert not segment.done  # still being synthesised: its length is estimated
        played = segment.played / 24000
        await loop.interrupt()
        ended = (await until_ended(events))[-1]
    truly = [m.group() for m in re.finditer(r"\S+", text) if m.end() <= played / spc]
    assert len(truly) >= 5
    assert len(truly) - len(ended.heard_text.split()) <= 1
