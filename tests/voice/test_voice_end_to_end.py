"""Whole spoken turns on the real offline speech stack (Silero, faster-whisper, piper): speech in
as 20 ms frames, a turn with a tool, speech out, transcribed back with the same STT."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from llmrtc.agent.events import ToolCallFinished, ToolCallStarted, TurnCompleted
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import AssistantMessage
from llmrtc.testing import ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse, check_chat_messages
from llmrtc.tools import ToolCall, ToolRegistry, tool
from llmrtc.voice import AudioFrame, Speech, VoiceConfig, VoiceLoop, open_default_speech
from llmrtc.voice.audio import resample, rms, split_frames
from llmrtc.voice.events import (
    AgentSpeechEnded,
    AgentSpeechStarted,
    BargeIn,
    Transcript,
    UserSpeechEnded,
    UserSpeechStarted,
)
from tests._requirements import require

pytestmark = [pytest.mark.anyio, pytest.mark.requires("voice_model")]


@tool(timeout=5.0)
async def lookupWeather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name, e.g. "Tokyo".
    """
    return {"city": city, "condition": "sunny", "temperature_c": 21}


@pytest.fixture
async def speech(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Speech]:
    monkeypatch.setenv("LLMRTC_SPEECH", "offline")  # the offline stack, even with OPENAI_* set
    require("voice_model")
    async with open_default_speech() as opened:
        yield opened


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


async def record(loop: VoiceLoop, until: type, *, timeout: float) -> list[Any]:
    """Every event of the loop until (and including) the first `until`."""
    seen: list[Any] = []
    with anyio.fail_after(timeout):
        async for event in loop.events():
            seen.append(event)
            if isinstance(event, until):
                return seen
    return seen


async def push_speech(loop: VoiceLoop, frame: AudioFrame, *, realtime: bool = False) -> None:
    for piece in split_frames(frame.pcm, frame.sample_rate):
        await loop.push_audio(piece)
        if realtime:
            await anyio.sleep(0.02)


def index(events: list[Any], kind: type) -> int:
    return next(i for i, e in enumerate(events) if isinstance(e, kind))


async def test_a_spoken_weather_turn_is_heard_answered_with_the_tool_and_spoken_back(
    speech: Speech, spoken: Any
) -> None:
    llm = ScriptedLLM(
        [
            [ToolCall("call_1", "lookupWeather", '{"city": "Tokyo"}')],
            "It is sunny and twenty one degrees in Tokyo today.",
        ]
    )
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([lookupWeather])), system_prompt="Be brief.")
    question = spoken(
        "What is the weather in Tokyo?", sample_rate=48000, lead_silence=0.4, trail_silence=1.0
    )
    async with VoiceLoop(runner, stt=speech.stt, tts=speech.tts, vad=speech.vad) as loop:
        out: list[AudioFrame] = []

        async def take_audio() -> None:
            async for frame in loop.audio_out():
                out.append(frame)

        async with anyio.create_task_group() as group:
            group.start_soon(take_audio)
            events_task: list[Any] = []

            async def watch() -> None:
                events_task.extend(await record(loop, AgentSpeechEnded, timeout=120))

            group.start_soon(watch)
            await anyio.sleep(0.05)  # both subscribers are listening
            await push_speech(loop, question)
            with anyio.fail_after(150):
                while not any(isinstance(e, AgentSpeechEnded) for e in events_task):
                    await anyio.sleep(0.05)
            group.cancel_scope.cancel()

    events = events_task
    transcript = next(e for e in events if isinstance(e, Transcript))
    assert {"weather", "tokyo"} <= words(transcript.text), transcript.text
    started = next(e for e in events if isinstance(e, ToolCallStarted))
    assert started.call.name == "lookupWeather"
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    assert finished.result.status == "ok"
    order = [
        index(events, kind)
        for kind in (
            UserSpeechStarted,
            UserSpeechEnded,
            Transcript,
            ToolCallStarted,
            ToolCallFinished,
            AgentSpeechStarted,
            AgentSpeechEnded,
        )
    ]
    assert order == sorted(order), [type(e).__name__ for e in events]
    assert index(events, TurnCompleted) < index(events, AgentSpeechEnded)
    ended = next(e for e in events if isinstance(e, AgentSpeechEnded))
    assert not ended.interrupted

    # What went out is real speech: transcribed back, it says the answer.
    assert all(f.sample_rate == 48000 and f.samples == 960 for f in out)
    voiced = b"".join(f.pcm for f in out if rms(f.pcm) > 0)
    assert len(voiced) / 2 / 48000 > 1.0  # seconds of speech
    heard = await speech.stt.transcribe(resample(voiced, 48000, 16000))
    assert {"sunny", "tokyo"} <= words(heard), heard
    check_chat_messages(runner.history.for_request("Be brief."))


async def test_barge_in_stops_real_speech_within_a_frame_and_keeps_what_was_heard(
    speech: Speech, spoken: Any
) -> None:
    long_answer = (
        "Here is a long story about the weather. The morning starts with a cold wind from the "
        "north. By noon the clouds have gone and the sun is warm. In the evening the rain comes "
        "back and the streets shine. At night the sky is clear and full of stars."
    )
    llm = ScriptedLLM([long_answer, "Sure, what else?"])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    interruption = spoken("Stop, wait a moment.", sample_rate=16000, trail_silence=0.8)
    # Speech over the reply pauses it until its transcript says what it was; a generous
    # timeout keeps the verdict the transcript's on a loaded machine (past the default 1.5 s
    # the reply would resume first, and the late words cut it then: test_interruptions.py).
    config = VoiceConfig(false_interruption_timeout=10.0)
    async with VoiceLoop(
        runner, stt=speech.stt, tts=speech.tts, vad=speech.vad, config=config
    ) as loop:
        frames: list[tuple[float, bool]] = []  # (time, voiced) of every outbound frame
        events: list[tuple[float, Any]] = []

        async def take_audio() -> None:
            async for frame in loop.audio_out():
                frames.append((anyio.current_time(), rms(frame.pcm) > 0))

        async def watch() -> None:
            async for event in loop.events():
                events.append((anyio.current_time(), event))

        async with anyio.create_task_group() as group:
            group.start_soon(take_audio)
            group.start_soon(watch)
            await anyio.sleep(0.05)
            await loop.send_text("Tell me about the weather.")
            with anyio.fail_after(60):  # the reply is playing
                while not any(isinstance(e, AgentSpeechStarted) for _, e in events):
                    await anyio.sleep(0.02)
            await anyio.sleep(1.5)
            await push_speech(loop, interruption, realtime=True)
            with anyio.fail_after(60):
                while not any(isinstance(e, BargeIn) for _, e in events):
                    await anyio.sleep(0.02)
            await anyio.sleep(0.5)
            group.cancel_scope.cancel()

    barge_time = next(t for t, e in events if isinstance(e, BargeIn))
    # The interruption itself is a turn: its answer may start playing before the test ends.
    next_reply = next(
        (t for t, e in events if isinstance(e, AgentSpeechStarted) and t > barge_time),
        float("inf"),
    )
    late_speech = [t for t, voiced in frames if voiced and barge_time < t < next_reply]
    assert len(late_speech) <= 1, f"{len(late_speech)} speech frames after the barge-in"
    ended = next(e for _, e in events if isinstance(e, AgentSpeechEnded))
    assert ended.interrupted
    assert ended.heard_text and long_answer.startswith(ended.heard_text)
    assert ended.heard_text != long_answer
    answers = [m for m in runner.history.messages if isinstance(m, AssistantMessage)]
    assert answers[0].interrupted
    assert answers[0].content == ended.heard_text


@pytest.mark.requires("local_model")
async def test_a_whole_spoken_weather_turn_on_the_offline_model(
    speech: Speech, spoken: Any
) -> None:
    from llmrtc.llm.default import open_default_provider

    async with open_default_provider() as llm:
        runner = TurnRunner(
            llm,
            ToolExecutor(ToolRegistry([lookupWeather])),
            system_prompt="You are a voice assistant. Answer in one short sentence.",
        )
        question = spoken(
            "What is the weather in Tokyo?", sample_rate=48000, lead_silence=0.3, trail_silence=1
        )
        seen: list[Any] = []
        async with (
            VoiceLoop(runner, stt=speech.stt, tts=speech.tts, vad=speech.vad) as loop,
            anyio.create_task_group() as group,
        ):

            async def watch() -> None:
                seen.extend(await record(loop, AgentSpeechEnded, timeout=240))

            group.start_soon(watch)
            await anyio.sleep(0.05)
            await push_speech(loop, question)
            with anyio.fail_after(260):
                while not any(isinstance(e, AgentSpeechEnded) for e in seen):
                    await anyio.sleep(0.1)
    calls = [e.call for e in seen if isinstance(e, ToolCallStarted)]
    assert [c.name for c in calls] == ["lookupWeather"]
    arguments = calls[0].arguments
    shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
    assert "tokyo" in shown.lower()
    completed = next(e for e in seen if isinstance(e, TurnCompleted))
    assert completed.stop_reason == "stop"
    assert {"sunny", "21"} & words(completed.text) or "twenty" in completed.text.lower()
    ended = next(e for e in seen if isinstance(e, AgentSpeechEnded))
    assert not ended.interrupted and ended.heard_text


async def test_a_model_reply_with_markdown_and_json_is_never_spoken_as_such(
    speech: Speech,
) -> None:
    reply = (
        '**Tokyo**: sunny. {"name": "lookupWeather", "arguments": {"city": "Tokyo"}}\n'
        '```json\n{"a": 1}\n```\nHave a nice day.'
    )
    llm = ScriptedLLM([ScriptedResponse(text=reply)])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")
    seen: list[Any] = []
    async with (
        VoiceLoop(runner, stt=speech.stt, tts=speech.tts, vad=speech.vad) as loop,
        anyio.create_task_group() as group,
    ):

        async def watch() -> None:
            seen.extend(await record(loop, AgentSpeechEnded, timeout=60))

        group.start_soon(watch)
        await anyio.sleep(0.05)
        await loop.send_text("How is Tokyo?")
        with anyio.fail_after(70):
            while not any(isinstance(e, AgentSpeechEnded) for e in seen):
                await anyio.sleep(0.05)
    ended = next(e for e in seen if isinstance(e, AgentSpeechEnded))
    for forbidden in ("{", "}", "*", "`", '"name"', "arguments"):
        assert forbidden not in ended.heard_text, ended.heard_text
    assert "sunny" in ended.heard_text and "nice day" in ended.heard_text
