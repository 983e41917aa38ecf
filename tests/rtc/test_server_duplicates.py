"""A repeated booking over WebRTC: the agent factory builds its runner without a session id, yet
the session's repeat of a `reuse` call is answered with the first call's result (the tool ran
once), and its `tool_call_finished` names the call it reused (`reused_from`)."""

from __future__ import annotations

import pytest

from llmrtc import ToolCall, ToolContext, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import TurnRunner
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

BOOKED: list[tuple[str | None, str]] = []


@tool(on_duplicate="reuse", side_effects=["books a table"])
async def book_table(restaurant: str, ctx: ToolContext) -> dict[str, str]:
    """Book a table.

    Args:
        restaurant: Where.
    """
    BOOKED.append((ctx.session_id, restaurant))
    return {"booked": restaurant}


async def test_a_repeated_booking_runs_once_and_the_client_is_told_it_was_reused() -> None:
    from llmrtc.rtc import RTCServer

    from .conftest import config, fake_speech, raw_client

    BOOKED.clear()
    script = [
        [ToolCall("c1", "book_table", {"restaurant": "Nopa"})],
        "Booked.",
        [ToolCall("c2", "book_table", '{ "restaurant":  "Nopa" }')],
        "Still booked.",
    ]

    def make() -> TurnRunner:
        executor = ToolExecutor(ToolRegistry([book_table]))
        return TurnRunner(ScriptedLLM(list(script)), executor, system_prompt="Be brief.")

    server = RTCServer(make, speech=fake_speech(), config=config())
    async with server, raw_client(server.url) as client:
        session = await client.connect()
        await client.send({"type": "text", "text": "Book Nopa"})
        first = await client.wait_for("tool_call_finished", call_id="c1")
        await client.wait_for("turn_completed")
        await client.send({"type": "text", "text": "Book Nopa again"})
        repeat = await client.wait_for("tool_call_finished", call_id="c2")
        await client.wait_for("turn_completed", count=2)
    assert first["status"] == "ok" and first["reused_from"] is None
    assert repeat["status"] == "ok" and repeat["reused_from"] == "c1", repeat
    assert len(BOOKED) == 1 and BOOKED[0][1] == "Nopa"
    assert BOOKED[0][0] is not None and BOOKED[0][0] == session["session_id"]
