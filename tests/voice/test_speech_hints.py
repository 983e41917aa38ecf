"""Speech hints: what a handler expects to hear (`HintingHandler.speech_hints()`, from a
runner's tools or a playbook stage), how hints become an STT prompt (`hints_prompt`), and the
voice loop passing them to the STT at each utterance (`STT.transcribe(pcm, hints=...)`);
OpenAISTT sends them as the endpoint's `prompt`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest

from llmrtc.agent.handler import HintingHandler, tool_speech_hints
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.playbook import PlaybookOrchestrator
from llmrtc.playbook.loading import load_playbook, load_playbook_tools
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM, ScriptedOpenAIServer
from llmrtc.testing.openai_audio import tone
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import tool
from llmrtc.voice import VoiceLoop
from llmrtc.voice.audio import split_frames
from llmrtc.voice.events import AgentSpeechEnded
from llmrtc.voice.providers.openai_speech import OpenAISTT
from llmrtc.voice.stt import hints_prompt

pytestmark = pytest.mark.anyio

WEATHER = Path(__file__).parents[2] / "playbooks" / "weather.yaml"


@tool
async def get_order_status(order_id: str, channel: Literal["phone", "email"] = "phone") -> str:
    """The status of an order.

    Args:
        order_id: The order number, e.g. "A-1042".
        channel: How to notify.
    """
    return "shipped"


def test_tool_hints_are_name_words_enums_examples_and_quoted_examples() -> None:
    weather = ToolDefinition(
        name="lookupWeather",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string", "examples": ["Oslo", "Lima"]},
                "units": {"enum": ["celsius", "fahrenheit", 3]},
                "mode": {"const": "hourly"},
                "note": {"type": "string", "examples": ["a whole sentence is not a hint here"]},
            },
        },
    )
    hints = tool_speech_hints([weather, get_order_status.definition])
    assert hints == [
        "weather",  # "lookup" is a programming verb, not a word a caller says
        "order",
        "status",
        "Oslo",
        "Lima",
        "celsius",
        "fahrenheit",
        "hourly",
        "A-1042",  # a quoted example in a parameter's description
        "phone",
        "email",
    ]
    # no repeats in any case, and no tools, no hints
    assert tool_speech_hints([weather, weather]) == hints[:1] + hints[3:8]
    assert tool_speech_hints([]) == []


def test_a_runner_hints_its_offered_tools() -> None:
    registry = ToolRegistry([get_order_status])
    runner = TurnRunner(ScriptedLLM([]), ToolExecutor(registry), system_prompt="x")
    assert isinstance(runner, HintingHandler)
    assert runner.speech_hints()[:2] == ["order", "status"]
    bare = TurnRunner(ScriptedLLM([]), ToolExecutor(ToolRegistry()), system_prompt="x")
    assert bare.speech_hints() == []


def test_a_playbook_hints_the_current_stage_tools_and_keywords_not_stage_ids() -> None:
    playbook = load_playbook(WEATHER)
    orchestrator = PlaybookOrchestrator(playbook, ScriptedLLM([]), load_playbook_tools(playbook))
    assert isinstance(orchestrator, HintingHandler)
    assert orchestrator.speech_hints() == [
        "weather",
        "Tokyo",
        "celsius",
        "fahrenheit",
        "bye",
        "goodbye",
        "that's all",
    ]


def test_hints_prompt_lists_distinct_hints_and_refuses_a_bare_string() -> None:
    assert hints_prompt([]) is None
    assert hints_prompt(["  ", ""]) is None
    assert hints_prompt(["weather", "Celsius", "celsius", " that's   all "]) == (
        "weather, Celsius, that's all."
    )
    many = hints_prompt([f"word{i}" for i in range(200)])
    assert many is not None and len(many) <= 300 and many.startswith("word0, word1,")
    with pytest.raises(TypeError, match="one string"):
        hints_prompt("weather")
    with pytest.raises(TypeError, match="must be strings"):
        hints_prompt(["weather", 3])  # type: ignore[list-item]


async def say(loop: VoiceLoop, tts: FakeTTS, text: str) -> None:
    for frame in split_frames(tts.render(text) + bytes(2 * round(24000 * 0.7)), 24000):
        await loop.push_audio(frame)


async def spoken_turn(handler: Any, stt: FakeSTT, tts: FakeTTS) -> None:
    loop = VoiceLoop(handler, stt=stt, tts=tts, vad=FakeVAD())
    async with loop:
        events = loop.events()
        await say(loop, tts, "hello there")
        with anyio.fail_after(15):
            async for event in events:
                if isinstance(event, AgentSpeechEnded):
                    break


async def test_the_loop_passes_the_stage_hints_to_the_stt_at_each_utterance() -> None:
    playbook = load_playbook(WEATHER)
    orchestrator = PlaybookOrchestrator(
        playbook, ScriptedLLM(["It is sunny."]), load_playbook_tools(playbook)
    )
    tts = FakeTTS()
    stt = FakeSTT(tts=tts)
    await spoken_turn(orchestrator, stt, tts)
    assert stt.hints == [tuple(orchestrator.speech_hints())]


class OldSTT(FakeSTT):
    """An engine whose `transcribe` has no `hints` (written before hints existed)."""

    async def transcribe(self, pcm: bytes) -> str:  # type: ignore[override]
        return await super().transcribe(pcm)


class FailingHints(TurnRunner):
    def speech_hints(self) -> Sequence[str]:
        raise RuntimeError("broken hints")


async def test_no_hints_call_the_engine_without_them_and_failing_hints_are_no_hints(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tts = FakeTTS()
    plain = TurnRunner(ScriptedLLM(["Hi."]), ToolExecutor(ToolRegistry()), system_prompt="x")
    old = OldSTT(tts=tts)
    await spoken_turn(plain, old, tts)  # no tools, no hints: `transcribe(pcm)` as before
    assert old.hints == [()]
    failing = FailingHints(ScriptedLLM(["Hi."]), ToolExecutor(ToolRegistry()), system_prompt="x")
    stt = FakeSTT(tts=tts)
    await spoken_turn(failing, stt, tts)
    assert stt.hints == [()]
    assert "speech_hints() failed" in caplog.text


async def test_openai_stt_sends_hints_as_the_prompt() -> None:
    async with ScriptedOpenAIServer([], transcripts=["Oslo.", "Lima."]) as server:
        engine = OpenAISTT(base_url=server.base_url, api_key="test")
        pcm = tone(1.0, sample_rate=16_000, frequency=300.0)
        assert await engine.transcribe(pcm, hints=["weather", "Oslo"]) == "Oslo."
        assert await engine.transcribe(pcm) == "Lima."
    first, second = server.transcription_requests
    assert first.fields["prompt"] == "weather, Oslo."
    assert "prompt" not in second.fields


async def test_an_engine_without_hints_works_when_the_handler_has_some() -> None:
    # A user's STT written before hints existed (`transcribe(self, pcm)`) with a handler that
    # has tools (so hints): it is never given `hints=`, and the turn is answered.
    playbook = load_playbook(WEATHER)
    llm = ScriptedLLM(["It is sunny."])
    orchestrator = PlaybookOrchestrator(playbook, llm, load_playbook_tools(playbook))
    assert orchestrator.speech_hints()
    tts = FakeTTS()
    old = OldSTT(tts=tts)
    await spoken_turn(orchestrator, old, tts)
    assert old.hints == [()]
    assert len(llm.requests) == 1  # the utterance was heard and answered, not apologised for


class OddHints(TurnRunner):
    def __init__(self, hints: Any) -> None:
        super().__init__(ScriptedLLM(["Hi."]), ToolExecutor(ToolRegistry()), system_prompt="x")
        self._odd = hints

    def speech_hints(self) -> Any:
        return self._odd


@pytest.mark.parametrize(
    ("given", "passed"),
    [("weather", ("weather",)), (["Oslo", 3, "", None, " Lima "], ("Oslo", "Lima")), (42, ())],
)
async def test_odd_hints_are_cleaned_never_a_failed_turn(
    given: Any, passed: tuple[str, ...]
) -> None:
    tts = FakeTTS()
    stt = FakeSTT(tts=tts)
    await spoken_turn(OddHints(given), stt, tts)
    assert stt.hints == [passed]
