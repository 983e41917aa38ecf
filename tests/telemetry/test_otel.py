"""OpenTelemetryHooks with the SDK's in-memory exporter and metric reader: exact spans,
attributes, statuses and metric points; content absent by default; masking always."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from llmrtc import (
    ToolCall,
    ToolContext,
    ToolExecutor,
    ToolRegistry,
    tool,
)
from llmrtc.telemetry.events import (
    BargeInEvent,
    ErrorEvent,
    LLMEndEvent,
    LLMFirstTokenEvent,
    LLMStartEvent,
    SessionEndEvent,
    SessionStartEvent,
    STTEndEvent,
    TransitionEvent,
    TTSEndEvent,
    TTSStartEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from llmrtc.testing import InMemoryTelemetry, abort_after

pytestmark = pytest.mark.anyio


@pytest.fixture
def telemetry() -> InMemoryTelemetry:
    return InMemoryTelemetry()


@tool
async def lookup_weather(city: str, units: str = "celsius") -> dict[str, Any]:
    """Weather for a city.

    Args:
        city: City name.
        units: celsius or fahrenheit.
    """
    await anyio.sleep(0.01)
    return {"city": city, "temp": 21}


@tool(timeout=0.05)
async def slow_report(topic: str) -> str:
    """Takes too long."""
    await anyio.sleep(5)
    return topic


@tool
async def hang(ctx: ToolContext) -> None:
    """Runs until aborted."""
    await anyio.sleep(10)


@tool(execution_policy="sequential")
async def write_log(line: str) -> None:
    """Sequential: waits for every earlier call of its batch."""


@tool
async def explode() -> None:
    """Raises."""
    raise ValueError("secret-bearing message 4111")


@tool(sensitive_fields=["card_number"])
async def charge(card_number: str, amount: float) -> dict[str, Any]:
    """Charge a card.

    Args:
        card_number: The card.
        amount: How much.
    """
    return {"charged": amount, "card_used": card_number, "note": f"paid with {card_number}"}


REGISTRY = ToolRegistry([lookup_weather, slow_report, hang, explode, charge, write_log])


async def run_mixed_batch(telemetry: InMemoryTelemetry) -> Any:
    executor = ToolExecutor(REGISTRY, hooks=telemetry.hooks, max_concurrency=4)
    calls = [
        ToolCall("w1", "lookup_weather", {"city": "Tokyo"}),
        ToolCall("w2", "lookup_weather", {"city": "Oslo"}),
        ToolCall("t1", "slow_report", {"topic": "rain-topic"}),
        ToolCall("i1", "lookup_weather", {"city": "Lima", "units": 7, "extra": "kelvin-value"}),
        ToolCall("n1", "lookupWether", {"city": "Paris"}),
        ToolCall("e1", "explode"),
        ToolCall("a1", "hang"),
        ToolCall("q1", "write_log", {"line": "x"}),  # waits behind "hang": never runs
    ]
    with telemetry.tracer().start_as_current_span("caller") as caller:
        async with abort_after(0.3, "barge-in") as controller:
            results = await executor.execute(
                calls, session_id="s1", stage_id="weather", abort_signal=controller.signal
            )
    return caller, results


async def test_span_tree_attributes_and_statuses_of_a_mixed_batch(
    telemetry: InMemoryTelemetry,
) -> None:
    caller, results = await run_mixed_batch(telemetry)
    assert [r.status for r in results] == [
        "ok",
        "ok",
        "timeout",
        "invalid_arguments",
        "not_found",
        "error",
        "aborted",
        "aborted",
    ]
    tool_spans = [s for s in telemetry.spans() if s.name.startswith("execute_tool ")]
    assert len(tool_spans) == 8  # every call, also those that never ran
    caller_id = caller.get_span_context().span_id
    for span in tool_spans:
        assert span.parent is not None and span.parent.span_id == caller_id  # all siblings
        assert span.kind == SpanKind.INTERNAL
        assert span.attributes is not None
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.type"] == "function"
        assert span.attributes["gen_ai.conversation.id"] == "s1"
        assert span.attributes["llmrtc.stage.id"] == "weather"
    by_call = {s.attributes["gen_ai.tool.call.id"]: s for s in tool_spans}  # type: ignore[index]
    expected = {
        "w1": ("lookup_weather", "ok", StatusCode.UNSET, None),
        "w2": ("lookup_weather", "ok", StatusCode.UNSET, None),
        "t1": ("slow_report", "timeout", StatusCode.ERROR, "timeout"),
        "i1": ("lookup_weather", "invalid_arguments", StatusCode.ERROR, "invalid_arguments"),
        "n1": ("lookupWether", "not_found", StatusCode.ERROR, "not_found"),
        "e1": ("explode", "error", StatusCode.ERROR, "ValueError"),
        "a1": ("hang", "aborted", StatusCode.UNSET, None),
        "q1": ("write_log", "aborted", StatusCode.UNSET, None),
    }
    for call_id, (name, status, code, error_type) in expected.items():
        span = by_call[call_id]
        attributes = dict(span.attributes or {})
        assert span.name == f"execute_tool {name}"
        assert attributes["gen_ai.tool.name"] == name
        assert attributes["llmrtc.tool.status"] == status
        assert span.status.status_code == code, call_id
        assert attributes.get("error.type") == error_type, call_id
    assert by_call["w1"].attributes["gen_ai.tool.description"] == "Weather for a city."  # type: ignore[index]
    # The two parallel weather calls overlapped in time: siblings, not one inside the other.
    w1, w2 = by_call["w1"], by_call["w2"]
    assert w1.start_time < w2.end_time and w2.start_time < w1.end_time  # type: ignore[operator]


async def test_no_content_anywhere_by_default(telemetry: InMemoryTelemetry) -> None:
    await run_mixed_batch(telemetry)
    dumped = json.dumps(
        [
            {
                "attributes": dict(s.attributes or {}),
                "status": s.status.description,
                # A traceback is code, not content: its line numbers ("line 221") would
                # match the digits looked for below.
                "events": [
                    {k: v for k, v in (e.attributes or {}).items() if k != "exception.stacktrace"}
                    for e in s.events
                ],
            }
            for s in telemetry.spans()
        ]
    )
    for value in ("Tokyo", "Oslo", "rain-topic", "kelvin-value", "Paris", "4111", "21"):
        assert value not in dumped, value
    for span in telemetry.spans():
        assert "gen_ai.tool.call.arguments" not in (span.attributes or {})
        assert "gen_ai.tool.call.result" not in (span.attributes or {})


async def test_tool_metrics(telemetry: InMemoryTelemetry) -> None:
    await run_mixed_batch(telemetry)
    calls = {
        (p.attributes["gen_ai.tool.name"], p.attributes["llmrtc.tool.status"]): p.value
        for p in telemetry.points("llmrtc.tool.calls")
    }
    assert calls == {
        ("lookup_weather", "ok"): 2,
        ("slow_report", "timeout"): 1,
        ("lookup_weather", "invalid_arguments"): 1,
        ("_unknown", "not_found"): 1,  # a name the model invented: one bucket for all
        ("explode", "error"): 1,
        ("hang", "aborted"): 1,
        ("write_log", "aborted"): 1,
    }
    durations = {
        (p.attributes["gen_ai.tool.name"], p.attributes["llmrtc.tool.status"]): p
        for p in telemetry.points("llmrtc.tool.call.duration")
    }
    # Only calls whose handler ran have a duration: 2 weather, the timeout, the error, 1 hang.
    assert {k: p.count for k, p in durations.items()} == {
        ("lookup_weather", "ok"): 2,
        ("slow_report", "timeout"): 1,
        ("explode", "error"): 1,
        ("hang", "aborted"): 1,
    }
    assert durations[("slow_report", "timeout")].sum >= 0.04
    in_flight = {
        p.attributes["gen_ai.tool.name"]: p.value for p in telemetry.points("llmrtc.tool.in_flight")
    }
    assert set(in_flight.values()) == {0}
    queue = {
        p.attributes["gen_ai.tool.name"]: p.count
        for p in telemetry.points("llmrtc.tool.queue.duration")
    }
    assert queue == {"lookup_weather": 2, "slow_report": 1, "explode": 1, "hang": 1}


async def test_content_with_consent_and_masking_by_key_and_value() -> None:
    telemetry = InMemoryTelemetry(capture_content=True)
    executor = ToolExecutor(REGISTRY, hooks=telemetry.hooks)
    card = "4111111111111111"
    await executor.execute(
        [
            ToolCall("c1", "charge", json.dumps({"card_number": card, "amount": 9.5})),
            ToolCall("w1", "lookup_weather", {"city": "Tokyo"}),
            ToolCall("i1", "lookup_weather", {"city": "Lima", "units": 7}),
        ]
    )
    spans = {s.attributes["gen_ai.tool.call.id"]: s for s in telemetry.spans()}  # type: ignore[index]
    charge_attrs = dict(spans["c1"].attributes or {})
    assert card not in json.dumps(charge_attrs)
    assert json.loads(str(charge_attrs["gen_ai.tool.call.arguments"])) == {
        "card_number": "***",
        "amount": 9.5,
    }
    assert json.loads(str(charge_attrs["gen_ai.tool.call.result"])) == {
        "charged": 9.5,
        "card_used": "***",  # echoed under another key: masked by value
        "note": "paid with ***",  # inside text: masked too
    }
    weather = dict(spans["w1"].attributes or {})
    assert json.loads(str(weather["gen_ai.tool.call.arguments"])) == {"city": "Tokyo"}
    assert json.loads(str(weather["gen_ai.tool.call.result"])) == {"city": "Tokyo", "temp": 21}
    assert "units: 7 is not of type 'string'" in (spans["i1"].status.description or "")


def test_no_global_provider_is_installed() -> None:
    before = trace.get_tracer_provider()
    InMemoryTelemetry()
    assert trace.get_tracer_provider() is before


async def test_turn_chat_transition_voice_and_session_spans(telemetry: InMemoryTelemetry) -> None:
    hooks = telemetry.hooks
    hooks.on_session_start(SessionStartEvent(session_id="s1", transport="webrtc"))
    hooks.on_turn_start(
        TurnStartEvent(turn_id="t1", session_id="s1", stage_id="greet", user_text="hi")
    )
    hooks.on_stt_end(
        STTEndEvent(
            session_id="s1",
            turn_id="t1",
            text="hi",
            duration_s=0.4,
            audio_duration_s=1.2,
            model="whisper-base",
        )
    )
    hooks.on_llm_start(
        LLMStartEvent(
            request_id="r1",
            model="qwen",
            session_id="s1",
            turn_id="t1",
            provider="llmrtc.local",
            tool_names=("lookup_weather",),
            temperature=0.0,
        )
    )
    hooks.on_llm_first_token(LLMFirstTokenEvent(request_id="r1", model="qwen", latency_s=0.3))
    hooks.on_llm_end(
        LLMEndEvent(
            request_id="r1",
            model="qwen",
            provider="llmrtc.local",
            stop_reason="tool_calls",
            input_tokens=120,
            output_tokens=18,
            duration_s=0.7,
        )
    )
    executor = ToolExecutor(REGISTRY, hooks=hooks)
    await executor.execute(
        [ToolCall("w1", "lookup_weather", {"city": "Tokyo"})], session_id="s1", turn_id="t1"
    )
    hooks.on_transition(
        TransitionEvent(
            from_stage="greet",
            to_stage="weather",
            transition_id="to-weather",
            session_id="s1",
            turn_id="t1",
            condition="llm_decision",
            reason="asked about weather",
        )
    )
    hooks.on_tts_start(
        TTSStartEvent(
            session_id="s1",
            turn_id="t1",
            text="It is sunny",
            voice="joe",
            time_to_first_audio_s=1.9,
        )
    )
    hooks.on_barge_in(BargeInEvent(session_id="s1", turn_id="t1"))
    hooks.on_tts_end(TTSEndEvent(session_id="s1", turn_id="t1", duration_s=0.5, interrupted=True))
    hooks.on_error(
        ErrorEvent(
            error=RuntimeError("tts crashed on 'secret'"),
            where="tts",
            session_id="s1",
            turn_id="t1",
        )
    )
    hooks.on_turn_end(
        TurnEndEvent(
            turn_id="t1",
            session_id="s1",
            stop_reason="aborted",
            duration_s=2.5,
            input_tokens=120,
            output_tokens=18,
            tool_calls=1,
        )
    )
    hooks.on_session_end(SessionEndEvent(session_id="s1", duration_s=30, reason="client left"))

    session, turn = telemetry.span("llmrtc.session"), telemetry.span("llmrtc.turn")
    chat, tool_span = telemetry.span("chat qwen"), telemetry.span("execute_tool lookup_weather")
    stt, tts = telemetry.span("llmrtc.stt"), telemetry.span("llmrtc.tts")
    assert session.parent is None and session.kind == SpanKind.SERVER
    assert turn.parent.span_id == session.context.span_id  # type: ignore[union-attr]
    for child in (chat, tool_span, stt, tts):
        assert child.parent.span_id == turn.context.span_id, child.name  # type: ignore[union-attr]
    assert chat.kind == SpanKind.CLIENT
    chat_attrs = dict(chat.attributes or {})
    assert chat_attrs["gen_ai.operation.name"] == "chat"
    assert chat_attrs["gen_ai.provider.name"] == "llmrtc.local"
    assert chat_attrs["gen_ai.usage.input_tokens"] == 120
    assert chat_attrs["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert chat_attrs["llmrtc.llm.time_to_first_token"] == 0.3
    assert stt.end_time - stt.start_time >= 0.39e9  # type: ignore[operator]
    transition = next(e for e in turn.events if e.name == "llmrtc.stage_transition")
    assert dict(transition.attributes or {}) == {
        "llmrtc.stage.from": "greet",
        "llmrtc.stage.to": "weather",
        "llmrtc.transition.id": "to-weather",
        "llmrtc.transition.condition": "llm_decision",
    }  # the model's reason is content: absent without consent
    assert any(e.name == "llmrtc.barge_in" for e in turn.events)
    error = next(e for e in turn.events if e.name == "exception")
    assert dict(error.attributes or {}) == {
        "exception.type": "RuntimeError",
        "llmrtc.error.where": "tts",
    }
    assert dict(tts.attributes or {})["llmrtc.tts.interrupted"] is True
    for span in telemetry.spans():  # transcripts and texts are content
        assert "hi" not in (span.attributes or {}).values()
        assert "llmrtc.tts.text" not in (span.attributes or {})
    tokens = {
        p.attributes["gen_ai.token.type"]: p.sum
        for p in telemetry.points("gen_ai.client.token.usage")
    }
    assert tokens == {"input": 120, "output": 18}
    assert telemetry.points("gen_ai.client.operation.duration")[0].count == 1
    assert telemetry.points("llmrtc.turn.duration")[0].attributes == {
        "llmrtc.turn.stop_reason": "aborted"
    }
    assert telemetry.points("llmrtc.voice.time_to_first_audio")[0].sum == pytest.approx(1.9)
    assert telemetry.points("llmrtc.sessions.active")[0].value == 0
    transitions = telemetry.points("llmrtc.playbook.transitions")
    assert [(p.attributes, p.value) for p in transitions] == [
        ({"llmrtc.stage.from": "greet", "llmrtc.stage.to": "weather"}, 1)
    ]
