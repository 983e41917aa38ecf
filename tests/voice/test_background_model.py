"""Background calls on the real offline speech stack (Silero, Whisper base, Smart Turn, piper),
fed in real time: a spoken barge-in over the agent does not stop a background booking, and the
booking's result, landing while the user speaks, is never said over them: it goes to the model
with the user's turn, which answers both."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import SystemMessage, ToolMessage, UserMessage
from llmrtc.llm.provider import collect_response
from llmrtc.llm.types import LLMDone, LLMEvent, LLMRequest, LLMResponse, LLMTextDelta, LLMToolCall
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import RecordingHooks
from llmrtc.tools import ToolContext, ToolRegistry, tool
from llmrtc.tools.calls import ToolCall
from llmrtc.voice import (
    AgentSpeechStarted,
    BargeIn,
    Speech,
    UserSpeechEnded,
    UserSpeechStarted,
    VoiceConfig,
    VoiceLoop,
    open_default_speech,
)
from llmrtc.voice.audio import resample, split_frames
from tests._requirements import require

pytestmark = [pytest.mark.anyio, pytest.mark.requires("voice_model", "turn_model")]

RATE = 16000
LONG = (
    "I am booking your table at Nopa now. While the restaurant confirms, let me tell you "
    "that Nopa serves wood fired food, that its bread is baked every morning, and that its "
    "dining room is one of the loudest and happiest in the city."
)


@pytest.fixture
async def speech(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Speech]:
    monkeypatch.setenv("LLMRTC_SPEECH", "offline")
    require("voice_model", "turn_model")
    async with open_default_speech() as opened:
        yield opened


def _late_note(request: LLMRequest) -> bool:
    return any(isinstance(m, SystemMessage) and "b1" in m.content for m in request.messages)


class BookingLLM:
    """A model that books on the first request, talks at length while the booking runs, and
    answers the user's next words (mentioning the booking if its late result is in the
    request); records every request."""

    model = "booking"
    provider_name = "test.booking"

    def __init__(self) -> None:
        self.requests: list[LLMRequest] = []

    async def stream(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[LLMEvent]:
        self.requests.append(request)
        signal = abort_signal or AbortController().signal
        last = request.messages[-1]
        if len(self.requests) == 1:
            yield LLMToolCall(ToolCall("b1", "book_table", {"restaurant": "Nopa"}))
            yield LLMDone("tool_calls")
            return
        if isinstance(last, ToolMessage):
            text = LONG
        elif isinstance(last, UserMessage) or isinstance(request.messages[-2], UserMessage):
            text = "It is noon." + (" And your table is booked." if _late_note(request) else "")
        else:  # an update turn: the late result follows the agent's last words
            text = "Your table at Nopa is booked."
        for word in text.split(" "):
            if not await signal.sleep(0.02):
                yield LLMDone("aborted")
                return
            yield LLMTextDelta(word + " ")
        yield LLMDone("stop")

    async def complete(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> LLMResponse:
        return await collect_response(self.stream(request, abort_signal=abort_signal))


async def said(speech: Speech, text: str) -> bytes:
    """`text` in piper's voice at 16 kHz, without its leading and trailing silence."""
    import numpy as np

    pcm = b"".join([chunk async for chunk in speech.tts.synthesize(text)])
    pcm = resample(pcm, speech.tts.sample_rate, RATE)
    loud = np.nonzero(np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.int32)) > 300)[0]
    return pcm[2 * loud[0] : 2 * (loud[-1] + 1)]


def silence(seconds: float) -> bytes:
    return bytes(2 * round(seconds * RATE))


async def test_a_spoken_barge_in_leaves_the_booking_running_and_its_result_waits_for_the_user(
    speech: Speech,
) -> None:
    release = anyio.Event()
    signals: list[AbortSignal] = []

    @tool(background=True, timeout=120.0)
    async def book_table(restaurant: str, ctx: ToolContext) -> dict[str, Any]:
        """Book a table."""
        signals.append(ctx.abort_signal)
        await release.wait()
        return {"confirmed": True, "reference": "A12"}

    llm = BookingLLM()
    hooks = RecordingHooks()
    runner = TurnRunner(
        llm, ToolExecutor(ToolRegistry([book_table]), hooks=hooks), system_prompt="Be brief."
    )
    question = await said(speech, "Sorry, what time is it?")
    seen: list[tuple[float, Any]] = []
    config = VoiceConfig(filler_text="")
    async with VoiceLoop(
        runner, stt=speech.stt, tts=speech.tts, vad=speech.vad, config=config
    ) as loop:

        async def watch() -> None:
            async for event in loop.events():
                seen.append((time.monotonic(), event))

        async def feed(pcm: bytes) -> None:
            started = time.monotonic()
            for pushed, frame in enumerate(split_frames(pcm, RATE), 1):
                await loop.push_audio(frame)
                await anyio.sleep(max(0.0, started + pushed * 0.02 - time.monotonic()))

        def has(kind: type, count: int = 1) -> bool:
            return sum(isinstance(e, kind) for _, e in seen) >= count

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            await loop.send_text("Book me a table at Nopa")
            with anyio.fail_after(60):
                while not has(AgentSpeechStarted):
                    await feed(silence(0.1))
            await feed(silence(1.0))  # the long answer plays
            # The user talks over it; the booking lands while they speak.
            half = len(question) // 2 // 2 * 2
            await feed(question[:half])
            release.set()
            await feed(question[half:] + silence(2.5))
            with anyio.fail_after(90):
                while not any(_late_note(r) for r in llm.requests) or not has(
                    AgentSpeechStarted, 2
                ):
                    await feed(silence(0.1))
            await feed(silence(2.0))  # no update turn follows: the user's turn carried it
            group.cancel_scope.cancel()

    assert has(BargeIn) and any(e.kind == "barge_in" for _, e in seen if isinstance(e, BargeIn))
    assert not signals[0].aborted  # the barge-in did not reach the background call
    ends = [e for e in hooks.of(ToolEndEvent) if e.call_id == "b1"]
    assert [e.status for e in ends] == ["ok"]  # one final result
    carried = [r for r in llm.requests if _late_note(r)]
    # The first request that saw the result answered the user's words (the note after them).
    assert isinstance(carried[0].messages[-2], UserMessage), carried[0].messages[-2:]
    assert _late_note(carried[0]) and "b1" in carried[0].messages[-1].content
    # No update turn followed (its request would end with the note after the agent's words).
    assert all(isinstance(r.messages[-2], UserMessage) for r in carried), carried
    # Nothing was said over the user: the answer started after their speech ended.
    user_started = [t for t, e in seen if isinstance(e, UserSpeechStarted)][-1]
    user_ended = [t for t, e in seen if isinstance(e, UserSpeechEnded)][-1]
    answer = [t for t, e in seen if isinstance(e, AgentSpeechStarted) and t > user_started]
    assert answer and answer[0] > user_ended
    notes = [m for m in loop.history.messages if isinstance(m, SystemMessage) and "b1" in m.content]
    assert len(notes) == 1
