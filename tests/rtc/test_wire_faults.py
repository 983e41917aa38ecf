"""Hostile or hasty input inside a live session, over real peers: each gets its stable error
code and the session goes on (typed turns beyond the limit, a 4300-digit integer)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc.rtc import RTCServer
from llmrtc.testing import ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse
from llmrtc.tools.calls import ToolCall
from llmrtc.voice import VoiceConfig

from .conftest import config, fake_speech, raw_client

pytestmark = pytest.mark.anyio


def runner_with_a_waiting_tool(llm: ScriptedLLM, release: anyio.Event | None = None) -> Any:
    """A runner whose `wait` tool runs until `release` is set (60 s without one); a "finish"
    tool, so a text typed over it interrupts the turn and then waits for it to settle."""
    from llmrtc import ToolExecutor, ToolRegistry
    from llmrtc.agent import TurnRunner
    from llmrtc.tools.tool import tool

    @tool(on_interrupt="finish")
    async def wait() -> str:
        """Wait until released."""
        with anyio.move_on_after(60):
            await (release or anyio.Event()).wait()
        return "waited"

    return TurnRunner(llm, ToolExecutor(ToolRegistry([wait])), system_prompt="Be brief.")


async def test_typed_turns_beyond_the_limit_get_too_many_turns_and_interrupt_drops_them() -> None:
    llm = ScriptedLLM(
        [ScriptedResponse(text="Checking.", tool_calls=[ToolCall("c1", "wait", {})]), "Hi again."]
    )
    server_config = config(voice=VoiceConfig(max_queued_texts=2))
    release = anyio.Event()
    async with (
        RTCServer(
            lambda: runner_with_a_waiting_tool(llm, release),
            speech=fake_speech(),
            config=server_config,
        ) as server,
        raw_client(server.url) as client,
    ):
        await client.connect()
        await client.send({"type": "text", "text": "Start."})
        await client.wait_for("tool_call_started")
        # "One." interrupts "Start." (whose "finish" tool goes on); the rest wait behind it
        for text in ("One.", "Two.", "Three.", "Four."):
            await client.send({"type": "text", "text": text})
        error = await client.wait_for("error", code="too_many_turns")
        assert "2 typed turns already wait" in error["message"]
        assert "interrupt" in error["message"]  # what the client can do instead
        await client.wait_for("error", code="too_many_turns", count=2)  # "Four." too
        await client.send({"type": "interrupt"})
        release.set()  # the tool finishes: the interrupted turn settles
        await client.wait_for("turn_completed")
        await client.send({"type": "text", "text": "Hello?"})
        assert (await client.wait_for("turn_completed", count=2))["text"] == "Hi again."
        assert client.close_code is None and server.active_sessions == 1
    # the waiting "One." and "Two." were dropped by the interrupt: the model never saw them
    assert len(llm.requests) == 2
    assert llm.requests[-1].messages[-1].content == "Hello?"


async def test_a_huge_integer_in_a_session_is_invalid_json_and_the_session_goes_on() -> None:
    llm = ScriptedLLM(["Still here."])
    async with (
        RTCServer(
            lambda: runner_with_a_waiting_tool(llm), speech=fake_speech(), config=config()
        ) as server,
        raw_client(server.url) as client,
    ):
        await client.connect()
        await client.send('{"type": "text", "text": "hi", "n": ' + "7" * 5000 + "}")
        error = await client.wait_for("error")
        assert error["code"] == "invalid_json" and "more than 4300 digits" in error["message"]
        await client.send({"type": "text", "text": "Hello"})
        assert (await client.wait_for("turn_completed"))["text"] == "Still here."
        assert client.close_code is None


async def test_a_byte_message_in_utf16_or_utf32_is_invalid_json_with_the_utf8_offset() -> None:
    llm = ScriptedLLM(["Still here."])
    async with (
        RTCServer(
            lambda: runner_with_a_waiting_tool(llm), speech=fake_speech(), config=config()
        ) as server,
        raw_client(server.url) as client,
    ):
        await client.connect()
        ping = '{"type": "ping", "id": "p"}'
        # json.loads would sniff each of these (a BOM, or the zero bytes) and accept it
        for count, encoding in enumerate(("utf-16", "utf-32", "utf-16-le"), start=1):
            await client.send(ping.encode(encoding))
            error = await client.wait_for("error", count=count)
            assert error["code"] == "invalid_json"
        assert "not UTF-8 (bad byte at offset 0)" in client.of_type("error")[0]["message"]
        # the offset is the first byte that is not UTF-8, not one in a guessed encoding
        await client.send(b"\xff\xfe" + ping.encode("utf-16-le") + b"\xff")
        error = await client.wait_for("error", count=4)
        assert error["code"] == "invalid_json" and "offset 0)" in error["message"]
        await client.send(b'{"type": "text", "text": "caf\xc3\xa9 \xff"}')
        error = await client.wait_for("error", count=5)
        assert "offset 32)" in error["message"]
        assert client.of_type("pong") == []
        await client.send({"type": "text", "text": "Hello"})
        assert (await client.wait_for("turn_completed"))["text"] == "Still here."
        assert client.close_code is None
