"""The fake speech engines users test their bots with: exact durations, decodable speech,
and a loop whose VAD runs at another rate than its STT."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.tools.registry import ToolRegistry
from llmrtc.voice import VoiceLoop
from llmrtc.voice.audio import resample, split_frames
from llmrtc.voice.events import AgentSpeechEnded, Transcript
from llmrtc.voice.stt import STTError
from llmrtc.voice.tts import TTSError

pytestmark = pytest.mark.anyio


async def test_fake_tts_has_exact_durations_and_fake_stt_decodes_it() -> None:
    tts = FakeTTS(sample_rate=16000, seconds_per_char=0.02)
    text = "Book a table for two, please."
    pcm = b"".join([chunk async for chunk in tts.synthesize(text)])
    assert len(pcm) == 2 * round(0.02 * 16000) * len(text)
    stt = FakeSTT(tts=tts, sample_rate=16000)
    assert await stt.transcribe(pcm) == text
    loud = FakeTTS(sample_rate=24000)
    # through a real resampler, as a loop's input would be
    heard = await FakeSTT(tts=loud).transcribe(resample(loud.render(text), 24000, 16000))
    assert heard == text
    tts.fail_next()
    with pytest.raises(TTSError):
        async for _ in tts.synthesize("x"):
            pass
    assert tts.spoken == [text, "x"]


async def test_fake_stt_scripts_failures_and_fails_loudly_when_exhausted() -> None:
    stt = FakeSTT(["hello", STTError("down")])
    assert await stt.transcribe(b"\0\0") == "hello"
    with pytest.raises(STTError, match="down"):
        await stt.transcribe(b"\0\0")
    with pytest.raises(STTError, match="no scripted transcript"):
        await stt.transcribe(b"\0\0")
    assert len(stt.utterances) == 3


def test_fake_vad_is_an_energy_threshold() -> None:
    vad = FakeVAD(threshold=2000.0, sample_rate=8000, window_samples=256)
    stream = vad.stream()
    assert (vad.sample_rate, vad.window_samples) == (8000, 256)
    assert stream.speech_probability(b"\xe8\x03" * 256) == 0.0  # level 1000
    assert stream.speech_probability(b"\xa0\x0f" * 256) == 1.0  # level 4000


async def test_a_loop_whose_vad_rate_differs_from_the_stt_rate() -> None:
    tts = FakeTTS()
    vad = FakeVAD(sample_rate=8000, window_samples=256)  # the utterance is resampled for STT
    runner = TurnRunner(ScriptedLLM(["Hi!"]), ToolExecutor(ToolRegistry()), system_prompt="x")
    seen: list[Any] = []
    async with VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=vad) as loop:
        events = loop.events()
        for frame in split_frames(tts.render("Hello there") + bytes(2 * 24000), 24000):
            await loop.push_audio(frame)
        with anyio.fail_after(10):
            async for event in events:
                seen.append(event)
                if isinstance(event, AgentSpeechEnded):
                    break
    assert Transcript("Hello there") in seen
