"""Background tool calls across an RTC session's life, over real aiortc peers on 127.0.0.1: a
client that vanishes while a background call runs and resumes on the same server gets the
call's result as a late result of the resumed session, exactly once; a session that ends for
good (`end`) stops the call at once; one that waits for a resume keeps it running until
`resume_ttl` passes unclaimed, and then stops it; leaving the server stops it too.

The handler is a `TurnRunner` whose `aclose()` closes its executor (what the server calls when
a session ends for good)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc import ToolCall, ToolContext, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import TurnRunner
from llmrtc.llm.messages import SystemMessage
from llmrtc.rtc import InMemorySessionStore, RTCServer
from llmrtc.testing import ScriptedLLM

from .conftest import config, fake_speech, raw_client, settled

pytestmark = pytest.mark.anyio


class Booking:
    """What the background tool waits on, and what it saw."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.runs: list[str] = []
        self.signals: list[Any] = []


BOOKING = Booking()


@tool(background=True, timeout=60.0)
async def bookTable(restaurant: str, ctx: ToolContext) -> dict[str, Any]:
    """Book a table.

    Args:
        restaurant: Where.
    """
    BOOKING.runs.append(ctx.call_id)
    BOOKING.signals.append(ctx.abort_signal)
    await BOOKING.release.wait()
    return {"confirmed": True, "reference": "A12"}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    global BOOKING
    BOOKING = Booking()


class ClosingRunner(TurnRunner):
    """A runner that stops its background calls when closed."""

    async def aclose(self) -> None:
        await self.executor.aclose(reason="session ended")


def runners(llm: ScriptedLLM, made: list[ClosingRunner]) -> Any:
    def make() -> ClosingRunner:
        runner = ClosingRunner(
            llm, ToolExecutor(ToolRegistry([bookTable])), system_prompt="You book tables."
        )
        made.append(runner)
        return runner

    return make


BOOK = ToolCall("b1", "bookTable", {"restaurant": "Nopa"})


async def until(check: Any, timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not check():
            await anyio.sleep(0.02)


async def test_a_resume_on_the_same_server_gets_the_running_calls_result_once() -> None:
    llm = ScriptedLLM([[BOOK], "I'm booking it.", "Yes: booked, reference A12."])
    made: list[ClosingRunner] = []
    store = InMemorySessionStore()
    async with RTCServer(
        runners(llm, made), speech=fake_speech(), config=config(), store=store
    ) as server:
        async with raw_client(server.url) as first:
            session = await first.connect()
            await first.send({"type": "text", "text": "Book Nopa"})
            await first.wait_for("turn_completed")
            await first.wait_for("agent_speech_ended")
            assert BOOKING.runs == ["b1"]
        # vanished: the state waits, the call runs on
        await settled(server)
        state = await store.load(session["session_id"])
        assert state is not None and state.background is not None
        assert [c["call_id"] for c in state.background["running"]] == ["b1"]
        assert not BOOKING.signals[0].aborted

        credentials = (session["session_id"], session["resume_token"])
        async with raw_client(server.url) as again:
            assert (await again.connect(resume=credentials))["resumed"] is True
            old, new = made
            assert [c.call_id for c in new.executor.background_calls] == ["b1"]
            BOOKING.release.set()
            # The call reports to the relay of the connection that started it: that relay
            # now sends to this one.
            finished = await again.wait_for("tool_call_finished")
            assert (finished["call_id"], finished["status"]) == ("b1", "ok")
            # The agent tells it at once, in an update turn of the resumed session.
            done = await again.wait_for("turn_completed")
            assert done["text"] == "Yes: booked, reference A12."
            assert not old.late_results_waiting and not new.late_results_waiting
            await again.send({"type": "end"})
            assert await again.wait_closed() == 1000
        await settled(server)
    request = llm.requests[-1].messages
    notes = [m for m in request if isinstance(m, SystemMessage) and "b1" in m.content]
    assert len(notes) == 1 and '"reference":"A12"' in notes[0].content
    assert "(status: ok)" in notes[0].content
    assert BOOKING.runs == ["b1"]  # ran once, never restarted
    assert not BOOKING.signals[0].aborted  # it finished; nothing stopped it
    llm.assert_consumed()


async def test_a_session_that_ends_for_good_stops_its_background_call() -> None:
    llm = ScriptedLLM([[BOOK], "I'm booking it."])
    made: list[ClosingRunner] = []
    async with RTCServer(runners(llm, made), speech=fake_speech(), config=config()) as server:
        async with raw_client(server.url) as client:
            await client.connect()
            await client.send({"type": "text", "text": "Book Nopa"})
            await client.wait_for("turn_completed")
            await until(lambda: bool(BOOKING.signals))
            await client.send({"type": "end"})
            assert await client.wait_closed() == 1000
        await settled(server)
        await until(lambda: BOOKING.signals[0].aborted)  # the handler saw the abort
        [runner] = made
        assert runner.executor.background_calls == ()
        [final] = runner.executor.take_background_results()
        assert (final.call_id, final.status) == ("b1", "aborted")


async def test_a_waiting_session_keeps_the_call_until_the_resume_ttl_passes() -> None:
    llm = ScriptedLLM([[BOOK], "I'm booking it."])
    made: list[ClosingRunner] = []
    store = InMemorySessionStore()
    async with RTCServer(
        runners(llm, made), speech=fake_speech(), config=config(resume_ttl=6.0), store=store
    ) as server:
        async with raw_client(server.url) as client:
            session = await client.connect()
            await client.send({"type": "text", "text": "Book Nopa"})
            await client.wait_for("turn_completed")
            await until(lambda: bool(BOOKING.signals))
        await settled(server)
        assert await store.load(session["session_id"]) is not None
        assert not BOOKING.signals[0].aborted  # waiting for a resume: it runs on
        # Unclaimed past the TTL: stopped (generous: a loaded machine settles slowly).
        await until(lambda: BOOKING.signals[0].aborted, timeout=30.0)
        assert await store.load(session["session_id"]) is None
        [final] = made[0].executor.take_background_results()
        assert final.status == "aborted"


async def test_leaving_the_server_stops_the_calls_of_waiting_sessions() -> None:
    llm = ScriptedLLM([[BOOK], "I'm booking it."])
    made: list[ClosingRunner] = []
    async with RTCServer(runners(llm, made), speech=fake_speech(), config=config()) as server:
        async with raw_client(server.url) as client:
            await client.connect()
            await client.send({"type": "text", "text": "Book Nopa"})
            await client.wait_for("turn_completed")
            await until(lambda: bool(BOOKING.signals))
        await settled(server)
        assert not BOOKING.signals[0].aborted
    assert BOOKING.signals[0].aborted
    assert made[0].executor.background_calls == ()
