"""Two real aiortc peers on loopback (no STUN, no mocks): connection, audio both ways through
`OutboundAudio` / `InboundAudio`, a data channel, a `VoiceLoop` answering over the media path,
clean teardown; and the SDP / ICE candidate helpers' refusals."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

import aioice.ice
import numpy as np
from aiortc import (
    InvalidStateError,
    RTCConfiguration,
    RTCDataChannel,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.mediastreams import MediaStreamTrack

from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.rtc import (
    InboundAudio,
    OutboundAudio,
    PeerConnectionError,
    accept_answer,
    accept_offer,
    add_candidate,
    candidate_from_dict,
    candidate_to_dict,
    create_offer,
    create_peer,
    description_from_dict,
    description_to_dict,
    is_loopback_host,
    loopback_candidates,
    remote_audio_track,
    wait_connected,
)
from llmrtc.rtc.peer import is_loopback
from llmrtc.rtc.tracks import from_av_frame, to_av_frame
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.tools.registry import ToolRegistry
from llmrtc.voice import AudioFrame, VoiceLoop
from llmrtc.voice.audio import resample, split_frames
from llmrtc.voice.events import AgentSpeechEnded, Transcript
from llmrtc.voice.frames import FRAME_DURATION

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
CONNECT_TIMEOUT = 10.0
"""Generous: measured 33-66 ms on these machines."""


# Helpers -----------------------------------------------------------------------------------------


async def connect(offerer: RTCPeerConnection, answerer: RTCPeerConnection) -> None:
    """Offer/answer through the JSON helpers (as signalling would carry them), then wait."""
    offer = description_to_dict(await create_offer(offerer))
    answer = await accept_offer(answerer, description_from_dict(offer, expect="offer"))
    await accept_answer(offerer, description_from_dict(description_to_dict(answer)))
    await wait_connected(offerer, CONNECT_TIMEOUT)
    await wait_connected(answerer, CONNECT_TIMEOUT)


def on_track(pc: RTCPeerConnection) -> asyncio.Future[MediaStreamTrack]:
    """The first remote track `pc` reports."""
    future: asyncio.Future[MediaStreamTrack] = asyncio.get_running_loop().create_future()

    def handler(track: MediaStreamTrack) -> None:
        if not future.done():
            future.set_result(track)

    pc.on("track", handler)
    return future


async def paced(frames: Iterable[AudioFrame]) -> AsyncIterator[AudioFrame]:
    """One frame per `FRAME_DURATION`, against the clock (as `VoiceLoop.audio_out()` paces),
    followed by silence until the consumer stops reading."""
    start = anyio.current_time()
    index = 0
    rate = 48000
    for frame in frames:
        await anyio.sleep_until(start + index * FRAME_DURATION)
        rate = frame.sample_rate
        yield frame
        index += 1
    while True:
        await anyio.sleep_until(start + index * FRAME_DURATION)
        yield AudioFrame.silence(FRAME_DURATION, rate)
        index += 1


def tone(frequency: float, seconds: float, rate: int = 48000, amplitude: int = 8000) -> bytes:
    t = np.arange(round(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * frequency * t)).astype("<i2").tobytes()


def mono(frames: list[AudioFrame]) -> np.ndarray:
    """Received frames as one mono float array (channels averaged)."""
    out = [np.frombuffer(f.pcm, dtype="<i2").reshape(-1, f.channels).mean(axis=1) for f in frames]
    return np.concatenate(out) if out else np.zeros(0)


def peak_frequency(samples: np.ndarray, rate: int) -> float:
    window = samples * np.hanning(len(samples))
    spectrum = np.abs(np.fft.rfft(window))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))])


async def settle_tasks(baseline: int, timeout: float = 5.0) -> int:
    """The number of asyncio tasks once it is back to `baseline` (or after `timeout`)."""
    with anyio.move_on_after(timeout):
        while len(asyncio.all_tasks()) > baseline:
            await anyio.sleep(0.02)
    return len(asyncio.all_tasks())


def no_stun_peer() -> RTCPeerConnection:
    """A plain aiortc peer that contacts nobody (tests stay on 127.0.0.1)."""
    return RTCPeerConnection(RTCConfiguration(iceServers=[]))


# Connection, audio, data channel, teardown -------------------------------------------------------


def own_threads() -> set[str]:
    """Live threads, without asyncio's default executor (aiortc encodes in it; its workers
    stay for the event loop's life)."""
    return {t.name for t in threading.enumerate() if not t.name.startswith("asyncio_")}


async def test_a_tone_crosses_two_loopback_peers_as_audio_frames() -> None:
    baseline, threads = len(asyncio.all_tasks()), own_threads()
    sender, receiver = create_peer(loopback=True), create_peer(loopback=True)
    assert is_loopback(sender) and is_loopback(receiver)
    lead, seconds = 0.4, 1.0
    sent = [
        *split_frames(bytes(2 * round(48000 * lead)), 48000),
        *split_frames(tone(1000.0, seconds), 48000),
    ]
    source = paced(sent)
    sender.addTrack(OutboundAudio(source))
    track = on_track(receiver)
    try:
        started = time.monotonic()
        await connect(sender, receiver)
        assert time.monotonic() - started < CONNECT_TIMEOUT
        inbound = InboundAudio(await track)
        received: list[tuple[float, AudioFrame]] = []
        with anyio.move_on_after(lead + seconds + 1.5):
            async for frame in inbound:
                received.append((time.monotonic(), frame))
    finally:
        await sender.close()
        await receiver.close()
        await source.aclose()

    frames = [frame for _, frame in received]
    # Opus decodes to s16 stereo 48 kHz, 20 ms frames; the real channel count is kept
    assert {(f.sample_rate, f.channels, f.samples) for f in frames} == {(48000, 2, 960)}
    # about one frame per 20 ms of wall time (generous: burst at start, jitter buffer)
    span = received[-1][0] - received[0][0]
    assert len(frames) == pytest.approx(span / FRAME_DURATION + 1, rel=0.3)
    # the tone arrives whole, at its frequency, after the lead silence
    audio = mono(frames)
    loud = np.flatnonzero(np.abs(audio) > 2000)
    assert loud.size, "no tone arrived"
    assert (loud[-1] - loud[0]) / 48000 == pytest.approx(seconds, abs=0.1)
    body = audio[loud[0] + 4800 : loud[0] + 4800 + 24000]  # 0.5 s inside the tone
    assert peak_frequency(body, 48000) == pytest.approx(1000.0, abs=5)
    assert np.sqrt(np.mean(audio[: max(0, loud[0] - 960)] ** 2)) < 300  # the lead was silent
    # closing both peers ends the inbound track and leaves no aiortc task or thread behind
    assert inbound.frames == len(frames)
    assert await settle_tasks(baseline) == baseline
    assert own_threads() == threads  # the receiver's "audio-decoder" thread was joined


async def test_outbound_pts_counts_samples_and_converts_rate_and_channels() -> None:
    mono_24k = AudioFrame(tone(440.0, 0.02, 24000), 24000)
    stereo = AudioFrame(
        np.repeat(np.frombuffer(tone(440.0, 0.02), dtype="<i2"), 2).tobytes(), 48000, 2
    )
    frames = [AudioFrame(tone(440.0, 0.02), 48000), stereo, mono_24k, mono_24k]

    async def source() -> AsyncIterator[AudioFrame]:
        for frame in frames:
            yield frame

    track = OutboundAudio(source())
    out = [await track.recv() for _ in frames]
    assert [f.pts for f in out[:3]] == [0, 960, 1920]
    for frame in out:
        assert (frame.format.name, frame.layout.name, frame.sample_rate) == ("s16", "stereo", 48000)
        assert frame.time_base.numerator == 1 and frame.time_base.denominator == 48000
    assert [f.samples for f in out[:2]] == [960, 960]  # mono 48 kHz passes untouched
    assert sum(f.samples for f in out[2:]) == pytest.approx(1920, abs=60)  # 24 kHz resampled
    assert out[3].pts == out[2].pts + out[2].samples
    # the source ends: the track ends
    from aiortc.mediastreams import MediaStreamError

    with pytest.raises(MediaStreamError):
        await track.recv()
    assert track.readyState == "ended"


async def test_outbound_waits_for_its_source_and_adds_no_pacing() -> None:
    send, receive = anyio.create_memory_object_stream[AudioFrame](10)
    frame = AudioFrame(tone(440.0, 0.02), 48000)
    track = OutboundAudio(receive)  # cancel-safe, like VoiceLoop.audio_out()
    with anyio.move_on_after(0.2) as waited:  # nothing ready: recv waits
        await track.recv()
    assert waited.cancelled_caught
    for _ in range(10):
        send.send_nowait(frame)
    started = anyio.current_time()
    for _ in range(10):
        await track.recv()
    assert anyio.current_time() - started < 0.1  # 200 ms of frames ready: no 20 ms sleeps
    track.stop()
    send.close()
    receive.close()


async def test_a_failing_source_ends_the_track(caplog: pytest.LogCaptureFixture) -> None:
    from aiortc.mediastreams import MediaStreamError

    async def source() -> AsyncIterator[AudioFrame]:
        yield AudioFrame(tone(440.0, 0.02), 48000)
        raise RuntimeError("TTS engine crashed")

    track = OutboundAudio(source())
    await track.recv()
    with pytest.raises(MediaStreamError):
        await track.recv()
    assert track.readyState == "ended"
    assert "audio source failed" in caplog.text


def test_av_frame_conversions_keep_channels_and_interleave() -> None:
    import av

    left = np.arange(960, dtype="<i2")
    right = -left
    planar = av.AudioFrame.from_ndarray(np.stack([left, right]), format="s16p", layout="stereo")
    planar.sample_rate = 48000
    packed = av.AudioFrame.from_ndarray(
        np.stack([left, right], axis=1).reshape(1, -1), format="s16", layout="stereo"
    )
    packed.sample_rate = 48000
    for frame in (planar, packed):
        converted = from_av_frame(frame)
        assert (converted.sample_rate, converted.channels, converted.samples) == (48000, 2, 960)
        samples = np.frombuffer(converted.pcm, dtype="<i2").reshape(-1, 2)
        assert (samples[:, 0] == left).all() and (samples[:, 1] == right).all()
    floats = av.AudioFrame.from_ndarray(np.zeros((1, 960), dtype=np.float32), format="flt")
    with pytest.raises(ValueError, match="s16 or s16p"):
        from_av_frame(floats)
    with pytest.raises(ValueError, match="even byte count"):
        to_av_frame(b"\x00", 0)
    with pytest.raises(ValueError, match="audio track"):
        InboundAudio(_VideoTrack())


class _VideoTrack(MediaStreamTrack):
    kind = "video"

    async def recv(self) -> Any:
        raise NotImplementedError


async def test_a_data_channel_round_trip() -> None:
    baseline = len(asyncio.all_tasks())
    a, b = create_peer(loopback=True), create_peer(loopback=True)
    channel = a.createDataChannel("events")
    replies: asyncio.Queue[str | bytes] = asyncio.Queue()
    opened = asyncio.Event()

    @b.on("datachannel")
    def on_channel(remote: RTCDataChannel) -> None:
        remote.on("message", lambda message: remote.send(f"echo {message}"))

    channel.on("open", opened.set)
    channel.on("message", replies.put_nowait)
    try:
        await connect(a, b)
        with anyio.fail_after(CONNECT_TIMEOUT):
            await opened.wait()
            round_trips = []
            for i in range(5):
                started = time.perf_counter()
                channel.send(f'{{"type": "ping", "n": {i}}}')
                assert await replies.get() == f'echo {{"type": "ping", "n": {i}}}'
                round_trips.append(time.perf_counter() - started)
        assert max(round_trips) < 1.0
    finally:
        await a.close()
        await b.close()
    assert await settle_tasks(baseline) == baseline


async def test_a_voice_loop_answers_speech_over_the_peer_connection() -> None:
    """The user's peer sends FakeTTS speech as its microphone; the agent's peer runs a
    VoiceLoop on it; the reply's audio comes back and decodes to the scripted answer."""
    baseline = len(asyncio.all_tasks())
    tts = FakeTTS()  # one vocabulary: the user's words, the agent's words, both decoders
    runner = TurnRunner(
        ScriptedLLM(["It is sunny today."]),
        ToolExecutor(ToolRegistry()),
        system_prompt="Be brief.",
    )
    loop = VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD())
    agent, user = create_peer(loopback=True), create_peer(loopback=True)
    question = tts.render("What is the weather?")
    mic = paced(split_frames(bytes(2 * 24000 // 2) + question + bytes(2 * 24000), 24000))
    user.addTrack(OutboundAudio(mic))
    user_track = on_track(user)
    heard: list[AudioFrame] = []
    seen: list[Any] = []
    try:
        async with loop, anyio.create_task_group() as group:
            agent.addTrack(OutboundAudio(loop.audio_out()))
            events = loop.events()
            assert remote_audio_track(agent) is None  # nothing negotiated yet
            await connect(user, agent)
            mic_track = remote_audio_track(agent)  # read after negotiation, no callback
            assert mic_track is not None
            inbound_mic = InboundAudio(mic_track)
            inbound_reply = InboundAudio(await user_track)

            async def pump_mic() -> None:
                async for frame in inbound_mic:
                    await loop.push_audio(frame)

            async def record_reply() -> None:
                async for frame in inbound_reply:
                    heard.append(frame)

            group.start_soon(pump_mic)
            group.start_soon(record_reply)
            with anyio.fail_after(20):
                async for event in events:
                    seen.append(event)
                    if isinstance(event, AgentSpeechEnded):
                        break
            await anyio.sleep(0.5)  # the reply's last frames are still on the wire
            group.cancel_scope.cancel()
    finally:
        await agent.close()
        await user.close()
        await mic.aclose()

    assert Transcript("What is the weather?", True) in seen
    assert seen[-1] == AgentSpeechEnded(False, "It is sunny today.")
    # what came back through Opus decodes to the answer, word by word
    reply = mono(heard).astype("<i2").tobytes()
    decoded = await FakeSTT(tts=tts).transcribe(resample(reply, 48000, 16000))
    assert decoded == "It is sunny today."
    assert await settle_tasks(baseline) == baseline


# Connection failures ------------------------------------------------------------------------------


async def test_a_connection_that_never_connects_is_reported_with_its_ice_state() -> None:
    pc = create_peer(loopback=True)
    pc.createDataChannel("events")
    try:
        await create_offer(pc)  # no answer ever comes
        with pytest.raises(PeerConnectionError, match="ICE connection state 'new'") as caught:
            await wait_connected(pc, 0.3)
        assert "is the loopback interface up?" in str(caught.value)
        assert caught.value.ice_state == "new" and caught.value.connection_state == "new"
        assert "within 0.3 s" in str(caught.value)
    finally:
        await pc.close()
    with pytest.raises(PeerConnectionError, match="closed"):
        await wait_connected(pc, 1.0)


# The loopback option ------------------------------------------------------------------------------


def sdp_addresses(sdp: str) -> set[str]:
    return {line.split()[4] for line in sdp.splitlines() if line.startswith("a=candidate:")}


async def test_loopback_offers_127_0_0_1_only_to_its_own_peer() -> None:
    original = aioice.ice.get_host_addresses
    loopback, plain = create_peer(loopback=True), no_stun_peer()
    loopback.createDataChannel("a")
    plain.createDataChannel("b")
    offers: dict[str, RTCSessionDescription] = {}

    async def offer(name: str, pc: RTCPeerConnection) -> None:
        offers[name] = await create_offer(pc)

    try:
        async with anyio.create_task_group() as group:  # gathering at the same time
            group.start_soon(offer, "loopback", loopback)
            group.start_soon(offer, "plain", plain)
    finally:
        await loopback.close()
        await plain.close()
    assert "127.0.0.1" in sdp_addresses(offers["loopback"].sdp)
    assert "127.0.0.1" not in sdp_addresses(offers["plain"].sdp)
    assert aioice.ice.get_host_addresses is original  # restored once no block is open


def test_loopback_candidates_nests_and_restores() -> None:
    original = aioice.ice.get_host_addresses
    assert "127.0.0.1" not in original(use_ipv4=True, use_ipv6=False)
    with loopback_candidates():
        with loopback_candidates():
            assert "127.0.0.1" in aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False)
        assert "127.0.0.1" in aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False)
        assert aioice.ice.get_host_addresses(use_ipv4=False, use_ipv6=True).count("127.0.0.1") == 0
    assert aioice.ice.get_host_addresses is original


_LOOPBACK_ONLY_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from llmrtc.rtc import create_peer, create_offer, accept_offer, accept_answer
    from llmrtc.rtc import wait_connected, PeerConnectionError

    async def attempt(loopback, timeout):
        a, b = create_peer(loopback=loopback), create_peer(loopback=loopback)
        a.createDataChannel("events")
        try:
            answer = await accept_offer(b, await create_offer(a))
            await accept_answer(a, answer)
            await wait_connected(a, timeout)
            return "connected"
        except PeerConnectionError as exc:
            return exc.ice_state
        finally:
            await a.close()
            await b.close()

    async def main():
        print(await attempt(True, 10.0), await attempt(False, 1.5))

    asyncio.run(main())
    """
)


@pytest.mark.requires("netns")
def test_on_a_loopback_only_host_only_the_loopback_option_connects() -> None:
    # A fresh network namespace holds only `lo` (brought up here): what CI and an offline
    # machine look like. aiortc's defaults stay in ICE state "new" there, loopback connects.
    result = subprocess.run(
        [
            "unshare",
            "-n",
            "sh",
            "-c",
            f'ip link set lo up && exec "{sys.executable}" -c "$0"',
            _LOOPBACK_ONLY_SCRIPT,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    if result.returncode and "unshare failed" in result.stderr:
        pytest.skip(f"no network namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["connected", "new"]


# SDP and candidate helpers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("v=0", "is an object"),
        ({"sdp": "v=0\r\n"}, "type must be one of offer, answer, pranswer, got None"),
        ({"type": "rollback", "sdp": "v=0\r\n"}, "got 'rollback'"),
        ({"type": "offer"}, "sdp must be a non-empty string, got None"),
        ({"type": "offer", "sdp": 42}, "sdp must be a non-empty string"),
        ({"type": "offer", "sdp": "  "}, "sdp must be a non-empty string"),
        ({"type": "offer", "sdp": "garbage"}, "malformed SDP: it must start with 'v=0'"),
        ({"type": "offer", "sdp": "v=0\r\ns=-\r\n"}, "no media section"),
        ({"type": "offer", "sdp": "v=0\r\nm=audio x\r\n"}, "malformed SDP"),
        ({"type": "answer", "sdp": "v=0\r\n"}, "expected an SDP offer, got an SDP answer"),
    ],
)
def test_malformed_descriptions_are_refused(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        description_from_dict(data, expect="offer" if "expected" in message else None)


async def test_an_offer_aiortc_refuses_is_a_value_error() -> None:
    no_ice = (
        "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
        "m=audio 9 UDP/TLS/RTP/SAVPF 111\r\nc=IN IP4 0.0.0.0\r\na=rtpmap:111 opus/48000/2\r\n"
    )
    pc = no_stun_peer()
    try:
        with pytest.raises(ValueError, match="SDP offer refused: ICE username fragment"):
            await accept_offer(pc, description_from_dict({"type": "offer", "sdp": no_ice}))
        with pytest.raises(ValueError, match="expected an SDP offer"):
            await accept_offer(pc, RTCSessionDescription(sdp=no_ice, type="answer"))
        with pytest.raises(ValueError, match="expected an SDP answer"):
            await accept_answer(pc, RTCSessionDescription(sdp=no_ice, type="offer"))
        with pytest.raises(ValueError, match="malformed SDP"):
            await accept_offer(pc, RTCSessionDescription(sdp="nonsense", type="offer"))
    finally:
        await pc.close()
    # a closed connection is the caller's state, not a bad SDP: aiortc's error, unchanged
    offerer = create_peer(loopback=True)
    offerer.createDataChannel("events")
    try:
        offer = await create_offer(offerer)
    finally:
        await offerer.close()
    with pytest.raises(InvalidStateError, match="closed"):
        await accept_offer(pc, offer)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("localhost", True),
        ("LOCALHOST.", True),
        ("app.localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("192.0.2.2", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_a_browser_candidate_round_trips() -> None:
    browser = {
        "candidate": "candidate:842163049 1 udp 1677729535 192.0.2.7 56143 typ srflx "
        "raddr 10.0.0.1 rport 56143 generation 0 ufrag Ab3d network-cost 999",
        "sdpMid": "0",
        "sdpMLineIndex": 0,
        "usernameFragment": "Ab3d",
    }
    candidate = candidate_from_dict(browser)
    assert candidate is not None
    assert (candidate.foundation, candidate.component, candidate.protocol) == (
        "842163049",
        1,
        "udp",
    )
    assert (candidate.ip, candidate.port, candidate.type) == ("192.0.2.7", 56143, "srflx")
    assert (candidate.relatedAddress, candidate.relatedPort) == ("10.0.0.1", 56143)
    assert (candidate.sdpMid, candidate.sdpMLineIndex) == ("0", 0)
    assert candidate_to_dict(candidate) == {
        "candidate": "candidate:842163049 1 udp 1677729535 192.0.2.7 56143 typ srflx "
        "raddr 10.0.0.1 rport 56143",
        "sdpMid": "0",
        "sdpMLineIndex": 0,
    }
    assert candidate_from_dict(candidate_to_dict(candidate)) == candidate
    # mDNS host names (what browsers offer by default) are kept for aioice to resolve
    mdns = candidate_from_dict(
        {"candidate": "candidate:1 1 UDP 2122 3f5b-1.local 5000 typ host", "sdpMLineIndex": 0}
    )
    assert mdns is not None and mdns.ip == "3f5b-1.local" and mdns.sdpMid is None
    # end of candidates
    assert candidate_from_dict(None) is None
    assert candidate_from_dict({"candidate": "", "sdpMid": "0", "sdpMLineIndex": 0}) is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "an ICE candidate is an object, got list"),
        ({"sdpMid": "0"}, "'candidate' must be a string, got None"),
        ({"candidate": "candidate:1 1 udp 2 1.2.3.4 5 typ host"}, "needs sdpMid or sdpMLineIndex"),
        ({"candidate": "candidate:1 1 udp 2 1.2.3.4 5 typ host", "sdpMid": 0}, "sdpMid must be"),
        (
            {"candidate": "candidate:1 1 udp 2 1.2.3.4 5 typ host", "sdpMLineIndex": -1},
            "sdpMLineIndex must be an int >= 0",
        ),
        ({"candidate": "candidate:1 1 udp", "sdpMid": "0"}, "expected '<foundation> <component>"),
        (
            {"candidate": "candidate:1 x udp 2 1.2.3.4 5 typ host", "sdpMid": "0"},
            "must be whole numbers",
        ),
        ({"candidate": "candidate:1 1 udp 2 1.2.3.4 70000 typ host", "sdpMid": "0"}, "port must"),
        ({"candidate": "candidate:1 1 sctp 2 1.2.3.4 5 typ host", "sdpMid": "0"}, "udp or tcp"),
        ({"candidate": "candidate:1 1 udp 2 1.2.3.4 5 typ best", "sdpMid": "0"}, "type must be"),
        ({"candidate": "candidate:1 0 udp 2 1.2.3.4 5 typ host", "sdpMid": "0"}, "component must"),
    ],
)
def test_malformed_candidates_are_refused(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        candidate_from_dict(data)


async def test_add_candidate_takes_the_browser_shape_and_refuses_bad_ones() -> None:
    a, b = create_peer(loopback=True), create_peer(loopback=True)
    a.createDataChannel("events")
    try:
        offer = await create_offer(a)
        answer = await accept_offer(b, offer)
        # send a's candidates again by trickling them (as a browser would), then end them
        lines = [line[2:] for line in offer.sdp.splitlines() if line.startswith("a=candidate:")]
        for line in lines:
            await add_candidate(b, {"candidate": line, "sdpMid": "0", "sdpMLineIndex": 0})
        await add_candidate(b, None)
        with pytest.raises(ValueError, match="needs sdpMid"):
            await add_candidate(b, {"candidate": lines[0]})
        await accept_answer(a, answer)
        await wait_connected(a, CONNECT_TIMEOUT)
    finally:
        await a.close()
        await b.close()


def test_importing_the_rtc_package_does_not_import_aiortc() -> None:
    code = (
        "import sys, llmrtc.rtc\n"
        "assert 'aiortc' not in sys.modules\n"
        "assert llmrtc.rtc.create_peer.__module__ == 'llmrtc.rtc.peer'\n"
        "assert 'aiortc' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)
