"""Edge cases of resume and admission: what reaches the client in `bad_candidate`, what counts as
user activity, resumes that drop or are refused, clients leaving before the answer, the cap on
connections still opening."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc.rtc import RTCServer
from llmrtc.testing import RecordingHooks, ScriptedLLM

from .conftest import config, fake_speech, raw_client, settled

pytestmark = pytest.mark.anyio


def runners(llm: ScriptedLLM) -> Any:
    from llmrtc import ToolExecutor, ToolRegistry
    from llmrtc.agent import TurnRunner

    return lambda: TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")


async def test_bad_candidate_errors_never_carry_python_or_aiortc_text() -> None:
    async with (
        RTCServer(runners(ScriptedLLM([])), speech=fake_speech(), config=config()) as server,
        raw_client(server.url) as client,
    ):
        await client.connect()
        lines = [
            "candidate:1 1 udp 1 1.2.3.4 notaport typ host",
            "candidate:1 x udp y 1.2.3.4 5000 typ host",
            "candidate:1 1 udp 1 1.2.3.4 5000 typ host",
        ]
        sent = 0
        for line in lines:
            for mid, index in (("0", 0), ("zz", 7)):
                candidate = {"candidate": line, "sdpMid": mid, "sdpMLineIndex": index}
                await client.send({"type": "ice", "candidate": candidate})
                sent += 1
        await client.send({"type": "ping", "id": "after"})
        await client.wait_for("pong", id="after")
        errors = client.of_type("error")
        assert errors and all(e["code"] == "bad_candidate" for e in errors)
        for error in errors:
            assert "invalid literal" not in error["message"]
            assert "int()" not in error["message"]
        assert client.close_code is None


async def test_pings_alone_do_not_keep_a_session_alive() -> None:
    async with (
        RTCServer(
            runners(ScriptedLLM([])), speech=fake_speech(), config=config(idle_timeout=1.5)
        ) as server,
        raw_client(server.url) as client,
    ):
        await client.connect()
        with anyio.fail_after(15):
            for n in range(40):
                if client.close_code is not None:
                    break
                await client.send({"type": "ping", "id": str(n)})
                await anyio.sleep(0.25)
        assert client.of_type("error")[-1]["code"] == "idle_timeout"


async def first_session(url: str) -> tuple[str, str]:
    """A session that spoke once and vanished: its (session_id, resume_token)."""
    async with raw_client(url) as client:
        opening = await client.connect()
        await client.send({"type": "text", "text": "Hi"})
        await client.wait_for("turn_completed")
    return opening["session_id"], opening["resume_token"]


async def test_a_resume_refused_in_the_shutdown_grace_leaves_the_live_session_alone() -> None:
    llm = ScriptedLLM(["One.", "Two."])
    server = RTCServer(runners(llm), speech=fake_speech(), config=config(shutdown_grace=5))
    async with server, raw_client(server.url) as live:
        opening = await live.connect()
        server.stop_admitting()
        async with raw_client(server.url) as resumer:
            await resumer.send(
                {
                    "type": "resume",
                    "session_id": opening["session_id"],
                    "token": opening["resume_token"],
                }
            )
            await resumer.offer()
            assert (await resumer.wait_for("error"))["code"] == "shutting_down"
        await anyio.sleep(0.5)
        assert server.active_sessions == 1 and live.close_code is None
        await live.send({"type": "text", "text": "Still here?"})
        assert (await live.wait_for("turn_completed"))["text"] == "One."
        await live.send({"type": "end"})
        await live.wait_closed()


async def test_a_resume_dropped_before_the_answer_can_be_tried_again_with_the_same_token() -> None:
    hooks = RecordingHooks()
    llm = ScriptedLLM(["First.", "Second."])
    async with RTCServer(
        runners(llm), speech=fake_speech(), config=config(), hooks=hooks
    ) as server:
        session_id, token = await first_session(server.url)
        await settled(server)
        async with raw_client(server.url) as dropped:
            await dropped.send({"type": "resume", "session_id": session_id, "token": token})
            await dropped.offer()
            assert dropped.ws is not None
            await dropped.ws.close()  # gone before the answer
        await settled(server)
        async with raw_client(server.url) as again:
            opening = await again.connect(resume=(session_id, token))
            assert opening["resumed"] and opening["session_id"] == session_id
            await again.send({"type": "text", "text": "Back"})
            assert (await again.wait_for("turn_completed"))["text"] == "Second."
    # the client leaving before the answer is not a failure of the server
    assert "on_error" not in hooks.names()
    ends = [e for n, e in zip(hooks.names(), hooks.events, strict=True) if n == "on_session_end"]
    assert len(ends) == 3 and ends[1].reason == "vanished"  # the one dropped before the answer


async def test_the_token_a_resume_used_is_void_as_soon_as_the_session_answered() -> None:
    llm = ScriptedLLM(["First.", "Second."])
    async with RTCServer(
        runners(llm), speech=fake_speech(), config=config(resume_wait=0.5)
    ) as server:
        session_id, token = await first_session(server.url)
        await settled(server)
        # answered, but the client said nothing and opened no data channel yet
        async with raw_client(server.url) as silent:
            await silent.send({"type": "resume", "session_id": session_id, "token": token})
            await silent.offer(channel=False)
            opening = await silent.wait_for("session")
            assert opening["resumed"] and opening["resume_token"] != token
            await silent.wait_for("answer")
            # whoever else holds the old token cannot take the session in this window
            async with raw_client(server.url) as other:
                await other.send({"type": "resume", "session_id": session_id, "token": token})
                await other.offer()
                assert (await other.wait_for("error"))["code"] == "resume_refused"
            assert silent.close_code is None and server.active_sessions == 1
            new_token = opening["resume_token"]
            assert silent.ws is not None
            await silent.ws.close()
        await settled(server)
        async with raw_client(server.url) as stale:
            await stale.send({"type": "resume", "session_id": session_id, "token": token})
            await stale.offer()
            assert (await stale.wait_for("error"))["code"] == "resume_refused"
        async with raw_client(server.url) as fresh:
            assert (await fresh.connect(resume=(session_id, new_token)))["resumed"]
            await fresh.send({"type": "text", "text": "Back"})
            assert (await fresh.wait_for("turn_completed"))["text"] == "Second."


async def test_a_state_saved_by_an_older_server_loads_and_claims_with_its_token(
    tmp_path: Any,
) -> None:
    import json
    import sqlite3
    import time

    from llmrtc.rtc import InMemorySessionStore, SQLiteSessionStore
    from llmrtc.rtc.store import SessionState, hash_token

    # older servers kept the hash of the previous token beside the current one
    legacy = {
        "session_id": "s1",
        "token_hash": hash_token("new"),
        "previous_token_hash": hash_token("old"),
        "history": None,
        "playbook": None,
    }
    state = SessionState.model_validate_json(json.dumps(legacy))
    memory = InMemorySessionStore()
    await memory.save(state, ttl=60)
    assert await memory.claim("s1", "old") is None
    assert await memory.claim("s1", "new") == state
    # a row an older worker wrote, as it wrote it
    sqlite = SQLiteSessionStore(tmp_path / "s.db")
    with sqlite3.connect(tmp_path / "s.db") as db:
        row = ("s1", hash_token("new"), time.time() + 60, json.dumps(legacy))
        db.execute("INSERT INTO sessions VALUES (?, ?, ?, ?)", row)
    assert await sqlite.claim("s1", "old") is None
    claimed = await sqlite.claim("s1", "new")
    assert claimed is not None and claimed.token_hash == hash_token("new")
    sqlite.close()


async def test_a_connection_that_never_offers_is_closed_after_offer_timeout() -> None:
    server = RTCServer(
        runners(ScriptedLLM([])),
        speech=fake_speech(),
        config=config(offer_timeout=1.0, idle_timeout=300.0),
    )
    async with server, raw_client(server.url) as silent:
        started = anyio.current_time()
        assert await silent.wait_closed(timeout=20) == 1000
        assert silent.events[-1]["code"] == "idle_timeout"
        assert anyio.current_time() - started < 60  # far below idle_timeout


async def test_connections_still_opening_are_capped_at_four_per_session_slot() -> None:
    """At the cap, the newcomer is served and the oldest connection without a session (of the
    client holding the most) is closed to make room: idle sockets cannot lock others out."""
    from websockets.asyncio.client import connect

    server = RTCServer(
        runners(ScriptedLLM([])), speech=fake_speech(), config=config(max_sessions=1)
    )
    async with server:
        url = server.url.replace("http://", "ws://") + "ws"
        held = [await connect(url) for _ in range(4)]
        try:
            for connection in held:  # each is served: it answers a ping
                await connection.send('{"type": "ping", "id": "p"}')
                assert "pong" in str(await connection.recv())
            async with connect(url) as extra:
                await extra.send('{"type": "ping", "id": "p"}')
                assert "pong" in str(await extra.recv())  # the newcomer is served
                evicted = str(await held[0].recv())
                assert "server_full" in evicted and "to make room" in evicted
                with anyio.fail_after(10):
                    await held[0].wait_closed()
            await anyio.sleep(0.2)
            async with raw_client(server.url) as client:  # a slot is free again
                assert (await client.connect())["type"] == "session"
        finally:
            for connection in held:
                await connection.close()
