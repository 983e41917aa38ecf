"""RTCServer against real aiortc peers on 127.0.0.1 (fake speech, scripted model): the page and
the health check on the same port, the opening, a typed turn with tools (each call's events
as it ends), speech in and out through Opus, events on the WebSocket without a data channel,
and `stop_admitting` + `wait_idle`."""

from __future__ import annotations

import urllib.request
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import TurnRunner
from llmrtc.rtc import RTCServer
from llmrtc.testing import FakeTTS, ScriptedLLM
from llmrtc.voice.audio import resample

from .conftest import TIMEOUT, config, fake_speech, raw_client

pytestmark = pytest.mark.anyio


@tool
async def lookup_weather(city: str) -> dict[str, Any]:
    """The current weather.

    Args:
        city: The city.
    """
    return {"city": city, "sky": "sunny", "celsius": 21}


@tool
async def slow_lookup(city: str) -> dict[str, Any]:
    """A lookup that takes a while.

    Args:
        city: The city.
    """
    await anyio.sleep(3600)
    return {"city": city}


def runner_factory(script: list[Any]) -> Any:
    """A factory whose sessions share one scripted model (each session takes the next turns)."""
    llm = ScriptedLLM(script)

    def make() -> TurnRunner:
        return TurnRunner(
            llm,
            ToolExecutor(ToolRegistry([lookup_weather, slow_lookup])),
            system_prompt="You answer weather questions.",
        )

    return make


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


async def test_one_port_serves_the_page_health_and_404() -> None:
    async with RTCServer(runner_factory([]), speech=fake_speech(), config=config()) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/"
        status, kind, body = await anyio.to_thread.run_sync(get, server.url)
        assert status == 200 and kind.startswith("text/html") and b"<html" in body.lower()
        status, _, body = await anyio.to_thread.run_sync(get, server.url + "healthz")
        assert (status, body) == (200, b"ok\n")
        for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
            status, got, body = await anyio.to_thread.run_sync(get, server.url + name)
            assert status == 200 and got.startswith(kind) and body, name
        status, _, _ = await anyio.to_thread.run_sync(get, server.url + "ws")
        assert status == 426  # the WebSocket path wants an upgrade
        for path in ("nope.js", "../pyproject.toml", "%2e%2e/server.py", ".hidden", "ws/x"):
            status, _, _ = await anyio.to_thread.run_sync(get, server.url + path)
            assert status == 404, path


async def test_a_typed_turn_with_tools_reports_each_call_as_it_ends() -> None:
    script = [
        [
            ToolCall("c1", "lookup_weather", {"city": "Tokyo"}),
            ToolCall("c2", "slow_lookup", {"city": "Oslo"}),
        ],
        "Sunny in Tokyo.",
    ]
    speech = fake_speech()
    async with (
        RTCServer(runner_factory(script), speech=speech, config=config()) as server,
        raw_client(server.url) as client,
    ):
        session = await client.connect()
        assert session["protocol"] == 1 and session["resumed"] is False
        assert [(where, m["type"]) for where, m in client.messages[:2]] == [
            ("websocket", "session"),
            ("websocket", "answer"),
        ]
        await client.send({"type": "text", "text": "Weather in Tokyo and Oslo?"})
        # c1 ends while c2 still runs: its finished event is out before the batch ends
        finished = await client.wait_for("tool_call_finished", call_id="c1")
        assert finished["status"] == "ok" and finished["name"] == "lookup_weather"
        await client.wait_for("tool_call_started", call_id="c2")
        assert [m["call_id"] for m in client.of_type("tool_call_finished")] == ["c1"]
        assert not client.of_type("turn_completed")  # the batch is still running
        await client.send({"type": "interrupt"})
        done = await client.wait_for("turn_completed")
        assert done["stop_reason"] == "aborted"
        c2 = await client.wait_for("tool_call_finished", call_id="c2")
        assert c2["status"] == "aborted"
        kinds = [m["type"] for m in client.events]
        for call in ("c1", "c2"):
            started = [m for m in client.of_type("tool_call_started") if m["call_id"] == call]
            ended = [m for m in client.of_type("tool_call_finished") if m["call_id"] == call]
            assert len(started) == len(ended) == 1
        assert kinds.index("turn_completed") > kinds.index("tool_call_finished")
        # events after the channel opened went on it
        assert ("channel", done) in client.messages


async def test_speech_in_and_out_through_opus() -> None:
    tts = FakeTTS()
    speech = fake_speech(tts)
    factory = runner_factory(["It is sunny today."])
    async with (
        RTCServer(factory, speech=speech, config=config()) as server,
        raw_client(server.url) as client,
    ):
        await client.connect()
        client.mic.rate = tts.sample_rate
        client.mic.say(tts.render("What is the weather?"))
        transcript = await client.wait_for("transcript")
        assert transcript == {
            "type": "transcript",
            "text": "What is the weather?",
            "final": True,
        }
        ended = await client.wait_for("agent_speech_ended")
        assert ended["interrupted"] is False and ended["heard_text"] == "It is sunny today."
        await anyio.sleep(0.5)  # the last frames are still on the wire
    import numpy as np

    frames = client.received_audio
    samples = np.concatenate(
        [np.frombuffer(f.pcm, dtype="<i2").reshape(-1, f.channels).mean(axis=1) for f in frames]
    ).astype("<i2")
    decoded = await speech.stt.transcribe(resample(samples.tobytes(), 48000, 16000))
    assert decoded == "It is sunny today."


async def test_without_a_data_channel_every_event_goes_on_the_websocket() -> None:
    llm = ScriptedLLM(["Over the WebSocket."])

    def make() -> TurnRunner:
        return TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")

    async with (
        RTCServer(make, speech=fake_speech(), config=config()) as server,
        raw_client(server.url) as client,
    ):
        await client.offer(channel=False)
        await client.wait_for("answer")
        await client.send({"type": "text", "text": "Hello"})
        done = await client.wait_for("turn_completed")
        assert done["text"] == "Over the WebSocket."
        assert {where for where, _ in client.messages} == {"websocket"}
        kinds = [m["type"] for m in client.events]
        assert kinds[:2] == ["session", "answer"] and kinds.count("turn_completed") == 1


async def test_wait_idle_returns_once_the_last_session_ends_after_stop_admitting() -> None:
    llm = ScriptedLLM([])

    def make() -> TurnRunner:
        return TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")

    async with RTCServer(make, speech=fake_speech(), config=config()) as server:
        await server.wait_idle()  # none live: at once
        async with raw_client(server.url) as client:
            await client.connect()
            server.stop_admitting()
            assert not server.admitting and server.active_sessions == 1
            async with anyio.create_task_group() as group:
                idle = anyio.Event()

                async def wait() -> None:
                    await server.wait_idle()
                    idle.set()

                group.start_soon(wait)
                await anyio.sleep(0.2)
                assert not idle.is_set()
                await client.send({"type": "end"})
                with anyio.fail_after(TIMEOUT):
                    await idle.wait()
            assert server.active_sessions == 0
