"""Admission under churn and cheap lock-outs: a session frees its live slot as its connection
ends (not once it has saved), a resume waiting for its state holds no live slot, and idle
sockets from one address cannot refuse everyone else."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import TurnRunner
from llmrtc.rtc import InMemorySessionStore, RTCServer, ServerConfig
from llmrtc.rtc.server import client_key
from llmrtc.rtc.store import SessionState
from llmrtc.testing import ScriptedLLM

from .conftest import config, fake_speech, raw_client, settled, until

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


async def _opened(url: str, address: str) -> tuple[Any, str]:
    """A WebSocket from `address` that pinged once: its pong, or its refusal."""
    connection = await connect(url, local_addr=(address, 0))
    with suppress(ConnectionClosed):
        await connection.send('{"type": "ping", "id": "p"}')
    return connection, str(await connection.recv())


async def _opened_again(connection: Any) -> str:
    """Ping again: the pong, or the refusal the connection got meanwhile."""
    with suppress(ConnectionClosed):
        await connection.send('{"type": "ping", "id": "again"}')
    return str(await connection.recv())


async def test_idle_sockets_from_five_addresses_do_not_lock_out_a_sixth() -> None:
    server = RTCServer(
        runners(ScriptedLLM(["Hi."])),
        speech=fake_speech(),
        config=config(max_sessions=1, max_pending_per_address=2, offer_timeout=60.0),
    )
    async with server:
        url = server.url.replace("http://", "ws://") + "ws"
        held: list[Any] = []
        try:
            # 5 addresses, each at its own limit: 10 connections for the server's 4 places
            for host in range(1, 6):
                for _ in range(2):
                    connection, reply = await _opened(url, f"127.0.4.{host}")
                    held.append(connection)
                    assert "pong" in reply
            # the oldest of the busiest addresses made room for each newer one
            replies = [(await _opened_again(connection)) for connection in held]
            refused = [reply for reply in replies if "server_full" in reply]
            assert len(refused) == 6 and all("to make room" in reply for reply in refused)
            assert sum("pong" in reply for reply in replies) == 4
            for connection, reply in zip(held, replies, strict=True):
                if "server_full" in reply:
                    await connection.wait_closed()
                    assert connection.close_code == 1013
            async with raw_client(server.url, from_address="127.0.4.9") as client:
                await client.connect()
                await client.send({"type": "text", "text": "Hi"})
                assert (await client.wait_for("turn_completed"))["text"] == "Hi."
                assert client.of_type("error") == []
        finally:
            for connection in held:
                await connection.close()


async def test_a_connection_that_says_nothing_is_closed_before_the_offer_timeout() -> None:
    server = RTCServer(
        runners(ScriptedLLM([])),
        speech=fake_speech(),
        config=config(first_message_timeout=1.0, offer_timeout=60.0),
    )
    async with server:
        url = server.url.replace("http://", "ws://") + "ws"
        talking, reply = await _opened(url, "127.0.0.1")
        assert "pong" in reply
        async with connect(url) as silent:
            reply = str(await silent.recv())
            assert "idle_timeout" in reply and "No message came within 1 s" in reply
            await silent.wait_closed()
            assert silent.close_code == 1000
        # one that talked has the whole offer timeout
        await talking.send('{"type": "ping", "id": "q"}')
        assert "pong" in str(await talking.recv())
        await talking.close()


def test_first_message_timeout_is_checked() -> None:
    with pytest.raises(ValueError, match="first_message_timeout must be a finite number"):
        ServerConfig(first_message_timeout=0)


def test_clients_count_by_ipv4_address_or_ipv6_64() -> None:
    assert client_key(("203.0.113.7", 5000)) == "203.0.113.7"
    assert client_key(("::ffff:203.0.113.7", 5000, 0, 0)) == "203.0.113.7"
    one = client_key(("2001:db8:1:2:aaaa::1", 5000, 0, 0))
    assert one == client_key(("2001:db8:1:2:ffff:1:2:3", 6000, 0, 0)) == "2001:db8:1:2::/64"
    assert client_key(("2001:db8:1:3::1", 5000, 0, 0)) != one
    assert client_key(("fe80::1%eth0", 5000, 0, 2)) == "fe80::/64"
    assert client_key(None) == ""


@tool(on_interrupt="finish")
async def book_table(name: str) -> dict[str, Any]:
    """A booking that, once started, runs to its end even when the client leaves.

    Args:
        name: Who the table is for.
    """
    await anyio.sleep(300)  # far past every bound of this test: the shutdown aborts it
    return {"booked": name}


async def test_sessions_still_ending_are_bounded_so_leaving_mid_tool_cannot_pile_them_up() -> None:
    llm = ScriptedLLM([[ToolCall(f"b{n}", "book_table", {"name": "Ada"})] for n in range(3)])
    registry = ToolRegistry([book_table])
    server = RTCServer(
        lambda: TurnRunner(llm, ToolExecutor(registry), system_prompt="Book."),
        speech=fake_speech(),
        config=config(max_sessions=1, shutdown_grace=0.5),
    )
    async with server:
        for n in range(2):  # each leaves while its booking runs on
            async with raw_client(server.url, from_address=f"127.0.5.{n + 1}") as client:
                await client.connect()
                await client.send({"type": "text", "text": "A table for Ada"})
                await client.wait_for("tool_call_started")
            await until(lambda: server.active_sessions == 0)  # its live slot is free
        async with raw_client(server.url, from_address="127.0.5.9") as client:
            await client.offer()
            error = await client.wait_for("error")
            assert error["code"] == "server_full" and "still closing 2" in error["message"]
            assert await client.wait_closed() == 1013
