"""Preemptive generation on the real offline stack (Silero, Whisper base, Smart Turn, piper),
fed in real time: at a mid-sentence pause the answer starts on the words so far; the user goes
on, so that answer is dropped. It never ran its tool call and never made a sound: only the
turn on the whole sentence ran a tool and spoke."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import ToolMessage, UserMessage
from llmrtc.llm.provider import collect_response
from llmrtc.llm.types import LLMDone, LLMEvent, LLMRequest, LLMResponse, LLMTextDelta, LLMToolCall
from llmrtc.tools import ToolRegistry, tool
from llmrtc.tools.calls import ToolCall
from llmrtc.voice import (
    AgentSpeechStarted,
    AudioFrame,
    Speech,
    Transcript,
    UserSpeechEnded,
    VoiceConfig,
    VoiceLoop,
    open_default_speech,
)
from llmrtc.voice.audio import resample, split_frames
from tests._requirements import require

pytestmark = [pytest.mark.anyio, pytest.mark.requires("voice_model", "turn_model")]

RATE = 16000


@pytest.fixture
async def speech(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Speech]:
    monkeypatch.setenv("LLMRTC_SPEECH", "offline")
    require("voice_model", "turn_model")
    async with open_default_speech() as opened:
        yield opened


class CityLLM:
    """Answers any question by looking up its last word as a city ("Checking X." then a call),
    and a tool result with "It is sunny in X."; records every request, early ones included."""

    model = "city"
    provider_name = "test.city"

    def __init__(self) -> None:
        self.asked: list[tuple[float, str]] = []

    async def stream(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[LLMEvent]:
        signal = abort_signal or AbortController().signal
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            yield LLMTextDelta(f"It is sunny in {last.content.strip(chr(34))}.")
            yield LLMDone("stop")
            return
        assert isinstance(last, UserMessage)
        self.asked.append((time.monotonic(), last.content))
        words = re.findall(r"[A-Za-z]+", last.content)
        city = words[-1] if words else "nowhere"
        # Streamed slowly, like a model on two cores: a drop lands mid-answer.
        for piece in ("Checking", f" {city}."):
            if not await signal.sleep(0.1):
                yield LLMDone("aborted")
                return
            yield LLMTextDelta(piece)
        yield LLMToolCall(ToolCall(f"c{len(self.asked)}", "lookup_weather", {"city": city}))
        yield LLMDone("tool_calls")

    async def complete(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> LLMResponse:
        return await collect_response(self.stream(request, abort_signal=abort_signal))


class SpokenTTS:
    """The real TTS, remembering every text it was asked to say."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sample_rate = inner.sample_rate
        self.name = inner.name
        self.texts: list[str] = []

    async def synthesize(self, text: str) -> AsyncIterator[bytes]:
        self.texts.append(text)
        async for chunk in self.inner.synthesize(text):
            yield chunk


async def said(speech: Speech, text: str) -> bytes:
    """`text` in piper's voice at 16 kHz, without its leading and trailing silence."""
    import numpy as np

    pcm = b"".join([chunk async for chunk in speech.tts.synthesize(text)])
    pcm = resample(pcm, speech.tts.sample_rate, RATE)
    loud = np.nonzero(np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.int32)) > 300)[0]
    return pcm[2 * loud[0] : 2 * (loud[-1] + 1)]


def silence(seconds: float) -> bytes:
    return bytes(2 * round(seconds * RATE))


async def test_an_answer_started_at_a_pause_the_user_spoke_on_never_ran_or_sounded(
    speech: Speech,
) -> None:
    runs: list[str] = []

    @tool
    async def lookup_weather(city: str) -> str:
        """The weather in a city."""
        runs.append(city)
        return city

    llm = CityLLM()
    runner = TurnRunner(
        llm, ToolExecutor(ToolRegistry([lookup_weather])), system_prompt="Be brief."
    )
    tts = SpokenTTS(speech.tts)
    # The fixed fallback longer than the pause (an option of the test, as in
    # test_turn_detector_model): the claim is about the early answer, not the fallback.
    config = VoiceConfig(end_of_speech_silence=1.5)
    head, rest = await said(speech, "What is the weather like in"), await said(speech, "Paris?")
    seen: list[tuple[float, Any]] = []
    voiced_out: list[float] = []
    async with VoiceLoop(runner, stt=speech.stt, tts=tts, vad=speech.vad, config=config) as loop:

        async def watch() -> None:
            async for event in loop.events():
                seen.append((time.monotonic(), event))

        async def listen() -> None:
            async for frame in loop.audio_out():
                if any(frame.pcm):
                    voiced_out.append(time.monotonic())

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            group.start_soon(listen)
            await anyio.sleep(0.05)
            pcm = silence(0.3) + head + silence(1.2) + rest + silence(3.0)
            started = time.monotonic()
            for pushed, frame in enumerate(split_frames(pcm, RATE), 1):
                await loop.push_audio(frame)
                await anyio.sleep(max(0.0, started + pushed * 0.02 - time.monotonic()))
            with anyio.fail_after(60):
                while not any(isinstance(e, AgentSpeechStarted) for _, e in seen) or runs == []:
                    await loop.push_audio(AudioFrame(silence(0.02), sample_rate=RATE))
                    await anyio.sleep(0.02)
                while len(tts.texts) < 2:
                    await anyio.sleep(0.05)
            group.cancel_scope.cancel()

    ends = [e for _, e in seen if isinstance(e, UserSpeechEnded)]
    assert len(ends) == 1, ends  # one turn: the pause did not end it
    final = next(e.text for _, e in seen if isinstance(e, Transcript))
    final_city = re.findall(r"[A-Za-z]+", final)[-1]
    # The answer was started at the pause, on the words so far, before the user went on.
    early = [(t, text) for t, text in llm.asked if text != final]
    assert early, (llm.asked, final)
    early_city = re.findall(r"[A-Za-z]+", early[0][1])[-1]
    assert early_city != final_city
    # Only the turn on the whole sentence ran a tool and made a sound.
    assert runs == [final_city]
    assert not any(f"Checking {early_city}" in text for text in tts.texts), tts.texts
    transcript_at = next(t for t, e in seen if isinstance(e, Transcript))
    assert voiced_out and min(voiced_out) > transcript_at
