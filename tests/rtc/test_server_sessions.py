"""RTCServer sessions over real aiortc peers on 127.0.0.1: a playbook's stage events, resume
(right, wrong, expired and reused tokens; history and stage back on a new peer), a client
vanishing mid-tool (tools stopped with one result each, nothing left behind), the session
limit under concurrent admissions, idle timeout, shutdown with a live session, containment."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import TurnRunner
from llmrtc.llm.messages import AssistantMessage, ToolMessage, UserMessage
from llmrtc.playbook import PlaybookOrchestrator, load_playbook, load_playbook_tools
from llmrtc.rtc import InMemorySessionStore, RTCServer
from llmrtc.testing import RecordingHooks, ScriptedLLM

from .conftest import (
    config,
    fake_speech,
    own_threads,
    peer_connections,
    raw_client,
    settle_tasks,
    settled,
)

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


class Gate:
    """What the slow tool waits on, and what it saw."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[str] = []
        self.release = anyio.Event()


GATE = Gate()


@tool
async def slow_lookup(city: str) -> dict[str, Any]:
    """A lookup that waits for the test.

    Args:
        city: The city.
    """
    GATE.started.append(city)
    try:
        await GATE.release.wait()
    finally:
        GATE.finished.append(city)
    return {"city": city}


@pytest.fixture
def gate() -> Gate:
    global GATE
    GATE = Gate()
    return GATE


def runners(llm: ScriptedLLM, **options: Any) -> Any:
    def make() -> TurnRunner:
        return TurnRunner(
            llm,
            ToolExecutor(ToolRegistry([slow_lookup])),
            system_prompt="You answer weather questions.",
            **options,
        )

    return make


def weather_playbook(llm: ScriptedLLM) -> Any:
    playbook = load_playbook(ROOT / "playbooks" / "weather.yaml")
    registry = load_playbook_tools(playbook)

    def make() -> PlaybookOrchestrator:
        return PlaybookOrchestrator(playbook, llm, registry)

    return make


# Playbook and resume ---------------------------------------------------------------------------


async def test_a_playbook_session_resumes_with_its_history_and_stage_on_a_new_peer() -> None:
    llm = ScriptedLLM(
        [
            [ToolCall("w1", "lookupWeather", {"city": "Tokyo"})],
            "Sunny in Tokyo.",
            "Goodbye!",
            "You are welcome.",
        ]
    )
    store = InMemorySessionStore()
    async with RTCServer(
        weather_playbook(llm), speech=fake_speech(), config=config(), store=store
    ) as server:
        async with raw_client(server.url) as first:
            session = await first.connect()
            assert session["stage"] == "chat" and session["resumed"] is False
            assert session["history"] == []  # a new session: the page starts empty
            await first.send({"type": "text", "text": "Weather in Tokyo?"})
            await first.wait_for("turn_completed")
            finished = first.of_type("tool_call_finished")
            assert [(m["call_id"], m["status"]) for m in finished] == [("w1", "ok")]
            # heard to its end (text typed while it plays would interrupt it)
            await first.wait_for("agent_speech_ended")
            await first.send({"type": "text", "text": "Thanks, bye"})
            await first.wait_for("turn_completed", count=2)
            assert first.of_type("stage_changed") == [
                {"type": "stage_changed", "from_stage": "chat", "to_stage": "goodbye"}
            ]
        # the client vanished (no `end`): its state waits in the store
        with anyio.fail_after(10):
            while await store.load(session["session_id"]) is None:
                await anyio.sleep(0.02)
        assert server.active_sessions == 0

        token = (session["session_id"], session["resume_token"])
        async with raw_client(server.url) as again:
            resumed = await again.connect(resume=token)
            assert resumed["resumed"] is True and resumed["stage"] == "goodbye"
            assert resumed["session_id"] == session["session_id"]
            assert resumed["resume_token"] != session["resume_token"]
            # the page is given the conversation the agent restored, tool calls included (so
            # a reload redraws the timeline; no prompt, no arguments or results); the
            # playbook's own transition call is one of them, as it was live. "Goodbye!" was
            # still playing when the client vanished: the agent remembers an answer cut
            # before it was heard
            live_tools = [m["name"] for m in first.of_type("tool_call_finished")]
            assert resumed["history"] == [
                {"role": "user", "text": "Weather in Tokyo?", "interrupted": False},
                {"role": "assistant", "text": "Sunny in Tokyo.", "interrupted": False},
                {"role": "tool", "name": "lookupWeather", "status": "ok"},
                {"role": "user", "text": "Thanks, bye", "interrupted": False},
                {"role": "assistant", "text": "", "interrupted": True},
            ]
            assert live_tools == ["lookupWeather"]
            await again.send({"type": "text", "text": "Thank you"})
            done = await again.wait_for("turn_completed")
            assert done["text"] == "You are welcome."
            await again.send({"type": "end"})
            assert await again.wait_closed() == 1000
        sent = llm.requests[-1].messages[1:]
        assert [type(m) for m in sent] == [
            UserMessage,
            AssistantMessage,
            ToolMessage,
            AssistantMessage,
            UserMessage,
            AssistantMessage,
            UserMessage,
        ]
        # the old token was single-use, and `end` leaves nothing to resume
        for credentials in (token, (session["session_id"], resumed["resume_token"])):
            async with raw_client(server.url) as late:
                await late.send(
                    {"type": "resume", "session_id": credentials[0], "token": credentials[1]}
                )
                await late.offer()
                error = await late.wait_for("error")
                assert error["code"] == "resume_refused"
                assert await late.wait_closed() == 1008
        llm.assert_consumed()


async def test_resume_with_a_wrong_or_expired_token_is_refused_and_spoils_nothing() -> None:
    llm = ScriptedLLM(["Hi there.", "Still here."])
    now = [0.0]
    store = InMemorySessionStore(clock=lambda: now[0])  # expiry without waiting for it
    async with RTCServer(
        runners(llm), speech=fake_speech(), config=config(resume_ttl=60.0), store=store
    ) as server:
        async with raw_client(server.url) as first:
            session = await first.connect()
            await first.send({"type": "text", "text": "Hello"})
            await first.wait_for("turn_completed")
        session_id, token = session["session_id"], session["resume_token"]
        await settled(server)  # saved by then
        async with raw_client(server.url) as thief:
            await thief.send({"type": "resume", "session_id": session_id, "token": "x" * 43})
            await thief.offer()
            assert (await thief.wait_for("error"))["code"] == "resume_refused"
            assert await thief.wait_closed() == 1008
            assert not thief.of_type("session")
        async with raw_client(server.url) as owner:  # the owner still gets it
            assert (await owner.connect(resume=(session_id, token)))["resumed"] is True
            await owner.send({"type": "text", "text": "Are you there?"})
            assert (await owner.wait_for("turn_completed"))["text"] == "Still here."
        new_token = owner.of_type("session")[-1]["resume_token"]
        await settled(server)
        assert await store.load(session_id) is not None
        now[0] += 60.5  # past resume_ttl
        async with raw_client(server.url) as late:
            await late.send({"type": "resume", "session_id": session_id, "token": new_token})
            await late.offer()
            assert (await late.wait_for("error"))["code"] == "resume_refused"
    llm.assert_consumed()


async def test_a_resume_while_the_old_connection_lingers_takes_the_session_over() -> None:
    llm = ScriptedLLM(["One.", "Two."])
    async with (
        RTCServer(runners(llm), speech=fake_speech(), config=config()) as server,
        raw_client(server.url) as old,
    ):
        session = await old.connect()
        await old.send({"type": "text", "text": "first"})
        await old.wait_for("turn_completed")
        async with raw_client(server.url) as new:
            credentials = (session["session_id"], session["resume_token"])
            assert (await new.connect(resume=credentials))["resumed"] is True
            assert await old.wait_closed() == 1000
            # told why, so it does not try to resume what now lives on the new connection
            [replaced] = [m for m in old.of_type("error") if m["code"] == "session_replaced"]
            assert "another connection" in replaced["message"]
            await new.send({"type": "text", "text": "second"})
            assert (await new.wait_for("turn_completed"))["text"] == "Two."
            assert server.active_sessions == 1
    assert [type(m) for m in llm.requests[-1].messages[1:]] == [
        UserMessage,
        AssistantMessage,
        UserMessage,
    ]


# Disconnects, leaks, containment ---------------------------------------------------------------


async def test_a_client_vanishing_mid_tool_stops_its_tools_and_leaves_nothing(gate: Gate) -> None:
    llm = ScriptedLLM(
        [
            [
                ToolCall("a", "slow_lookup", {"city": "Oslo"}),
                ToolCall("b", "slow_lookup", {"city": "Lima"}),
            ]
        ]
    )
    store = InMemorySessionStore()
    baseline_tasks = len(asyncio.all_tasks())
    baseline_threads = own_threads()
    baseline_peers = peer_connections()
    async with RTCServer(
        runners(llm), speech=fake_speech(), config=config(), store=store
    ) as server:
        async with raw_client(server.url) as client:
            session = await client.connect()
            await client.send({"type": "text", "text": "Weather in Oslo and Lima?"})
            await client.wait_for("tool_call_started", call_id="a")
            await client.wait_for("tool_call_started", call_id="b")
            with anyio.fail_after(10):
                while len(gate.started) < 2:
                    await anyio.sleep(0.01)
        # the client is gone (WebSocket and peer closed without `end`)
        await settled(server)
        assert sorted(gate.finished) == ["Lima", "Oslo"]  # both stopped, not left running
        state = await store.load(session["session_id"])
        assert state is not None and state.history is not None
        tool_messages = [m for m in state.history["messages"] if m.get("role") == "tool"]
        assert sorted(m["call_id"] for m in tool_messages) == ["a", "b"]  # one result each
        assert [json.loads(m["content"])["status"] for m in tool_messages] == ["aborted"] * 2
    del client  # the test's own peer
    assert await settle_tasks(baseline_tasks) == baseline_tasks
    assert own_threads() <= baseline_threads
    assert peer_connections() == baseline_peers


async def test_a_failing_agent_factory_is_contained_to_its_connection() -> None:
    calls = 0
    llm = ScriptedLLM(["Fine."])

    def flaky() -> TurnRunner:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("factory bug: /secret/path")
        return runners(llm)()

    hooks = RecordingHooks()
    async with RTCServer(flaky, speech=fake_speech(), config=config(), hooks=hooks) as server:
        async with raw_client(server.url) as broken:
            await broken.offer()
            error = await broken.wait_for("error")
            assert error["code"] == "internal" and "secret" not in error["message"]
            assert await broken.wait_closed() == 1011
        assert server.active_sessions == 0
        async with raw_client(server.url) as fine:
            await fine.connect()
            await fine.send({"type": "text", "text": "Hello"})
            assert (await fine.wait_for("turn_completed"))["text"] == "Fine."
            await fine.send({"type": "end"})
            await fine.wait_closed()
    names = hooks.names()
    assert "on_error" in names and names.count("on_session_start") == 1
    assert names.count("on_session_end") == 1


class BrokenStage(TurnRunner):
    """A handler whose code fails once the session is under way (its stage lookup)."""

    @property
    def engine(self) -> Any:
        raise RuntimeError("handler bug: /secret/path")


async def test_a_session_failing_mid_way_is_contained_and_reported() -> None:
    llm = ScriptedLLM(["Fine."])
    made: list[str] = []

    def make() -> TurnRunner:
        made.append("x")
        kind = BrokenStage if len(made) == 1 else TurnRunner
        return kind(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")

    hooks = RecordingHooks()
    async with RTCServer(make, speech=fake_speech(), config=config(), hooks=hooks) as server:
        async with raw_client(server.url) as broken, raw_client(server.url) as fine:
            await broken.offer()
            error = await broken.wait_for("error")
            assert error["code"] == "internal" and "secret" not in error["message"]
            assert await broken.wait_closed() == 1011
            await fine.connect()
            await fine.send({"type": "text", "text": "Hello"})
            assert (await fine.wait_for("turn_completed"))["text"] == "Fine."
        await settled(server)
    errors = [
        event for name, event in zip(hooks.names(), hooks.events, strict=True) if name == "on_error"
    ]
    assert [event.where for event in errors] == ["rtc.session"]


# Admission, idle, shutdown ---------------------------------------------------------------------


async def test_concurrent_admissions_never_exceed_max_sessions() -> None:
    llm = ScriptedLLM([])
    async with RTCServer(
        runners(llm), speech=fake_speech(), config=config(max_sessions=2)
    ) as server:
        outcomes: list[str] = []
        peak = 0
        release = anyio.Event()

        async def one() -> None:
            nonlocal peak
            async with raw_client(server.url) as client:
                await client.offer()
                with anyio.fail_after(20):
                    while not (client.of_type("answer") or client.of_type("error")):
                        await anyio.sleep(0.01)
                peak = max(peak, server.active_sessions)
                errors = client.of_type("error")
                outcomes.append(errors[0]["code"] if errors else "admitted")
                if errors:
                    assert await client.wait_closed() == 1013
                else:
                    await release.wait()

        async with anyio.create_task_group() as group:
            for _ in range(6):
                group.start_soon(one)
            with anyio.fail_after(30):
                while len(outcomes) < 6:
                    await anyio.sleep(0.02)
            release.set()
        assert sorted(outcomes) == ["admitted"] * 2 + ["server_full"] * 4
        assert peak <= 2


async def test_an_idle_session_is_closed_and_stays_resumable() -> None:
    store = InMemorySessionStore()
    async with RTCServer(
        runners(ScriptedLLM([])),
        speech=fake_speech(),
        config=config(idle_timeout=2.0, offer_timeout=2.0),
        store=store,
    ) as server:
        async with raw_client(server.url) as client:
            session = await client.connect()
            assert await client.wait_closed(timeout=20) == 1000
            assert client.events[-1]["code"] == "idle_timeout"
        with anyio.fail_after(10):
            while await store.load(session["session_id"]) is None:
                await anyio.sleep(0.02)
        async with raw_client(server.url) as silent:  # never offers
            assert await silent.wait_closed(timeout=20) == 1000
            assert silent.events[-1]["code"] == "idle_timeout"


async def test_shutdown_refuses_new_sessions_and_closes_live_ones_after_the_grace() -> None:
    store = InMemorySessionStore()
    server = RTCServer(
        runners(ScriptedLLM([])),
        speech=fake_speech(),
        config=config(shutdown_grace=1.0),
        store=store,
    )
    await server.__aenter__()
    try:
        async with raw_client(server.url) as live:
            session = await live.connect()
            server.stop_admitting()
            async with raw_client(server.url) as late:
                await late.offer()
                assert (await late.wait_for("error"))["code"] == "shutting_down"
                assert await late.wait_closed() == 1001
            with anyio.move_on_after(0.3):
                await server.wait_idle()
            assert server.active_sessions == 1  # the live one goes on
            # leaving the server: after the grace, the live session is closed
            await server.__aexit__(None, None, None)
            assert await live.wait_closed() == 1001
            assert live.events[-1]["code"] == "shutting_down"
    finally:
        if server.admitting or server.active_sessions:
            await server.__aexit__(None, None, None)
    assert await store.load(session["session_id"]) is not None


async def test_a_media_connection_lost_under_a_live_websocket_ends_resumably() -> None:
    store = InMemorySessionStore()
    async with (
        RTCServer(
            runners(ScriptedLLM([])), speech=fake_speech(), config=config(), store=store
        ) as server,
        raw_client(server.url) as client,
    ):
        session = await client.connect()
        assert client.pc is not None
        await client.pc.close()  # the media goes; the WebSocket stays open
        assert await client.wait_closed(timeout=60) == 1001
        await settled(server)
        assert await store.load(session["session_id"]) is not None
