"""Resumes that fail or race: a resume that never delivers its answer leaves the saved session
where it was (same token), a peer whose close raises still lets the session save, and two
resumes racing with one token admit exactly one."""

from __future__ import annotations

import re
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc import ToolExecutor, ToolRegistry
from llmrtc.agent import TurnRunner
from llmrtc.rtc import InMemorySessionStore, RTCServer
from llmrtc.rtc import session as session_module
from llmrtc.testing import ScriptedLLM

from .conftest import RawClient, config, fake_speech, raw_client, settled

pytestmark = pytest.mark.anyio


def runners(llm: ScriptedLLM) -> Any:
    return lambda: TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")


async def first_session(url: str) -> tuple[str, str]:
    """A session that spoke once and vanished: its (session_id, resume_token)."""
    async with raw_client(url) as client:
        opening = await client.connect()
        await client.send({"type": "text", "text": "Hi"})
        await client.wait_for("turn_completed")
    return opening["session_id"], opening["resume_token"]


def peers_whose_close_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's peers close, then raise (an aiortc bug in its teardown)."""
    create = session_module.create_peer

    def create_peer(*, loopback: bool = False) -> Any:
        pc = create(loopback=loopback)
        close = pc.close

        async def close_then_raise() -> None:
            await close()
            raise RuntimeError("the peer's teardown failed")

        pc.close = close_then_raise  # type: ignore[method-assign]
        return pc

    monkeypatch.setattr(session_module, "create_peer", create_peer)


async def test_a_resume_aiortc_fails_on_leaves_the_saved_session_for_a_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    llm = ScriptedLLM(["First.", "Second."])
    store = InMemorySessionStore()
    async with RTCServer(
        runners(llm), speech=fake_speech(), config=config(), store=store
    ) as server:
        session_id, token = await first_session(server.url)
        await settled(server)
        accept = session_module.accept_offer

        async def fails(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("aiortc could not apply the offer")

        monkeypatch.setattr(session_module, "accept_offer", fails)
        peers_whose_close_raises(monkeypatch)
        async with raw_client(server.url) as failed:
            await failed.send({"type": "resume", "session_id": session_id, "token": token})
            await failed.offer()
            error = await failed.wait_for("error")
            assert error["code"] == "internal" and "aiortc" not in error.get("message", "")
            assert await failed.wait_closed() == 1011
        await settled(server)
        monkeypatch.setattr(session_module, "accept_offer", accept)
        async with raw_client(server.url) as again:  # the same token: the session is there
            opening = await again.connect(resume=(session_id, token))
            assert opening["resumed"] and opening["session_id"] == session_id
            assert opening["history"][0] == {"role": "user", "text": "Hi", "interrupted": False}


async def broken_bundle_offer() -> str:
    """A real offer whose BUNDLE group names a media section it does not have."""
    from llmrtc.rtc.peer import create_offer, create_peer

    pc = create_peer(loopback=True)
    pc.addTransceiver("audio", direction="sendrecv")
    pc.createDataChannel("events")
    try:
        sdp = (await create_offer(pc)).sdp
    finally:
        await pc.close()
    return re.sub(r"a=group:BUNDLE .*", "a=group:BUNDLE nope 0 1", sdp)


async def test_a_resume_whose_offer_aiortc_refuses_leaves_the_saved_session() -> None:
    llm = ScriptedLLM(["First.", "Second."])
    async with RTCServer(runners(llm), speech=fake_speech(), config=config()) as server:
        session_id, token = await first_session(server.url)
        await settled(server)
        async with raw_client(server.url) as refused:
            await refused.send({"type": "resume", "session_id": session_id, "token": token})
            await refused.send({"type": "offer", "sdp": await broken_bundle_offer()})
            assert (await refused.wait_for("error"))["code"] in ("bad_offer", "internal")
            await refused.wait_closed()
        await settled(server)
        async with raw_client(server.url) as again:
            assert (await again.connect(resume=(session_id, token)))["resumed"]
            await again.send({"type": "text", "text": "Back"})
            assert (await again.wait_for("turn_completed"))["text"] == "Second."


async def test_a_peer_whose_close_raises_still_saves_its_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    peers_whose_close_raises(monkeypatch)
    llm = ScriptedLLM(["First.", "Second."])
    store = InMemorySessionStore()
    async with RTCServer(
        runners(llm), speech=fake_speech(), config=config(), store=store
    ) as server:
        session_id, token = await first_session(server.url)
        await settled(server)
        assert await store.load(session_id) is not None
        async with raw_client(server.url) as again:
            assert (await again.connect(resume=(session_id, token)))["resumed"]
            await again.send({"type": "text", "text": "Back"})
            assert (await again.wait_for("turn_completed"))["text"] == "Second."


async def _outcome(client: RawClient) -> str:
    with anyio.fail_after(20):
        while True:
            for message in client.events:
                if message["type"] == "session":
                    return "admitted"
                if message["type"] == "error":
                    return str(message["code"])
            await anyio.sleep(0.01)


class Race:
    """One round of two resumes with the same token."""

    def __init__(self) -> None:
        self.outcomes: dict[int, str] = {}
        self.both = anyio.Event()
        self.close_codes: list[int | None] = []  # of the admitted one, once both are known
        self.tokens: list[str] = []

    async def attempt(self, url: str, index: int, session_id: str, token: str) -> None:
        from llmrtc.rtc.peer import accept_answer, description_from_dict

        async with raw_client(url) as client:
            await client.send({"type": "resume", "session_id": session_id, "token": token})
            await client.offer()
            self.outcomes[index] = await _outcome(client)
            if len(self.outcomes) == 2:
                self.both.set()
            if self.outcomes[index] != "admitted":
                return
            answer = await client.wait_for("answer")
            assert client.pc is not None
            await accept_answer(client.pc, description_from_dict(answer))
            await self.both.wait()
            await anyio.sleep(0.5)  # time for an eviction to show
            self.close_codes.append(client.close_code)
            self.tokens.append(client.of_type("session")[-1]["resume_token"])


async def test_two_concurrent_resumes_with_one_token_admit_exactly_one() -> None:
    async with RTCServer(
        runners(ScriptedLLM(["First."])), speech=fake_speech(), config=config(resume_wait=1.0)
    ) as server:
        session_id, token = await first_session(server.url)
        for _ in range(3):
            await settled(server)
            race = Race()
            async with anyio.create_task_group() as group:
                group.start_soon(race.attempt, server.url, 0, session_id, token)
                group.start_soon(race.attempt, server.url, 1, session_id, token)
            assert sorted(race.outcomes.values()) == ["admitted", "resume_refused"]
            assert race.close_codes == [None]  # the one admitted was not ended by the other
            token = race.tokens[0]
