"""`RTCTestClient` against a small real server written here (websockets + llmrtc.rtc.peer + a
`VoiceLoop` with fake engines): connecting, speech and typed turns, events from both channels,
`wait_for`, ping, refusals, malformed server messages, and teardown without leaks."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from aiortc import RTCDataChannel, RTCPeerConnection
from websockets.asyncio.server import ServerConnection, serve

from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.rtc import (
    InboundAudio,
    OutboundAudio,
    accept_offer,
    create_peer,
    description_from_dict,
    remote_audio_track,
)
from llmrtc.rtc.errors import RTCError
from llmrtc.rtc.events import wire_event
from llmrtc.rtc.protocol import ProtocolError
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, RTCTestClient, ScriptedLLM
from llmrtc.testing.scripted import ScriptedResponse
from llmrtc.tools import tool
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.registry import ToolRegistry
from llmrtc.voice import AudioFrame, VoiceLoop
from llmrtc.voice.audio import resample
from llmrtc.voice.wav import write_wav

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


# A small server: the protocol's happy path and its refusals ---------------------------------------


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    await anyio.sleep(0.05)
    return f"sunny in {city}"


@dataclass
class MiniServer:
    """One `VoiceLoop` per WebSocket, events on the data channel once open."""

    script: Callable[[], list[Any]]
    tts: FakeTTS
    full: bool = False
    raw_after_answer: str | None = None
    url: str = ""
    sessions: dict[str, str] = field(default_factory=dict)  # session id -> token
    texts: list[str] = field(default_factory=list)
    pcs: list[RTCPeerConnection] = field(default_factory=list)

    async def handle(self, ws: ServerConnection) -> None:
        first = json.loads(await ws.recv())
        resumed = False
        if self.full:
            await ws.send(json.dumps({"type": "error", "code": "server_full", "message": "full"}))
            await ws.close(1013)
            return
        if first["type"] == "resume":
            if self.sessions.get(first["session_id"]) != first["token"]:
                refusal = {"type": "error", "code": "resume_refused", "message": "wrong token"}
                await ws.send(json.dumps(refusal))
                await ws.close(1008)
                return
            session_id, resumed = first["session_id"], True
            first = json.loads(await ws.recv())
        else:
            session_id = f"s{len(self.sessions) + 1}"
        token = f"t{len(self.sessions) + 1}x"
        self.sessions[session_id] = token
        runner = TurnRunner(
            ScriptedLLM(self.script()), ToolExecutor(ToolRegistry([get_weather])), system_prompt="x"
        )
        pc = create_peer(loopback=True)
        self.pcs.append(pc)
        channels: list[RTCDataChannel] = []
        pending: set[asyncio.Future[None]] = set()

        def send(message: dict[str, Any] | str) -> None:
            text = message if isinstance(message, str) else json.dumps(message)
            if channels and channels[0].readyState == "open":
                channels[0].send(text)
            else:
                sending = asyncio.ensure_future(ws.send(text))
                pending.add(sending)
                sending.add_done_callback(pending.discard)

        @pc.on("datachannel")
        def on_channel(channel: RTCDataChannel) -> None:
            channels.append(channel)

            @channel.on("message")
            def on_message(raw: str) -> None:
                ping = json.loads(raw)
                channel.send(json.dumps({"type": "pong", "id": ping["id"]}))

        loop = VoiceLoop(runner, stt=FakeSTT(tts=self.tts), tts=self.tts, vad=FakeVAD())
        try:
            async with loop, anyio.create_task_group() as group:
                pc.addTrack(OutboundAudio(loop.audio_out()))
                events = loop.events()
                answer = await accept_offer(pc, description_from_dict(first, expect="offer"))
                await ws.send(
                    json.dumps(
                        {"type": "session", "session_id": session_id, "resume_token": token}
                        | {"protocol": 1, "resumed": resumed}
                    )
                )
                await ws.send(json.dumps({"type": "answer", "sdp": answer.sdp}))
                if self.raw_after_answer is not None:
                    await ws.send(self.raw_after_answer)
                mic = remote_audio_track(pc)
                assert mic is not None

                async def pump_mic() -> None:
                    async for frame in InboundAudio(mic):
                        await loop.push_audio(frame)

                async def pump_events() -> None:
                    async for event in events:
                        message = wire_event(event)
                        if message is not None:
                            send(message.model_dump_json())

                group.start_soon(pump_mic)
                group.start_soon(pump_events)
                async for raw in ws:
                    message = json.loads(raw)
                    if message["type"] == "text":
                        self.texts.append(message["text"])
                        await loop.send_text(message["text"])
                    elif message["type"] == "interrupt":
                        await loop.interrupt()
                    elif message["type"] == "end":
                        self.texts.append("<end>")
                        break
                group.cancel_scope.cancel()
        finally:
            await pc.close()
            await ws.close()


@asynccontextmanager
async def mini_server(
    script: Callable[[], list[Any]] = lambda: ["Hello there."], **options: Any
) -> AsyncIterator[MiniServer]:
    server = MiniServer(script=script, tts=options.pop("tts", FakeTTS()), **options)
    async with serve(server.handle, "127.0.0.1", 0) as listening:
        port = next(iter(listening.sockets)).getsockname()[1]
        server.url = f"http://127.0.0.1:{port}/"
        yield server


def tool_script() -> list[Any]:
    calls = [
        ToolCall("c1", "get_weather", {"city": "Tokyo"}),
        ToolCall("c2", "get_weather", {"city": "Paris"}),
    ]
    return [ScriptedResponse(tool_calls=calls), "Sunny in both."]


def own_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if not t.name.startswith("asyncio_")}


async def settle_tasks(baseline: int, timeout: float = 5.0) -> int:
    with anyio.move_on_after(timeout):
        while len(asyncio.all_tasks()) > baseline:
            await anyio.sleep(0.02)
    return len(asyncio.all_tasks())


def decode(tts: FakeTTS, frames: list[AudioFrame]) -> str:
    """What FakeSTT hears in received 48 kHz stereo frames."""
    import numpy as np

    samples = [np.frombuffer(f.pcm, "<i2").reshape(-1, f.channels).mean(axis=1) for f in frames]
    pcm = np.concatenate(samples).astype("<i2").tobytes()
    return " ".join(FakeSTT(tts=tts)._decode(resample(pcm, 48000, 16000)))


# Tests -------------------------------------------------------------------------------------------


async def test_a_spoken_turn_with_two_tool_calls_comes_back_as_events_and_audio() -> None:
    tts = FakeTTS()
    baseline, threads = len(asyncio.all_tasks()), own_threads()
    async with mini_server(tool_script, tts=tts) as server:
        async with RTCTestClient(server.url, tts=tts, timeout=20) as client:
            assert client.session_id == "s1" and client.resume_token == "t1x"
            assert [e["type"] for e in client.events[:2]] == ["session", "answer"]
            await client.say("What is the weather?")
            transcript = await client.wait_for("transcript", final=True)
            assert transcript["text"] == "What is the weather?"
            first = await client.wait_for("tool_call_finished")
            second = await client.wait_for("tool_call_finished")
            assert (first["call_id"], second["call_id"]) == ("c1", "c2")
            assert first["status"] == "ok" and first["duration_ms"] >= 40
            # each event is handed out once: there is no third
            with pytest.raises(TimeoutError, match=r"'tool_call_finished' event within 0\.2 s"):
                await client.wait_for("tool_call_finished", timeout=0.2)
            await client.wait_for("turn_completed", text="Sunny in both.")
            await client.wait_for("agent_speech_ended", interrupted=False)
            await anyio.sleep(0.3)  # the reply's last frames are still on the wire
            rtt = await client.ping()
            assert 0 < rtt < 1.0
            assert not any(e["type"] == "pong" for e in client.events)
        assert server.texts == ["<end>"]  # leaving the block sent `end`
    heard = decode(tts, client.received_audio)
    assert heard == "Sunny in both."
    assert len(client.received_at) == len(client.received_audio)
    assert await settle_tasks(baseline) == baseline
    assert own_threads() == threads


async def test_typed_text_interrupt_and_a_wav_file(tmp_path: Path) -> None:
    tts = FakeTTS(seconds_per_char=0.1)
    long_answer = "This answer goes on and on for a long while."
    script = lambda: [long_answer, "Fine."]  # noqa: E731
    async with (
        mini_server(script, tts=tts) as server,
        RTCTestClient(server.url, tts=tts, timeout=20) as client,
    ):
        await client.send_text("Tell me a story.")
        await client.wait_for("agent_speech_started")
        await client.interrupt()
        ended = await client.wait_for("agent_speech_ended")
        assert ended["interrupted"] is True
        assert server.texts == ["Tell me a story."]
        wav = tmp_path / "question.wav"
        write_wav(wav, AudioFrame(bytes(8000) + tts.render("How are you?") + bytes(48000), 24000))
        await client.send_audio(wav)
        await client.wait_for("transcript", where=lambda e: e["text"] == "How are you?")
        await client.wait_for("turn_completed", text="Fine.")


async def test_refusals_raise_rtc_error_with_the_servers_code() -> None:
    baseline = len(asyncio.all_tasks())
    async with mini_server(full=True) as server:
        with pytest.raises(RTCError, match="server_full") as refused:
            async with RTCTestClient(server.url):
                pass
        assert refused.value.code == "server_full" and refused.value.message == "full"
        server.full = False
        async with RTCTestClient(server.url) as first:
            session = (first.session_id, first.resume_token)
            await first.drop()  # vanish without `end`
        assert session[0] is not None and session[1] is not None
        with pytest.raises(RTCError) as wrong:
            async with RTCTestClient(server.url, resume=(session[0], "nope")):
                pass
        assert wrong.value.code == "resume_refused"
        async with RTCTestClient(server.url, resume=(session[0], session[1])) as again:
            assert again.resumed and again.session_id == session[0]
            assert again.resume_token != session[1]
    with pytest.raises(RTCError) as unreachable:
        async with RTCTestClient(server.url, timeout=5):
            pass
    assert unreachable.value.code == "connection_failed"
    assert await settle_tasks(baseline) == baseline


async def test_wait_for_checks_its_query_and_fails_fast_once_the_server_closed() -> None:
    async with mini_server() as server:
        # a `localhost` URL is a loopback one too: loopback ICE with no extra argument
        async with RTCTestClient(server.url.replace("127.0.0.1", "localhost")) as client:
            with pytest.raises(ValueError, match="no server message has type 'transcrpt'"):
                await client.wait_for("transcrpt")
            with pytest.raises(ValueError, match="has no field 'txt'; its fields: final, text"):
                await client.wait_for("transcript", txt="hi")
            await client.send_text("Hi")
            await client.wait_for("turn_completed", text="Hello there.")
            await client.end()
            with anyio.fail_after(5):
                with pytest.raises(RTCError, match="no 'transcript' event came"):
                    await client.wait_for("transcript")
            with pytest.raises(RTCError, match="connection_closed"):
                await client.send_text("Still there?")
        assert server.texts == ["Hi", "<end>"]  # `end` went once


async def test_dropping_mid_send_releases_the_sender_and_later_sends_fail() -> None:
    errors: list[str] = []
    async with mini_server() as server, RTCTestClient(server.url) as client:

        async def long_send() -> None:
            try:
                await client.send_audio(AudioFrame(bytes(2 * 48000 * 5), 48000))  # 5 s
            except RTCError as exc:
                errors.append(exc.code)

        async with anyio.create_task_group() as group:
            group.start_soon(long_send)
            await anyio.sleep(0.3)
            await client.drop()
        with pytest.raises(RTCError, match="connection_closed"):
            await client.send_audio(AudioFrame(bytes(1920), 48000))
        with pytest.raises(RTCError, match="connection_closed"):
            await client.ping()
    assert errors == ["connection_closed"]
    assert "<end>" not in server.texts  # dropped, not ended


async def test_a_malformed_server_message_fails_loudly() -> None:
    async with mini_server(raw_after_answer='{"type": "transcript", "txt": "x"}') as server:
        with pytest.raises(ProtocolError, match="invalid 'transcript' message"):
            async with RTCTestClient(server.url) as client:
                with pytest.raises(ProtocolError, match="txt: unknown field"):
                    await client.wait_for("turn_completed", timeout=10)


def test_bad_arguments_are_refused_on_construction() -> None:
    with pytest.raises(ValueError, match="http\\(s\\) URL"):
        RTCTestClient("ws://127.0.0.1:1/ws")
    with pytest.raises(ValueError, match="resume must be"):
        RTCTestClient("http://127.0.0.1:1/", resume=("id", ""))
    with pytest.raises(ValueError, match="timeout must be"):
        RTCTestClient("http://127.0.0.1:1/", timeout=0)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_trio_is_refused_with_a_clear_message() -> None:
    with pytest.raises(RuntimeError, match="asyncio only"):
        async with RTCTestClient("http://127.0.0.1:9/"):
            pass


def test_importing_llmrtc_testing_does_not_import_aiortc() -> None:
    code = (
        "import sys, llmrtc.testing\n"
        "assert 'aiortc' not in sys.modules\n"
        "assert llmrtc.testing.RTCTestClient.__module__ == 'llmrtc.testing.rtc_client'\n"
        "assert 'aiortc' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_sent_audio_becomes_48_khz_mono_20_ms_frames(tmp_path: Path) -> None:
    from llmrtc.testing._rtc_audio import mic_frames

    stereo_24k = AudioFrame(bytes(4 * 24000 // 10), 24000, channels=2)  # 0.1 s
    frames = mic_frames([stereo_24k, AudioFrame(bytes(2 * 480), 48000)])  # + 10 ms
    assert {(f.sample_rate, f.channels, f.samples) for f in frames} == {(48000, 1, 960)}
    assert len(frames) == 6  # 110 ms, the last frame padded
    wav = tmp_path / "a.wav"
    write_wav(wav, AudioFrame(bytes(2 * 16000), 16000))  # 1 s
    assert len(mic_frames(wav)) == len(mic_frames(str(wav))) == 50
    assert mic_frames([]) == []
    with pytest.raises(TypeError, match="got an iterable holding bytes"):
        mic_frames([b"pcm"])  # type: ignore[list-item]
    with pytest.raises(FileNotFoundError):
        mic_frames(tmp_path / "missing.wav")
