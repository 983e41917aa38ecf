"""Offers that trip aiortc, and aiortc's background connect failing: each is a `bad_offer` or a
peer that reports ``"failed"``, never an unretrieved task exception or an `internal` error."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from aiortc import RTCSessionDescription

from llmrtc.rtc import RTCServer
from llmrtc.rtc.peer import (
    PeerConnectionError,
    accept_offer,
    create_offer,
    create_peer,
    description_from_dict,
    wait_connected,
)
from llmrtc.rtc.tracks import OutboundAudio
from llmrtc.testing import ScriptedLLM
from llmrtc.voice.frames import FRAME_DURATION, AudioFrame

from .conftest import TIMEOUT, config, fake_speech, raw_client, until

pytestmark = pytest.mark.anyio


async def _silence() -> AsyncIterator[AudioFrame]:
    while True:
        await anyio.sleep(FRAME_DURATION)
        yield AudioFrame.silence(FRAME_DURATION, 48000)


async def browser_like_offer() -> str:
    """A real offer with audio and the `events` data channel, bundled (mids 0 and 1)."""
    pc = create_peer(loopback=True)
    pc.addTrack(OutboundAudio(_silence()))
    pc.createDataChannel("events")
    try:
        return (await create_offer(pc)).sdp
    finally:
        await pc.close()


def _bundle_names_a_missing_mid(sdp: str) -> str:
    return re.sub(r"a=group:BUNDLE .*", "a=group:BUNDLE nope 0 1", sdp)


def _audio_mid_renamed(sdp: str) -> str:
    return sdp.replace("a=mid:0", "a=mid:x", 1)  # BUNDLE still names 0


def _mids_duplicated(sdp: str) -> str:
    return sdp.replace("a=mid:1", "a=mid:0")


BROKEN_MIDS = [
    (_bundle_names_a_missing_mid, "names mid 'nope'"),
    (_audio_mid_renamed, "names mid '0'"),
    (_mids_duplicated, "two media sections have a=mid:0"),
]


@contextmanager
def unretrieved_task_errors() -> Iterator[list[dict[str, Any]]]:
    """What the event loop reports as unhandled (e.g. "Task exception was never retrieved")."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        yield reported
        gc.collect()  # a done task's exception is reported when the task is collected
    finally:
        loop.set_exception_handler(previous)


@pytest.mark.parametrize(("corrupt", "named"), BROKEN_MIDS)
async def test_an_offer_whose_bundle_or_mid_names_a_missing_section_is_a_value_error(
    corrupt: Any, named: str
) -> None:
    sdp = corrupt(await browser_like_offer())
    with pytest.raises(ValueError, match=re.escape(named)):
        description_from_dict({"type": "offer", "sdp": sdp})
    with unretrieved_task_errors() as reported:
        pc = create_peer(loopback=True)
        pc.addTrack(OutboundAudio(_silence()))
        try:
            # accept_offer checks too (a caller may build the description itself)
            with pytest.raises(ValueError, match=re.escape(named)):
                await accept_offer(pc, RTCSessionDescription(sdp=sdp, type="offer"))
            await anyio.sleep(0.2)  # a connect task aiortc started would have failed by now
        finally:
            await pc.close()
    assert reported == []


@pytest.mark.parametrize("loopback", [True, False])
async def test_a_failing_connect_task_makes_the_peer_failed_not_an_unretrieved_error(
    loopback: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # Straight through aiortc's own API (no llmrtc check): aiortc bundles onto the transport of
    # a mid no section has, and its background connect task then fails on None.
    sdp = _bundle_names_a_missing_mid(await browser_like_offer())
    states: list[str] = []
    with caplog.at_level(logging.WARNING, "llmrtc.rtc.peer"), unretrieved_task_errors() as reported:
        pc = create_peer(loopback=loopback)
        pc.on("connectionstatechange", lambda: states.append(pc.connectionState))
        await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
        with pytest.raises(PeerConnectionError, match="the peer connection failed"):
            await wait_connected(pc, TIMEOUT)
        assert pc.connectionState == "failed"
        await pc.close()  # aiortc's own close trips on the same None: not raised
        assert pc.connectionState == "closed"
        with anyio.fail_after(TIMEOUT):
            await pc.close()  # and a second close returns
    assert states == ["failed", "closed"]
    assert reported == []
    failures = [r for r in caplog.records if "failed while connecting" in r.getMessage()]
    assert len(failures) == 1


async def test_the_server_answers_such_an_offer_with_bad_offer_and_serves_the_next() -> None:
    llm = ScriptedLLM(["Fine."])
    sdp = _bundle_names_a_missing_mid(await browser_like_offer())
    with unretrieved_task_errors() as reported:
        async with RTCServer(lambda: _runner(llm), speech=fake_speech(), config=config()) as server:
            async with raw_client(server.url) as client:
                await client.send({"type": "offer", "sdp": sdp})
                error = await client.wait_for("error")
                assert error["code"] == "bad_offer" and "nope" in error["message"]
                assert await client.wait_closed() == 1008
            async with raw_client(server.url) as client:
                await client.connect()
                await client.send({"type": "text", "text": "Hello"})
                assert (await client.wait_for("turn_completed"))["text"] == "Fine."
            await until(lambda: server.active_sessions == 0)
    assert reported == []


def _runner(llm: ScriptedLLM) -> Any:
    from llmrtc import ToolExecutor, ToolRegistry
    from llmrtc.agent import TurnRunner

    return TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")


async def data_channel_only_offer() -> str:
    """A real offer with the `events` data channel and no audio section."""
    pc = create_peer(loopback=True)
    pc.createDataChannel("events")
    try:
        return (await create_offer(pc)).sdp
    finally:
        await pc.close()


async def test_an_offer_without_audio_is_bad_offer_before_aiortc_sees_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sdp = await data_channel_only_offer()
    with pytest.raises(ValueError, match=r"no audio section \(m=audio\)"):
        description_from_dict({"type": "offer", "sdp": sdp}, require_audio=True)
    description_from_dict({"type": "offer", "sdp": sdp})  # a peer of its own may have no audio
    llm = ScriptedLLM(["Fine."])
    caplog.set_level(logging.INFO)
    async with RTCServer(lambda: _runner(llm), speech=fake_speech(), config=config()) as server:
        for _ in range(3):  # any client can send it, as often as it likes
            async with raw_client(server.url) as client:
                await client.send({"type": "offer", "sdp": sdp})
                error = await client.wait_for("error")
                assert error["code"] == "bad_offer" and "m=audio" in error["message"]
                assert await client.wait_closed() == 1008
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert noisy == []


async def test_an_offer_aiortc_cannot_answer_is_logged_at_info_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An input aiortc's answer trips on (a data-only offer to a peer sending audio, as a
    # session's does, when nobody asked `require_audio`) is the client's doing, which any
    # client can repeat at will: INFO, no traceback.
    sdp = await data_channel_only_offer()
    caplog.set_level(logging.INFO)
    pc = create_peer(loopback=True)
    pc.addTrack(OutboundAudio(_silence()))
    try:
        with pytest.raises(ValueError, match="cannot be answered"):
            await accept_offer(pc, RTCSessionDescription(sdp=sdp, type="offer"))
    finally:
        await pc.close()
    logged = [r for r in caplog.records if "could not answer" in r.getMessage()]
    assert [(r.levelno, r.exc_info) for r in logged] == [(logging.INFO, None)]


def test_the_guarded_aiortc_connect_exists_and_set_remote_description_calls_it() -> None:
    # `_Peer` overrides aiortc's private `__connect`: if an aiortc upgrade renamed it, the
    # guard would silently stop guarding. Fail loudly here instead.
    from aiortc import RTCPeerConnection

    name = "_RTCPeerConnection__connect"
    assert callable(getattr(RTCPeerConnection, name, None))
    for method in (RTCPeerConnection.setRemoteDescription, RTCPeerConnection.setLocalDescription):
        assert name in method.__code__.co_names, method.__name__


def test_the_guarded_aiortc_sctp_send_exists_and_its_timers_and_flush_call_it() -> None:
    # `_Peer` wraps the SCTP transport's private `_send_chunk` on each instance.
    import inspect

    from aiortc.rtcsctptransport import RTCSctpTransport

    assert inspect.iscoroutinefunction(RTCSctpTransport._send_chunk)
    for method in (RTCSctpTransport._transmit, RTCSctpTransport._t1_expired):
        assert "_send_chunk" in method.__code__.co_names, method.__name__


async def test_sending_on_a_data_channel_whose_dtls_is_gone_is_no_unretrieved_error() -> None:
    # Seen under load in a real browser session: the DTLS transport closes (ICE consent lost,
    # or the other side went away) while the server still sends events on the data channel;
    # aiortc's SCTP sends in fire-and-forget tasks, each failing with "Cannot send encrypted
    # data, not connected" -- "Task exception was never retrieved".
    from aiortc import RTCConfiguration, RTCPeerConnection

    from llmrtc.rtc.ice import loopback_candidates

    with unretrieved_task_errors() as reported:
        server = create_peer(loopback=True)
        client = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        opened = anyio.Event()
        channels: list[Any] = []

        @server.on("datachannel")
        def on_channel(channel: Any) -> None:
            channels.append(channel)
            opened.set()

        client.createDataChannel("events")
        try:
            with loopback_candidates():
                await client.setLocalDescription(await client.createOffer())
            answer = await accept_offer(server, client.localDescription)
            await client.setRemoteDescription(answer)
            with anyio.fail_after(TIMEOUT):
                await opened.wait()
            # The server's DTLS goes away under a data channel that is still open.
            await server.sctp.transport.stop()
            assert channels[0].readyState == "open"
            for index in range(20):  # events keep coming from the session meanwhile
                channels[0].send(f"event {index}")
            await anyio.sleep(0.5)
        finally:
            await client.close()
            await server.close()
    assert reported == []
