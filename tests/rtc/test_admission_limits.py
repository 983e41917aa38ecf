"""Admission under churn and cheap lock-outs: a session frees its live slot as its connection
ends (not once it has saved), a resume waiting for its state holds no live slot, and idle
sockets from one address cannot refuse everyone else."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

import anyio
import pytest

pytest.importorskip("aiortc", reason='the rtc floor needs aiortc: pip install "llmrtc[rtc]"')

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from llmrtc import ToolExecutor, ToolRegistry
from llmrtc.agent import TurnRunner
from llmrtc.rtc import InMemorySessionStore, RTCServer
from llmrtc.rtc.store import SessionState
from llmrtc.testing import ScriptedLLM

from .conftest import config, fake_speech, raw_client, settled

pytestmark = pytest.mark.anyio


def runners(llm: ScriptedLLM) -> Any:
    return lambda: TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")


class SlowSaves(InMemorySessionStore):
    """Saves wait for `release` (a slow shared store, or a busy disk)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = anyio.Event()
        self.saving = 0

    async def save(self, state: SessionState, *, ttl: float) -> None:
        self.saving += 1
        await self.release.wait()
        await super().save(state, ttl=ttl)


async def test_a_session_frees_its_slot_when_its_connection_ends_not_once_saved() -> None:
    store = SlowSaves()
    llm = ScriptedLLM(["Hi.", "Hello again."])
    server = RTCServer(
        runners(llm), speech=fake_speech(), config=config(max_sessions=1), store=store
    )
    async with server:
        try:
            async with raw_client(server.url) as first:
                opening = await first.connect()
                await first.send({"type": "text", "text": "Hi"})
                await first.wait_for("turn_completed")
            # the first client vanished: its state is still being saved (slowly)
            with anyio.fail_after(20):
                while not store.saving:
                    await anyio.sleep(0.02)
            async with raw_client(server.url) as second:  # admitted meanwhile
                assert (await second.connect())["resumed"] is False
                await second.send({"type": "text", "text": "Hello"})
                await second.wait_for("turn_completed")
        finally:
            store.release.set()
        await settled(server)
        assert await store.load(opening["session_id"]) is not None  # saved all the same


async def test_a_resume_waiting_for_its_state_holds_no_session_slot() -> None:
    llm = ScriptedLLM(["Hi."])
    server = RTCServer(
        runners(llm), speech=fake_speech(), config=config(max_sessions=1, resume_wait=4.0)
    )
    async with server, raw_client(server.url) as waiting:
        # a resume of a session nobody saved waits (another worker might be saving it)
        await waiting.send({"type": "resume", "session_id": "not-saved-here", "token": "x" * 43})
        await waiting.offer()
        await anyio.sleep(0.5)
        async with raw_client(server.url) as other:  # the one slot is free for a real client
            await other.connect()
            await other.send({"type": "text", "text": "Hi"})
            await other.wait_for("turn_completed")
            assert (await waiting.wait_for("error"))["code"] == "resume_refused"
            assert other.close_code is None


async def test_idle_sockets_from_one_address_do_not_lock_out_other_clients() -> None:
    server = RTCServer(
        runners(ScriptedLLM(["Hi."])),
        speech=fake_speech(),
        config=config(max_sessions=1, max_pending_per_address=2),
    )
    async with server:
        url = server.url.replace("http://", "ws://") + "ws"
        # as many idle sockets as the whole server has room for (4 per session slot)
        held = [await connect(url) for _ in range(4)]
        try:
            refused = []
            for connection in held:
                with suppress(ConnectionClosed):  # a refused one is closed already
                    await connection.send('{"type": "ping", "id": "p"}')
                reply = str(await connection.recv())  # a pong, or the refusal
                if "server_full" in reply:
                    refused.append(reply)
            assert len(refused) == 2  # beyond the per-address limit
            assert "from your address" in refused[0]
            async with raw_client(server.url, from_address="127.0.0.2") as client:
                await client.connect()
                await client.send({"type": "text", "text": "Hi"})
                assert (await client.wait_for("turn_completed"))["text"] == "Hi."
        finally:
            for connection in held:
                await connection.close()
