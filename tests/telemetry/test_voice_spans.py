"""Voice spans in the turn's tree: the STT of an utterance is reported before its turn starts,
yet `llmrtc.stt` is a child of that turn (which starts when the STT started); TTS chunks stay
children of their turn even when they end after it; nothing is left open or pending."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import ToolCallFinished, TurnRunner
from llmrtc.telemetry._otel_voice import MAX_ENDED_TURNS, MAX_PENDING
from llmrtc.telemetry.events import (
    BargeInEvent,
    SessionEndEvent,
    SessionStartEvent,
    SpeechEndEvent,
    SpeechStartEvent,
    STTEndEvent,
    TTSEndEvent,
    TTSStartEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from llmrtc.telemetry.hooks import CompositeHooks
from llmrtc.telemetry.otel import OpenTelemetryHooks
from llmrtc.testing import (
    FakeSTT,
    FakeTTS,
    FakeVAD,
    InMemoryTelemetry,
    RecordingHooks,
    ScriptedLLM,
)

pytestmark = pytest.mark.anyio


@tool
async def lookup_weather(city: str) -> dict[str, Any]:
    """Weather for a city.

    Args:
        city: City name.
    """
    await anyio.sleep(0.01)
    return {"city": city, "temp": 21}


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def assert_nothing_left(hooks: OpenTelemetryHooks) -> None:
    voice = hooks._voice
    assert hooks._spans == {} and hooks._tts == {}
    assert voice._pending == {} and not voice._ended


async def test_a_voice_turn_has_stt_chat_tool_and_tts_spans_in_its_tree() -> None:
    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    llm = ScriptedLLM([[ToolCall("w1", "lookup_weather", {"city": "Tokyo"})], "Sunny, 21."])
    runner = TurnRunner(
        llm,
        ToolExecutor(ToolRegistry([lookup_weather])),
        system_prompt="You are a weather bot.",
        hooks=hooks,
        session_id="s1",
    )
    hooks.on_session_start(SessionStartEvent(session_id="s1", transport="webrtc"))
    # What a voice loop reports before the turn starts, with the id it gives the turn.
    hooks.on_speech_start(SpeechStartEvent(session_id="s1", turn_id="t1"))
    hooks.on_speech_end(SpeechEndEvent(session_id="s1", turn_id="t1", duration_s=1.4))
    hooks.on_stt_end(
        STTEndEvent(
            session_id="s1",
            turn_id="t1",
            text="weather in Tokyo",
            duration_s=0.3,
            audio_duration_s=1.9,
            model="whisper-base",
        )
    )
    assert telemetry.spans("llmrtc.stt") == []  # waits for its turn
    async for event in runner.run_turn("weather in Tokyo", turn_id="t1"):
        if isinstance(event, ToolCallFinished):
            hooks.on_tts_start(
                TTSStartEvent(
                    session_id="s1",
                    turn_id="t1",
                    text="Let me look.",
                    voice="joe",
                    time_to_first_audio_s=0.8,
                )
            )
            hooks.on_tts_end(TTSEndEvent(session_id="s1", turn_id="t1", audio_duration_s=0.7))
            hooks.on_barge_in(BargeInEvent(session_id="s1", turn_id="t1"))
    # The last sentence is synthesised after the turn's text is complete (speech lags).
    hooks.on_tts_start(TTSStartEvent(session_id="s1", turn_id="t1", text="Sunny.", voice="joe"))
    hooks.on_tts_end(TTSEndEvent(session_id="s1", turn_id="t1", interrupted=True, duration_s=0.2))
    hooks.on_session_end(SessionEndEvent(session_id="s1", reason="client left"))

    session, turn, stt = (
        telemetry.span(n) for n in ("llmrtc.session", "llmrtc.turn", "llmrtc.stt")
    )
    chats = telemetry.spans("chat scripted")
    tool_span = telemetry.span("execute_tool lookup_weather")
    first_tts, last_tts = telemetry.spans("llmrtc.tts")
    assert parent_id(turn) == span_id(session)
    for child in (stt, *chats, tool_span, first_tts, last_tts):
        assert parent_id(child) == span_id(turn), child.name
    assert len(chats) == 2
    # The turn starts when its STT started; the STT span keeps its exact times.
    assert turn.start_time == stt.start_time
    assert stt.end_time is not None and stt.start_time is not None
    assert stt.end_time - stt.start_time == pytest.approx(0.3e9, abs=1e6)
    assert turn.end_time is not None and turn.end_time <= last_tts.start_time  # type: ignore[operator]
    stt_attributes = dict(stt.attributes or {})
    assert stt_attributes == {
        "llmrtc.audio.duration": 1.9,
        "llmrtc.stt.model": "whisper-base",
        "llmrtc.speech.duration": 1.4,
    }  # the transcript is content: absent without consent
    first = dict(first_tts.attributes or {})
    assert first["llmrtc.tts.voice"] == "joe"
    assert first["llmrtc.voice.time_to_first_audio"] == 0.8
    assert first["llmrtc.tts.interrupted"] is False and "llmrtc.tts.text" not in first
    last = dict(last_tts.attributes or {})
    assert last["llmrtc.tts.interrupted"] is True and last["llmrtc.tts.duration"] == 0.2
    assert "llmrtc.incomplete" not in last
    (barge_in,) = [e for e in turn.events if e.name == "llmrtc.barge_in"]
    assert dict(barge_in.attributes or {}) == {
        "llmrtc.turn.id": "t1",
        "llmrtc.interruption.kind": "barge_in",
    }
    assert all(span.end_time is not None for span in telemetry.spans())
    assert_nothing_left(hooks)


async def test_a_voice_loop_with_fake_engines_puts_stt_and_tts_in_the_turn() -> None:
    from llmrtc.voice import VoiceLoop
    from llmrtc.voice.audio import split_frames
    from llmrtc.voice.events import AgentSpeechEnded

    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    recorded = RecordingHooks()
    both = CompositeHooks([hooks, recorded])
    runner = TurnRunner(
        ScriptedLLM(["It is sunny."]),
        ToolExecutor(ToolRegistry()),
        system_prompt="x",
        hooks=both,
        session_id="s1",
    )
    tts = FakeTTS()
    hooks.on_session_start(SessionStartEvent(session_id="s1"))
    async with VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), hooks=both) as loop:
        events = loop.events()
        for frame in split_frames(tts.render("Hello there") + bytes(2 * 24000), 24000):
            await loop.push_audio(frame)
        with anyio.fail_after(10):
            async for event in events:
                if isinstance(event, AgentSpeechEnded):
                    break
    hooks.on_session_end(SessionEndEvent(session_id="s1"))
    names = recorded.names()
    assert names.index("on_stt_end") < names.index("on_turn_start")  # STT comes first
    turn = telemetry.span("llmrtc.turn")
    stt = telemetry.span("llmrtc.stt")
    assert parent_id(stt) == span_id(turn) and turn.start_time == stt.start_time
    assert telemetry.spans("llmrtc.tts")
    for span in (*telemetry.spans("llmrtc.tts"), telemetry.span("chat scripted")):
        assert parent_id(span) == span_id(turn), span.name
    assert all(span.end_time is not None for span in telemetry.spans())
    assert_nothing_left(hooks)


def test_content_and_failures_of_stt_and_tts_spans() -> None:
    telemetry = InMemoryTelemetry(capture_content=True)
    hooks = telemetry.hooks
    hooks.on_stt_end(
        STTEndEvent(session_id="s", turn_id="t", duration_s=0.1, error_type="STTError")
    )
    hooks.on_turn_start(TurnStartEvent(turn_id="t", session_id="s"))
    hooks.on_tts_start(TTSStartEvent(session_id="s", turn_id="t", text="Hello and"))
    hooks.on_tts_end(TTSEndEvent(session_id="s", turn_id="t", text="Hello", interrupted=True))
    hooks.on_tts_start(TTSStartEvent(session_id="s", turn_id="t", text="Sorry."))
    hooks.on_tts_end(TTSEndEvent(session_id="s", turn_id="t", error_type="TTSError"))
    hooks.on_turn_end(TurnEndEvent(turn_id="t", session_id="s", stop_reason="error"))
    stt = telemetry.span("llmrtc.stt")
    assert stt.status.status_code is StatusCode.ERROR
    assert dict(stt.attributes or {})["error.type"] == "STTError"
    cut, failed = telemetry.spans("llmrtc.tts")
    assert dict(cut.attributes or {})["llmrtc.tts.text"] == "Hello"  # what was produced
    assert cut.status.status_code is not StatusCode.ERROR
    assert failed.status.status_code is StatusCode.ERROR
    assert dict(failed.attributes or {})["llmrtc.tts.text"] == "Sorry."


def test_stt_of_a_running_turn_and_without_a_turn_id() -> None:
    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    hooks.on_session_start(SessionStartEvent(session_id="s"))
    hooks.on_turn_start(TurnStartEvent(turn_id="t", session_id="s"))
    hooks.on_stt_end(STTEndEvent(session_id="s", turn_id="t", duration_s=0.1))
    hooks.on_stt_end(STTEndEvent(session_id="s", duration_s=0.1))
    turn_stt, session_stt = telemetry.spans("llmrtc.stt")  # both written at once
    hooks.on_turn_end(TurnEndEvent(turn_id="t", session_id="s", stop_reason="stop"))
    hooks.on_session_end(SessionEndEvent(session_id="s"))
    assert parent_id(turn_stt) == span_id(telemetry.span("llmrtc.turn"))
    assert parent_id(session_stt) == span_id(telemetry.span("llmrtc.session"))
    assert_nothing_left(hooks)


def test_pending_utterances_are_bounded_and_dropped_at_session_end() -> None:
    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    hooks.on_session_start(SessionStartEvent(session_id="s"))
    for index in range(MAX_PENDING + 2):  # utterances whose turns never start
        hooks.on_speech_end(SpeechEndEvent(session_id="s", turn_id=f"u{index}", duration_s=1))
        hooks.on_stt_end(STTEndEvent(session_id="s", turn_id=f"u{index}", duration_s=0.1))
    assert len(hooks._voice._pending["s"]) == MAX_PENDING
    dropped = telemetry.spans("llmrtc.stt")  # the oldest, written under the session
    assert len(dropped) == 2
    hooks.on_speech_end(SpeechEndEvent(session_id="s", turn_id="quiet", duration_s=1))
    hooks.on_session_end(SessionEndEvent(session_id="s"))
    session = telemetry.span("llmrtc.session")
    stts = telemetry.spans("llmrtc.stt")
    assert len(stts) == MAX_PENDING + 2  # speech without STT writes nothing
    assert all(parent_id(span) == span_id(session) for span in stts)
    assert_nothing_left(hooks)


def test_the_newest_turn_of_a_session_takes_its_own_utterance_only() -> None:
    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    hooks.on_stt_end(STTEndEvent(session_id="a", turn_id="t1", duration_s=0.2))
    hooks.on_stt_end(STTEndEvent(session_id="b", turn_id="t1", duration_s=0.2))
    hooks.on_turn_start(TurnStartEvent(turn_id="t2", session_id="a"))  # a typed turn
    hooks.on_turn_start(TurnStartEvent(turn_id="t1", session_id="b"))
    hooks.on_turn_end(TurnEndEvent(turn_id="t1", session_id="b", stop_reason="stop"))
    assert list(hooks._voice._pending) == ["a"]  # b's was taken; a's still waits for t1
    (stt,) = telemetry.spans("llmrtc.stt")
    assert parent_id(stt) == span_id(telemetry.span("llmrtc.turn"))
    for session in ("a", "b"):
        hooks.on_session_end(SessionEndEvent(session_id=session))
    assert len(telemetry.spans("llmrtc.stt")) == 2
    assert_nothing_left(hooks)


def test_ended_turns_are_remembered_for_late_tts_within_a_bound() -> None:
    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    for index in range(MAX_ENDED_TURNS + 5):
        hooks.on_turn_start(TurnStartEvent(turn_id=f"t{index}", session_id=None))
        hooks.on_turn_end(TurnEndEvent(turn_id=f"t{index}", stop_reason="stop"))
    assert len(hooks._voice._ended) == MAX_ENDED_TURNS
    hooks.on_tts_start(TTSStartEvent(turn_id=f"t{MAX_ENDED_TURNS + 4}"))
    hooks.on_tts_end(TTSEndEvent(turn_id=f"t{MAX_ENDED_TURNS + 4}"))
    hooks.on_tts_start(TTSStartEvent(turn_id="t0"))  # forgotten: no parent
    hooks.on_tts_end(TTSEndEvent(turn_id="t0"))
    late, forgotten = telemetry.spans("llmrtc.tts")
    last_turn = telemetry.spans("llmrtc.turn")[-1]
    assert parent_id(late) == span_id(last_turn)
    assert forgotten.parent is None


async def test_a_false_interruption_and_a_backchannel_are_recorded_with_their_kind() -> None:
    from llmrtc.voice import VoiceLoop
    from llmrtc.voice.audio import split_frames
    from llmrtc.voice.events import AgentSpeechEnded, AgentSpeechStarted, BargeIn

    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    runner = TurnRunner(
        ScriptedLLM(["One two three four five six seven eight nine ten."]),
        ToolExecutor(ToolRegistry()),
        system_prompt="x",
        hooks=hooks,
        session_id="s1",
    )
    tts = FakeTTS()
    hooks.on_session_start(SessionStartEvent(session_id="s1"))
    async with VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD(), hooks=hooks) as loop:
        events = loop.events()
        await loop.send_text("Count.")
        with anyio.fail_after(10):
            async for event in events:
                if isinstance(event, AgentSpeechStarted):
                    break
            for sound in ("[cough]", "uh-huh"):
                for frame in split_frames(tts.render(sound) + bytes(2 * 24000), 24000):
                    await loop.push_audio(frame)
                async for event in events:
                    if isinstance(event, BargeIn):
                        break
            async for event in events:
                if isinstance(event, AgentSpeechEnded):
                    break
    hooks.on_session_end(SessionEndEvent(session_id="s1"))
    # The model's turn ended before its speech did: the events are on the session span.
    turn, session = telemetry.span("llmrtc.turn"), telemetry.span("llmrtc.session")
    recorded = [
        dict(e.attributes or {})
        for span in (turn, session)
        for e in span.events
        if e.name == "llmrtc.barge_in"
    ]
    turn_id = dict(turn.attributes or {}).get("llmrtc.turn.id")
    assert recorded == [
        {"llmrtc.interruption.kind": "false", "llmrtc.turn.id": turn_id},
        {"llmrtc.interruption.kind": "backchannel", "llmrtc.turn.id": turn_id},
    ]
