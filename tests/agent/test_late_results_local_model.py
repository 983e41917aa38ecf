"""A late result on the real offline model (Qwen2.5-Coder 1.5B through xllamacpp): the history
with a background call's `"running"` answer and its late result (a system note) is accepted,
and the update turn tells the user the outcome.

Select with `-m local_model`; skipped when the runtime or the model parts are missing (a failure
in CI, under CI=true)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from llmrtc import (
    TextDelta,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    TurnCompleted,
    TurnFailed,
    TurnRunner,
    tool,
)
from llmrtc.testing import ScriptedLLM
from llmrtc.testing.scripted import check_chat_messages
from tests._requirements import require

pytestmark = [pytest.mark.requires("local_model"), pytest.mark.anyio]
require("local_model")  # the imports below need the runtime

from llmrtc.llm.default import local_provider
from llmrtc.llm.local import LocalModelServer, ensure_model_file

SYSTEM = "You are a helpful assistant. Use the tools when they help. Answer briefly."
gate: dict[str, anyio.Event] = {}


@tool(background=True, timeout=60.0)
async def bookTable(restaurant: str, time: str) -> dict[str, Any]:
    """Book a table at a restaurant."""
    await gate["open"].wait()
    return {"confirmed": True, "reference": "A12", "restaurant": restaurant, "time": time}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[LocalModelServer]:
    ensure_model_file("1.5b")
    async with LocalModelServer("1.5b", n_ctx=2048) as running:
        yield running


async def test_the_offline_model_speaks_a_late_result(server: LocalModelServer) -> None:
    gate["open"] = anyio.Event()
    call = ToolCall("call_b1", "bookTable", {"restaurant": "Nopa", "time": "7 pm"})
    # The call itself is scripted (the model's choice is not what this tests); the update turn
    # is the real model's.
    runner = TurnRunner(
        ScriptedLLM([[call], "I'm booking your table at Nopa now."]),
        ToolExecutor(ToolRegistry([bookTable])),
        system_prompt=SYSTEM,
    )
    [event async for event in runner.run_turn("Book me a table at Nopa at 7 pm")]
    gate["open"].set()
    with anyio.fail_after(10):
        async for _ in runner.late_results():
            break
    runner.llm = local_provider(server)
    events = [event async for event in runner.run_update_turn()]
    spoken = "".join(e.text for e in events if isinstance(e, TextDelta))
    print(f"update turn: {spoken!r}")  # for -s runs
    assert not [e for e in events if isinstance(e, TurnFailed)], events
    done = events[-1]
    assert isinstance(done, TurnCompleted) and done.stop_reason == "stop"
    assert "A12" in spoken or "book" in spoken.lower() or "confirm" in spoken.lower(), spoken
    check_chat_messages(runner.history.for_request(SYSTEM))
