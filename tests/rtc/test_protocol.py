"""The wire protocol: every message round-trips, every bad input gets its stable code and a
message that says what, where and what is allowed, and every loop event maps to its message."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from llmrtc.agent.events import (
    StageChanged,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
)
from llmrtc.rtc.events import (
    MODEL_ERROR_TEXT,
    STT_ERROR_TEXT,
    TTS_ERROR_TEXT,
    TURN_ERROR_TEXT,
    wire_event,
)
from llmrtc.rtc.protocol import (
    CLOSE_CODES,
    ERROR_CODES,
    MAX_FRAME_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_REASON_CHARS,
    MAX_TEXT_CHARS,
    PROTOCOL_VERSION,
    AgentSpeechEndedMessage,
    AgentSpeechStartedMessage,
    AnswerMessage,
    ApprovalRequestedMessage,
    ApproveMessage,
    AssistantTextMessage,
    BargeInMessage,
    ClientMessage,
    EndMessage,
    ErrorCode,
    ErrorMessage,
    IceCandidate,
    IceMessage,
    InterruptionMessage,
    InterruptMessage,
    OfferMessage,
    PingMessage,
    PongMessage,
    ProtocolError,
    ResumeMessage,
    ServerMessage,
    SessionMessage,
    SpeechEndedMessage,
    SpeechStartedMessage,
    StageChangedMessage,
    TextMessage,
    ToolCallFinishedMessage,
    ToolCallProgressMessage,
    ToolCallStartedMessage,
    TranscriptMessage,
    TurnCompletedMessage,
    error_message,
    parse_client_message,
    parse_server_message,
    to_wire,
)
from llmrtc.tools.calls import ToolCall, ToolCallResult
from llmrtc.voice.events import (
    AgentSpeechEnded,
    AgentSpeechStarted,
    BargeIn,
    LoopEvent,
    SpeechError,
    Transcript,
    UserSpeechEnded,
    UserSpeechStarted,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
SDP = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 111\r\n"
CANDIDATE = IceCandidate(
    candidate="candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host",
    sdpMid="0",
    sdpMLineIndex=0,
    usernameFragment="abcd",
)

CLIENT_EXAMPLES: list[BaseModel] = [
    OfferMessage(sdp=SDP),
    OfferMessage(sdp=SDP, protocol=PROTOCOL_VERSION),
    IceMessage(candidate=CANDIDATE),
    IceMessage(candidate=None),
    TextMessage(text="What is the weather in Tokyo?"),
    InterruptMessage(),
    EndMessage(),
    ResumeMessage(session_id="s-1_A", token="t0k-EN_x"),
    PingMessage(id="42"),
    ApproveMessage(call_id="c3", approved=True),
    ApproveMessage(call_id="c3", approved=False, reason="Not that card"),
]
SERVER_EXAMPLES: list[BaseModel] = [
    SessionMessage(session_id="s1", resume_token="tok", resumed=True),
    AnswerMessage(sdp=SDP),
    IceMessage(candidate=CANDIDATE),
    SpeechStartedMessage(),
    SpeechEndedMessage(),
    TranscriptMessage(text="what is the weather", final=False),
    AssistantTextMessage(delta="It is sunny "),
    ToolCallStartedMessage(call_id="c1", name="get_weather"),
    ToolCallStartedMessage(call_id="c2", name="bookTable", background=True),
    ToolCallProgressMessage(call_id="c2", name="bookTable", message="Checking availability"),
    ToolCallFinishedMessage(call_id="c1", name="get_weather", status="timeout", duration_ms=12.5),
    ApprovalRequestedMessage(
        call_id="c3", name="refund", arguments={"order_id": "A1", "card": "***"}
    ),
    ToolCallFinishedMessage(call_id="c3", name="refund", status="denied", duration_ms=0),
    ToolCallFinishedMessage(call_id="c4", name="refund", status="duplicate", duration_ms=0),
    ToolCallFinishedMessage(call_id="c5", name="refund", status="unavailable", duration_ms=0),
    StageChangedMessage(from_stage="greet", to_stage="weather"),
    AgentSpeechStartedMessage(text="It is sunny."),
    AgentSpeechEndedMessage(interrupted=True, heard_text="It is"),
    InterruptionMessage(heard_text="It is"),
    InterruptionMessage(kind="false", heard_text="It is sunny"),
    InterruptionMessage(kind="backchannel"),
    BargeInMessage(heard_text="It is"),
    TurnCompletedMessage(text="It is sunny.", stop_reason="aborted"),
    ErrorMessage(code="server_full", message="full"),
    PongMessage(id="42"),
]


def _union_members(union: object) -> set[type]:
    return set(typing.get_args(typing.get_args(union)[0]))


def test_the_examples_cover_every_message_type() -> None:
    assert {type(m) for m in CLIENT_EXAMPLES} == _union_members(ClientMessage)
    assert {type(m) for m in SERVER_EXAMPLES} == _union_members(ServerMessage)


@pytest.mark.parametrize("message", CLIENT_EXAMPLES, ids=lambda m: m.type)  # type: ignore[attr-defined]
def test_client_messages_round_trip(message: BaseModel) -> None:
    wire = to_wire(message)
    assert parse_client_message(wire) == message
    assert parse_client_message(wire.encode()) == message  # a binary frame of UTF-8 JSON too


@pytest.mark.parametrize("message", SERVER_EXAMPLES, ids=lambda m: m.type)  # type: ignore[attr-defined]
def test_server_messages_round_trip(message: BaseModel) -> None:
    assert parse_server_message(to_wire(message)) == message


def test_wire_form_is_compact_json_with_the_type_and_every_field() -> None:
    assert to_wire(InterruptMessage()) == '{"type":"interrupt"}'
    assert to_wire(IceMessage(candidate=None)) == '{"type":"ice","candidate":null}'
    assert json.loads(to_wire(SessionMessage(session_id="s", resume_token="t"))) == {
        "type": "session",
        "session_id": "s",
        "resume_token": "t",
        "protocol": PROTOCOL_VERSION,
        "resumed": False,
        "stage": None,
        "history": [],
    }


def test_a_browser_candidate_parses_with_fields_it_may_add() -> None:
    raw = json.dumps(
        {
            "type": "ice",
            "candidate": {**CANDIDATE.model_dump(), "relayProtocol": "udp"},
        }
    )
    message = parse_client_message(raw)
    assert isinstance(message, IceMessage)
    assert message.candidate == CANDIDATE
    assert not message.end_of_candidates


@pytest.mark.parametrize("candidate", [None, {"candidate": "", "sdpMid": "0"}])
def test_null_or_empty_candidate_ends_the_candidates(candidate: object) -> None:
    message = parse_client_message(json.dumps({"type": "ice", "candidate": candidate}))
    assert isinstance(message, IceMessage)
    assert message.end_of_candidates


def test_a_text_at_the_limit_is_accepted() -> None:
    message = parse_client_message(to_wire(TextMessage(text="é" * MAX_TEXT_CHARS)))
    assert isinstance(message, TextMessage)
    assert len(message.text) == MAX_TEXT_CHARS


BAD_INPUTS: list[tuple[str, str | bytes, ErrorCode, tuple[str, ...]]] = [
    (
        "truncated JSON",
        '{"type": "text", "text": "hi"',
        "invalid_json",
        ("not valid JSON", "line 1"),
    ),
    ("not JSON at all", "hello", "invalid_json", ("not valid JSON",)),
    ("empty", "", "invalid_json", ("not valid JSON",)),
    ("not UTF-8", b'{"type": "text", "text": "\xff"}', "invalid_json", ("not UTF-8", "offset 26")),
    ("deep nesting", "[" * 50_000, "invalid_json", ("nests too deeply",)),
    (
        "an integer over Python's 4300-digit limit",
        '{"type": "ping", "id": ' + "9" * 4301 + "}",
        "invalid_json",
        ("more than 4300 digits",),
    ),
    (
        "a negative integer over the limit, in a known field",
        '{"type": "ice", "candidate": {"candidate": "", "sdpMLineIndex": -' + "1" * 5000 + "}}",
        "invalid_json",
        ("more than 4300 digits",),
    ),
    ("array", "[1, 2]", "invalid_message", ("JSON object", "an array", "offer, ice, text")),
    ("string", '"offer"', "invalid_message", ("JSON object", "a string")),
    ("no type", '{"sdp": "v=0"}', "invalid_message", ("no `type` field", "offer, ice")),
    ("type not a string", '{"type": 3}', "invalid_message", ("`type` is a number",)),
    ("unknown type", '{"type": "hello"}', "unknown_type", ("'hello'", "offer, ice, text")),
    ("server-only type", '{"type": "answer", "sdp": "v=0"}', "unknown_type", ("'answer'",)),
    ("missing field", '{"type": "offer"}', "invalid_message", ("'offer'", "sdp: missing")),
    ("extra field", '{"type": "end", "why": 1}', "invalid_message", ("why: unknown field",)),
    ("wrong type", '{"type": "text", "text": 5}', "invalid_message", ("text: ", "string")),
    ("null text", '{"type": "text", "text": null}', "invalid_message", ("text: ",)),
    ("blank text", '{"type": "text", "text": " \\n "}', "invalid_message", ("must not be blank",)),
    ("empty text", '{"type": "text", "text": ""}', "invalid_message", ("at least 1",)),
    (
        "text too long",
        json.dumps({"type": "text", "text": "a" * (MAX_TEXT_CHARS + 1)}),
        "invalid_message",
        ("text: ", f"at most {MAX_TEXT_CHARS} characters"),
    ),
    (
        "nested field wrong type",
        '{"type": "ice", "candidate": {"candidate": "c", "sdpMLineIndex": "0"}}',
        "invalid_message",
        ("candidate.sdpMLineIndex", "integer"),
    ),
    ("ice without candidate", '{"type": "ice"}', "invalid_message", ("candidate: missing",)),
    (
        "session id with other characters",
        '{"type": "resume", "session_id": "../x", "token": "t"}',
        "invalid_message",
        ("session_id", "A-Za-z0-9_-"),
    ),
    (
        "resume without token",
        '{"type": "resume", "session_id": "s"}',
        "invalid_message",
        ("token: missing",),
    ),
    (
        "a string where a number goes",
        '{"type": "offer", "sdp": "v=0", "protocol": "1"}',
        "invalid_message",
        ("protocol",),
    ),
    (
        "newer protocol in offer",
        '{"type": "offer", "sdp": "v=0", "protocol": 2}',
        "unsupported_protocol",
        ("protocol 2", f"speaks protocol {PROTOCOL_VERSION}"),
    ),
    (
        "older protocol in resume",
        '{"type": "resume", "session_id": "s", "token": "t", "protocol": 0}',
        "unsupported_protocol",
        ("'resume'", "protocol 0"),
    ),
    (
        "approve without call_id",
        '{"type": "approve", "approved": true}',
        "invalid_message",
        ("'approve'", "call_id: missing"),
    ),
    (
        "approve with a string for approved",
        '{"type": "approve", "call_id": "c1", "approved": "yes"}',
        "invalid_message",
        ("approved: ", "boolean"),
    ),
    (
        "approve without approved",
        '{"type": "approve", "call_id": "c1"}',
        "invalid_message",
        ("approved: missing",),
    ),
    (
        "approve with a reason too long",
        json.dumps({"type": "approve", "call_id": "c1", "approved": False, "reason": "x" * 201}),
        "invalid_message",
        ("reason: ", f"at most {MAX_REASON_CHARS} characters"),
    ),
]


@pytest.mark.parametrize(
    ("raw", "code", "fragments"), [case[1:] for case in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS]
)
def test_bad_input_gets_its_stable_code_and_says_what_was_wrong(
    raw: str | bytes, code: ErrorCode, fragments: tuple[str, ...]
) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(raw)
    error = caught.value
    assert error.code == code
    for fragment in fragments:
        assert fragment in error.message
    assert str(error) == f"{code}: {error.message}"
    assert error.to_message() == ErrorMessage(code=code, message=error.message)


@pytest.mark.parametrize("encode", [False, True])
def test_a_70_kib_message_is_too_large_and_not_echoed(encode: bool) -> None:
    raw = json.dumps({"type": "text", "text": "x" * (70 * 1024)})
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(raw.encode() if encode else raw)
    assert caught.value.code == "message_too_large"
    assert f"limit is {MAX_MESSAGE_BYTES} bytes" in caught.value.message
    assert len(caught.value.message) < 120


def test_the_size_limit_counts_utf8_bytes_not_characters() -> None:
    # 33 000 two-byte characters: under 64 Ki characters, over 64 KiB on the wire.
    raw = json.dumps({"type": "text", "text": "é" * 33_000}, ensure_ascii=False)
    assert len(raw) < MAX_MESSAGE_BYTES < len(raw.encode())
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(raw)
    assert caught.value.code == "message_too_large"


def test_a_huge_unknown_type_is_clipped_in_the_message() -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(json.dumps({"type": "z" * 10_000}))
    assert caught.value.code == "unknown_type"
    assert len(caught.value.message) < 200


def test_field_errors_never_echo_the_input() -> None:
    secret = "s3cr3t" * 100
    raw = json.dumps({"type": "resume", "session_id": secret + "!", "token": 7})
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(raw)
    assert caught.value.code == "invalid_message"
    assert "s3cr3t" not in caught.value.message
    assert "session_id" in caught.value.message and "token" in caught.value.message


def test_many_field_errors_are_summarised() -> None:
    raw = json.dumps({"type": "end", **{f"x{i}": i for i in range(9)}})
    with pytest.raises(ProtocolError) as caught:
        parse_client_message(raw)
    assert "(and 4 more)" in caught.value.message


def test_parsing_something_that_is_not_text_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="expected str or bytes, got dict"):
        parse_client_message({"type": "end"})  # type: ignore[arg-type]


def test_server_messages_have_no_size_limit_for_clients() -> None:
    long = TurnCompletedMessage(text="word " * 20_000, stop_reason="stop")
    assert parse_server_message(to_wire(long)) == long


def test_every_error_code_has_a_default_message() -> None:
    assert set(ERROR_CODES) == set(typing.get_args(ErrorCode))
    assert error_message("server_full") == ErrorMessage(
        code="server_full", message=ERROR_CODES["server_full"]
    )
    assert error_message("not_ready", "send an offer first").message == "send an offer first"


def test_unknown_error_codes_are_refused_when_built() -> None:
    with pytest.raises(ValueError, match="code"):
        ErrorMessage(code="oops", message="x")  # type: ignore[arg-type]


def test_messages_are_frozen() -> None:
    message = TextMessage(text="hi")
    with pytest.raises(ValueError, match="frozen"):
        message.text = "bye"  # type: ignore[misc]


def test_the_docs_describe_every_message_type_and_error_code() -> None:
    docs = DOCS.read_text()
    types = {type(m).model_fields["type"].default for m in CLIENT_EXAMPLES + SERVER_EXAMPLES}
    for name in sorted(types) + sorted(ERROR_CODES):
        assert re.search(rf"`{name}`", docs), f"docs/protocol.md does not mention `{name}`"
    assert f"{MAX_MESSAGE_BYTES // 1024} KiB" in docs
    assert str(MAX_TEXT_CHARS) in docs


# wire_event ----------------------------------------------------------------------------------

RESULT = ToolCallResult("c1", "get_weather", "ok", {"temp": 21}, None, 12.3456)
EVENTS: list[tuple[object, BaseModel]] = [
    (TextDelta("It is "), AssistantTextMessage(delta="It is ")),
    (
        ToolCallStarted(ToolCall("c1", "get_weather", {"city": "Tokyo"})),
        ToolCallStartedMessage(call_id="c1", name="get_weather"),
    ),
    (
        ToolCallFinished(RESULT),
        ToolCallFinishedMessage(call_id="c1", name="get_weather", status="ok", duration_ms=12.346),
    ),
    (
        StageChanged("greet", "weather", "t1", reason="asked", conversation_ended=False),
        StageChangedMessage(from_stage="greet", to_stage="weather"),
    ),
    (
        TurnCompleted("It is sunny.", tool_results=(RESULT,), stop_reason="max_tool_rounds"),
        TurnCompletedMessage(text="It is sunny.", stop_reason="max_tool_rounds"),
    ),
    (
        TurnFailed("LLMError: HTTP 500 from http://10.0.0.3:8080/v1 (key sk-abc)", "LLMError"),
        ErrorMessage(code="model_error", message=MODEL_ERROR_TEXT),
    ),
    (UserSpeechStarted(audio_time=1.5), SpeechStartedMessage()),
    (UserSpeechEnded(duration=0.8), SpeechEndedMessage()),
    (Transcript("what is the weather", final=True), TranscriptMessage(text="what is the weather")),
    (AgentSpeechStarted("It is sunny."), AgentSpeechStartedMessage(text="It is sunny.")),
    (
        AgentSpeechEnded(interrupted=True, heard_text="It is"),
        AgentSpeechEndedMessage(interrupted=True, heard_text="It is"),
    ),
    (BargeIn(heard_text="It is"), InterruptionMessage(heard_text="It is")),
    (
        BargeIn(heard_text="It is", kind="false"),
        InterruptionMessage(kind="false", heard_text="It is"),
    ),
    (BargeIn(kind="backchannel"), InterruptionMessage(kind="backchannel")),
    (
        SpeechError("stt", "/opt/models/whisper: CUDA error 700", "RuntimeError"),
        ErrorMessage(code="speech_error", message=STT_ERROR_TEXT),
    ),
    (
        SpeechError("tts", "piper exited with 137", "TTSError"),
        ErrorMessage(code="speech_error", message=TTS_ERROR_TEXT),
    ),
    (
        SpeechError("turn", "KeyError: 'piper' in /srv/app/agent.py", "KeyError"),  # type: ignore[arg-type]
        ErrorMessage(code="turn_error", message=TURN_ERROR_TEXT),
    ),
]


def test_the_event_examples_cover_every_loop_event_type() -> None:
    assert {type(event) for event, _ in EVENTS} == set(typing.get_args(LoopEvent))


@pytest.mark.parametrize(("event", "expected"), EVENTS, ids=lambda x: type(x).__name__)
def test_each_loop_event_becomes_its_message(event: object, expected: BaseModel) -> None:
    message = wire_event(event)
    assert message == expected
    assert parse_server_message(to_wire(expected)) == message


@pytest.mark.parametrize("index", [5, 12, 13, 14])
def test_error_events_never_send_internal_detail(index: int) -> None:
    event, _ = EVENTS[index]
    wire = to_wire(wire_event(event))  # type: ignore[arg-type]
    for leak in ("10.0.0.3", "sk-abc", "Error:", "/opt/", "/srv/", "CUDA", "piper", "137"):
        assert leak not in wire


def test_a_negative_duration_is_sent_as_zero() -> None:
    result = ToolCallResult("c2", "slow", "aborted", None, "aborted", -0.001)
    message = wire_event(ToolCallFinished(result))
    assert isinstance(message, ToolCallFinishedMessage)
    assert message.duration_ms == 0.0
    assert message.status == "aborted"


@pytest.mark.parametrize("event", [object(), "text", None, TextMessage(text="hi")])
def test_unknown_events_map_to_none(event: object) -> None:
    assert wire_event(event) is None


def test_closing_codes_are_error_codes_with_websocket_close_codes() -> None:
    assert set(CLOSE_CODES) <= set(ERROR_CODES)
    assert {"server_full", "resume_refused", "bad_offer", "internal"} <= set(CLOSE_CODES)
    assert not {"invalid_json", "unknown_type", "model_error", "not_ready"} & set(CLOSE_CODES)
    assert all(code in (1000, 1001, 1002, 1008, 1011, 1013) for code in CLOSE_CODES.values())
    assert MAX_FRAME_BYTES > MAX_MESSAGE_BYTES


def test_the_docs_give_each_closing_code_its_close_code() -> None:
    rows = {
        line.split("|")[1].strip(" `"): line
        for line in DOCS.read_text().splitlines()
        if line.startswith("| `") and line.count("|") == 4
    }
    for code in ERROR_CODES:
        assert code in rows, f"docs/protocol.md has no row for `{code}`"
        if code in CLOSE_CODES:
            assert f"closed ({CLOSE_CODES[code]})" in rows[code]
        else:
            assert "closed" not in rows[code]


# Background calls ----------------------------------------------------------------------------


def test_a_started_message_says_whether_the_call_runs_in_the_background() -> None:
    # Sent always, like every field with a default: a client reads `background` as false.
    assert json.loads(to_wire(ToolCallStartedMessage(call_id="c1", name="lookup"))) == {
        "type": "tool_call_started",
        "call_id": "c1",
        "name": "lookup",
        "background": False,
    }
    # A client of the first form (no `background`) still parses: it defaults to false.
    old = '{"type":"tool_call_started","call_id":"c1","name":"lookup"}'
    assert parse_server_message(old) == ToolCallStartedMessage(call_id="c1", name="lookup")
    started = ToolCall("c2", "bookTable", {"restaurant": "Nopa"})
    assert wire_event(ToolCallStarted(started, background=True)) == ToolCallStartedMessage(
        call_id="c2", name="bookTable", background=True
    )


def test_a_progress_message_carries_the_call_its_tool_and_the_line() -> None:
    message = ToolCallProgressMessage(call_id="c2", name="bookTable", message="Checking")
    assert json.loads(to_wire(message)) == {
        "type": "tool_call_progress",
        "call_id": "c2",
        "name": "bookTable",
        "message": "Checking",
    }
    with pytest.raises(ProtocolError, match="message"):
        parse_server_message('{"type":"tool_call_progress","call_id":"c2","name":"bookTable"}')


def test_the_running_answer_is_no_finished_message() -> None:
    running = ToolCallResult("c2", "bookTable", "running", None, None, 0.0)
    assert wire_event(ToolCallFinished(running)) is None
    with pytest.raises(ValueError, match="status"):  # `running` is not an end
        ToolCallFinishedMessage.model_validate(
            {"call_id": "c2", "name": "bookTable", "status": "running", "duration_ms": 0.0}
        )


def test_an_approve_reason_at_the_limit_is_accepted() -> None:
    raw = json.dumps(
        {"type": "approve", "call_id": "c1", "approved": False, "reason": "n" * MAX_REASON_CHARS}
    )
    message = parse_client_message(raw)
    assert isinstance(message, ApproveMessage)
    assert message.approved is False and len(message.reason or "") == MAX_REASON_CHARS


@pytest.mark.parametrize("status", ["duplicate", "unavailable", "denied"])
def test_the_new_final_statuses_are_sent_and_running_is_not(status: str) -> None:
    from llmrtc.rtc.events import tool_call_finished

    message = tool_call_finished("c1", "refund", status, 0.0)
    assert message is not None and message.status == status
    assert parse_server_message(to_wire(message)) == message
