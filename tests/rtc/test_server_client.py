"""RTCServer driven by `llmrtc.testing.RTCTestClient` (as users' own tests drive it): a spoken
barge-in, an interrupt, refusals as `RTCError`, resume, the data-channel round trip, two
servers sharing a port (`reuse_port`), and the config's checks."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc import ToolExecutor, ToolRegistry
from llmrtc.agent import TurnRunner
from llmrtc.rtc import RTCError, RTCServer, ServerConfig
from llmrtc.testing import FakeTTS, FakeVAD, RTCTestClient, ScriptedLLM, ScriptedResponse
from llmrtc.voice.config import VoiceConfig
from llmrtc.voice.stt import STTError

from .conftest import config, fake_speech, settled

pytestmark = pytest.mark.anyio

LONG_REPLY = (
    "Tokyo is sunny with a light breeze from the bay and a high of twenty one degrees "
    "this afternoon, cooling down to fifteen degrees tonight under clear skies."
)


def runners(llm: ScriptedLLM) -> Any:
    return lambda: TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")


async def test_the_user_speaking_over_the_agent_cuts_its_reply() -> None:
    tts = FakeTTS()  # ~7 s of reply: plenty of time to speak over it
    llm = ScriptedLLM([LONG_REPLY, "Okay, stopping."])
    async with (
        RTCServer(runners(llm), speech=fake_speech(tts), config=config()) as server,
        RTCTestClient(server.url, tts=tts) as client,
    ):
        await client.say("What is the weather?")
        started = await client.wait_for("agent_speech_started")
        assert LONG_REPLY.startswith(started["text"])
        await anyio.sleep(0.5)  # some of it is heard
        await client.say("Stop")
        barge = await client.wait_for("interruption", kind="barge_in")
        ended = await client.wait_for("agent_speech_ended")
        assert ended["interrupted"] is True
        assert ended["heard_text"] and LONG_REPLY.startswith(ended["heard_text"])
        assert barge["heard_text"] == ended["heard_text"]
        assert (await client.wait_for("transcript", text="Stop"))["final"] is True
        done = await client.wait_for("turn_completed", text="Okay, stopping.")
        assert done["stop_reason"] == "stop"
        kinds = [event["type"] for event in client.events]
        assert kinds.index("interruption") < kinds.index("agent_speech_ended")
        # Protocol 1's `barge_in` still follows, with the same words (a version only adds).
        old = client.events[kinds.index("interruption") + 1]
        assert old == {"type": "barge_in", "heard_text": barge["heard_text"]}


async def test_interrupt_cuts_a_reply_and_the_next_turn_goes_on() -> None:
    llm = ScriptedLLM([ScriptedResponse(text=LONG_REPLY, chunk_delay=0.05), "Next."])

    async def make() -> TurnRunner:  # an async factory's result is awaited
        await anyio.sleep(0)
        return TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")

    async with (
        RTCServer(make, speech=fake_speech(), config=config()) as server,
        RTCTestClient(server.url, tts=FakeTTS()) as client,
    ):
        await client.send_text("Tell me about Tokyo")
        await client.wait_for("assistant_text")
        await client.interrupt()
        assert (await client.wait_for("turn_completed"))["stop_reason"] == "aborted"
        await client.send_text("And now?")
        assert (await client.wait_for("turn_completed"))["text"] == "Next."
        assert 0 <= await client.ping() < 5


async def test_refusals_raise_rtc_error_with_the_servers_code() -> None:
    async with RTCServer(
        runners(ScriptedLLM(["Hi."])), speech=fake_speech(), config=config(max_sessions=1)
    ) as server:
        async with RTCTestClient(server.url, tts=FakeTTS()) as first:
            with pytest.raises(RTCError) as full:
                async with RTCTestClient(server.url, tts=FakeTTS()):
                    pass
            assert full.value.code == "server_full"
            await first.send_text("Hello")
            await first.wait_for("turn_completed")
            credentials = (first.session_id, first.resume_token)
            assert None not in credentials
            await first.drop()
        await settled(server)
        with pytest.raises(RTCError) as wrong:
            async with RTCTestClient(server.url, resume=(credentials[0], "nope"), tts=FakeTTS()):
                pass
        assert wrong.value.code == "resume_refused"
        async with RTCTestClient(server.url, resume=credentials, tts=FakeTTS()) as again:
            assert again.resumed and again.session_id == credentials[0]
            assert again.resume_token != credentials[1]
        server.stop_admitting()
        with pytest.raises(RTCError) as stopping:
            async with RTCTestClient(server.url, tts=FakeTTS()):
                pass
        assert stopping.value.code == "shutting_down"


async def test_the_voice_config_reaches_each_sessions_loop() -> None:
    voice = VoiceConfig(apology_text="Pardon me, once more please.")
    tts = FakeTTS()
    speech = fake_speech(tts, [STTError("engine crashed at /opt/stt")])
    async with (
        RTCServer(runners(ScriptedLLM([])), speech=speech, config=config(voice=voice)) as server,
        RTCTestClient(server.url, tts=tts) as client,
    ):
        await client.say("Hello there")
        error = await client.wait_for("error")
        assert error["code"] == "speech_error" and "/opt" not in error["message"]
        started = await client.wait_for("agent_speech_started")
        assert started["text"] == "Pardon me, once more please."


def reuse_port_supported() -> bool:
    return hasattr(socket, "SO_REUSEPORT")


@pytest.mark.skipif(not reuse_port_supported(), reason="no SO_REUSEPORT on this platform")
async def test_two_servers_share_a_port_with_reuse_port() -> None:
    first = RTCServer(
        runners(ScriptedLLM(["One."])),
        speech=fake_speech(),
        config=config(reuse_port=True),
    )
    async with first:
        second = RTCServer(
            runners(ScriptedLLM(["Two."])),
            speech=fake_speech(),
            config=config(port=first.port, reuse_port=True),
        )
        async with second:
            assert second.port == first.port
        without = RTCServer(
            runners(ScriptedLLM([])), speech=fake_speech(), config=config(port=first.port)
        )
        with pytest.raises(OSError):
            async with without:
                pass


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"port": 70000}, "port"),
        ({"port": True}, "port"),
        ({"max_sessions": 0}, "max_sessions"),
        ({"idle_timeout": 0}, "idle_timeout"),
        ({"offer_timeout": float("nan")}, "offer_timeout"),
        ({"resume_ttl": float("inf")}, "resume_ttl"),
        ({"shutdown_grace": -1}, "shutdown_grace"),
        ({"host": ""}, "host"),
        ({"loopback": 1}, "loopback"),
        ({"reuse_port": "yes"}, "reuse_port"),
        ({"voice": {"filler_after": 1}}, "voice"),
    ],
)
def test_server_config_refuses_bad_values_naming_the_field(
    options: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=f"ServerConfig.{field}"):
        ServerConfig(**options)


def test_loopback_ice_follows_the_host_or_the_flag() -> None:
    assert ServerConfig(host="127.0.0.1").ice_loopback
    assert ServerConfig(host="localhost").ice_loopback
    assert not ServerConfig(host="0.0.0.0").ice_loopback
    assert ServerConfig(host="0.0.0.0", loopback=True).ice_loopback


def test_the_server_refuses_a_factory_or_store_that_cannot_work() -> None:
    with pytest.raises(TypeError, match="agent_factory"):
        RTCServer("not callable")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="FakeVAD lacks vad, stt, tts"):
        RTCServer(lambda: None, speech=FakeVAD())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="SessionStore"):
        RTCServer(lambda: None, store=object())  # type: ignore[arg-type]


@pytest.mark.requires("voice_model")
async def test_without_speech_the_server_opens_the_default_engines_while_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LLMRTC_SPEECH"):
        monkeypatch.delenv(name, raising=False)
    from llmrtc.voice import speech as default_speech

    llm = ScriptedLLM(["Hi there."])
    async with (
        RTCServer(runners(llm), config=config()) as server,
        RTCTestClient(server.url, tts=FakeTTS()) as client,
    ):
        assert default_speech._shared is not None  # opened by the server, shared
        await client.send_text("Hello")
        ended = await client.wait_for("agent_speech_ended", timeout=60)
        assert ended == {
            "type": "agent_speech_ended",
            "interrupted": False,
            "heard_text": "Hi there.",
        }
        assert client.received_audio
    assert default_speech._shared is None  # the server's exit closed them


async def test_a_session_left_on_one_server_resumes_on_another_sharing_the_store(
    tmp_path: Path,
) -> None:
    from llmrtc.rtc import SQLiteSessionStore

    store = SQLiteSessionStore(tmp_path / "sessions.sqlite3")
    llm = ScriptedLLM(["First answer.", "Second answer."])
    try:
        async with (
            RTCServer(runners(llm), speech=fake_speech(), config=config(), store=store) as one,
            RTCServer(runners(llm), speech=fake_speech(), config=config(), store=store) as two,
        ):
            async with RTCTestClient(one.url, tts=FakeTTS()) as client:
                await client.send_text("Hello")
                await client.wait_for("turn_completed")
                credentials = (client.session_id, client.resume_token)
                await client.drop()
            await settled(one)
            async with RTCTestClient(two.url, resume=credentials, tts=FakeTTS()) as again:  # type: ignore[arg-type]
                assert again.resumed
                await again.send_text("And again?")
                assert (await again.wait_for("turn_completed"))["text"] == "Second answer."
    finally:
        store.close()
    assert len(llm.requests[-1].messages) == 4  # system, first turn (user, answer), the new one


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio_the_server_says_it_needs_asyncio() -> None:
    require("trio")
    with pytest.raises(RuntimeError, match="asyncio only"):
        async with RTCServer(runners(ScriptedLLM([])), speech=fake_speech(), config=config()):
            pass
