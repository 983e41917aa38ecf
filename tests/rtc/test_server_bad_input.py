"""Every bad input the server can get, before and during a session: each is an `error` with a
stable code (the connection goes on) or a refusal with its close code, and never touches the
other session running beside it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests._requirements import require

require("rtc")

from llmrtc.rtc import RTCServer
from llmrtc.rtc.peer import create_offer, create_peer
from llmrtc.testing import ScriptedLLM

from .conftest import RawClient, config, fake_speech, raw_client, until

pytestmark = pytest.mark.anyio


def runners(llm: ScriptedLLM) -> Any:
    from llmrtc import ToolExecutor, ToolRegistry
    from llmrtc.agent import TurnRunner

    return lambda: TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")


async def answer_of(client: RawClient, message: Any) -> dict[str, Any]:
    """Send `message` and return the next message the server sends."""
    before = len(client.messages)
    await client.send(message)
    await client.wait_count(before + 1)
    return client.messages[before][1]


async def data_channel_only_offer() -> str:
    pc = create_peer(loopback=True)
    pc.createDataChannel("events")
    try:
        return (await create_offer(pc)).sdp
    finally:
        await pc.close()


BEFORE_OFFER = [
    ("{not json", "invalid_json"),
    (b"\xff\xfe", "invalid_json"),
    ("[1, 2]", "invalid_message"),
    ({"type": "hello"}, "unknown_type"),
    ({"type": "text"}, "invalid_message"),
    ({"type": "text", "text": "hi", "extra": 1}, "invalid_message"),
    ({"type": "text", "text": "x" * 70_000}, "message_too_large"),
    ({"type": "text", "text": "hi"}, "not_ready"),
    ({"type": "interrupt"}, "not_ready"),
    ({"type": "ice", "candidate": None}, "not_ready"),
]


async def test_bad_messages_before_the_offer_are_errors_and_the_connection_goes_on() -> None:
    llm = ScriptedLLM(["Still fine."])
    async with (
        RTCServer(runners(llm), speech=fake_speech(), config=config()) as server,
        raw_client(server.url) as client,
    ):
        for message, code in BEFORE_OFFER:
            reply = await answer_of(client, message)
            assert reply["type"] == "error" and reply["code"] == code, message
            assert len(reply["message"]) < 400  # never echoes large input
        assert await answer_of(client, {"type": "ping", "id": "p1"}) == {"type": "pong", "id": "p1"}
        await client.send({"type": "resume", "session_id": "abc", "token": "def"})
        reply = await answer_of(client, {"type": "resume", "session_id": "abc", "token": "def"})
        assert reply["code"] == "unexpected_message"
        assert client.close_code is None
        assert all(where == "websocket" for where, _ in client.messages)


REFUSED = [
    ({"type": "offer", "sdp": "hello"}, "bad_offer", 1008),
    ({"type": "offer", "sdp": "v=0\r\nnonsense"}, "bad_offer", 1008),
    ({"type": "offer", "sdp": "x", "protocol": 9}, "unsupported_protocol", 1002),
    (
        {"type": "resume", "session_id": "a", "token": "b", "protocol": 2},
        "unsupported_protocol",
        1002,
    ),
]


@pytest.mark.parametrize(("message", "code", "close"), REFUSED)
async def test_refusals_send_their_error_then_close_with_its_code(
    message: dict[str, Any], code: str, close: int
) -> None:
    async with (
        RTCServer(runners(ScriptedLLM([])), speech=fake_speech(), config=config()) as server,
        raw_client(server.url) as client,
    ):
        await client.send(message)
        assert (await client.wait_for("error"))["code"] == code
        assert await client.wait_closed() == close
        await until(lambda: server.active_sessions == 0)


async def test_an_offer_without_audio_or_that_aiortc_refuses_is_a_bad_offer() -> None:
    no_audio = await data_channel_only_offer()
    no_ice = "\r\n".join(
        line for line in no_audio.split("\r\n") if not line.startswith(("a=ice-ufrag", "a=ice-pwd"))
    )
    async with RTCServer(runners(ScriptedLLM([])), speech=fake_speech(), config=config()) as server:
        for sdp in (no_audio, no_ice):
            async with raw_client(server.url) as client:
                await client.send({"type": "offer", "sdp": sdp})
                error = await client.wait_for("error")
                assert error["code"] == "bad_offer"
                assert await client.wait_closed() == 1008
                assert not client.of_type("session")
        await until(lambda: server.active_sessions == 0)


async def test_a_message_over_one_mebibyte_closes_with_1009() -> None:
    async with (
        RTCServer(runners(ScriptedLLM([])), speech=fake_speech(), config=config()) as server,
        raw_client(server.url) as client,
    ):
        await client.send("x" * (1024 * 1024 + 1))
        assert await client.wait_closed() == 1009


async def test_bad_messages_in_a_session_are_answered_where_they_came_and_harm_no_one() -> None:
    llm = ScriptedLLM(["For the neighbour.", "For the bad one."])
    async with (
        RTCServer(runners(llm), speech=fake_speech(), config=config()) as server,
        raw_client(server.url) as bad,
        raw_client(server.url) as neighbour,
    ):
        await bad.connect()
        await neighbour.connect()
        for message, code in [
            ("{oops", "invalid_json"),
            ({"type": "nope"}, "unknown_type"),
            ({"type": "text", "text": "   "}, "invalid_message"),
            ({"type": "text", "text": "y" * 5000}, "invalid_message"),
            ({"type": "offer", "sdp": "v=0"}, "unexpected_message"),
            ({"type": "resume", "session_id": "a", "token": "b"}, "unexpected_message"),
            (
                {"type": "ice", "candidate": {"candidate": "candidate:garbage", "sdpMid": "0"}},
                "bad_candidate",
            ),
            (
                {
                    "type": "ice",
                    "candidate": {"candidate": "candidate:1 1 udp 1 1.2.3.4 9 typ host"},
                },
                "bad_candidate",
            ),
            ({"type": "text", "text": "x" * 70_000}, "message_too_large"),
        ]:
            reply = await answer_of(bad, message)
            assert (reply["type"], reply["code"]) == ("error", code), message
        # the same on the data channel: the error comes back on the channel
        before = len(bad.messages)
        bad.channel.send("{oops")
        error = await bad.wait_for("error", code="invalid_json", count=2)
        assert ("channel", error) in bad.messages[before:]
        bad.channel.send(json.dumps({"type": "ping", "id": "dc"}))
        pong = await bad.wait_for("pong", id="dc")
        assert ("channel", pong) in bad.messages
        await bad.send({"type": "ice", "candidate": None})  # end of candidates: fine
        await neighbour.send({"type": "text", "text": "Hello"})
        assert (await neighbour.wait_for("turn_completed"))["text"] == "For the neighbour."
        await bad.send({"type": "text", "text": "Still there?"})
        assert (await bad.wait_for("turn_completed"))["text"] == "For the bad one."
        assert not neighbour.of_type("error")
        assert bad.close_code is None and server.active_sessions == 2
