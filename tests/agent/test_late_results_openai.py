"""A background call through the real `openai` client against `ScriptedOpenAIServer`, whose
history check is the OpenAI chat API's: the turn that starts a background call answers at
once, the user asks something else, the call lands, and the update turn tells its result. Every
request (the `"running"` tool message, then the late result's system note) is accepted."""

from __future__ import annotations

import json
from typing import Any

import anyio
import openai
import pytest

from llmrtc import OpenAIProvider, TextDelta, ToolExecutor, ToolRegistry, TurnRunner, tool
from llmrtc.testing.openai_server import ScriptedOpenAIServer, text_reply, tool_call_reply

pytestmark = pytest.mark.anyio

gate: dict[str, anyio.Event] = {}


@tool(background=True, timeout=60.0)
async def bookTable(restaurant: str, time: str) -> dict[str, Any]:
    """Book a table at a restaurant."""
    with anyio.fail_after(10):
        await gate["open"].wait()
    await anyio.sleep(0.2)
    return {"confirmed": True, "reference": "A12"}


async def test_a_background_call_and_its_late_result_are_accepted_by_the_chat_api() -> None:
    gate["open"] = anyio.Event()
    replies = [
        tool_call_reply([("call_1", "bookTable", '{"restaurant": "Nopa", "time": "7 pm"}')]),
        text_reply("I'm booking Nopa for 7 pm now."),
        text_reply("It is sunny in Paris."),
        text_reply("Your table at Nopa is booked, reference A12."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        llm = OpenAIProvider("scripted-model", base_url=server.base_url, api_key="test")
        runner = TurnRunner(llm, ToolExecutor(ToolRegistry([bookTable])), system_prompt="Brief.")
        first = [e async for e in runner.run_turn("Book Nopa at 7 pm")]
        assert "".join(e.text for e in first if isinstance(e, TextDelta)).startswith("I'm booking")
        second = [e async for e in runner.run_turn("And the weather in Paris?")]
        assert "sunny" in "".join(e.text for e in second if isinstance(e, TextDelta))
        gate["open"].set()
        with anyio.fail_after(10):
            async for landed in runner.late_results():
                assert landed.call_id == "call_1" and landed.status == "ok"
                break
        update = [e async for e in runner.run_update_turn()]
        assert "A12" in "".join(e.text for e in update if isinstance(e, TextDelta))
    assert server.refused == [] and server.unexpected == []
    sent = server.requests[-1].body["messages"]
    roles = [m["role"] for m in sent]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "system",
    ]
    assert json.loads(sent[3]["content"])["status"] == "running"
    assert "call_1" in sent[-1]["content"] and "A12" in sent[-1]["content"]
    # Nothing more to tell: no request.
    assert [e async for e in runner.run_update_turn()] == []


async def test_the_server_refuses_a_history_the_chat_api_rejects() -> None:
    async with ScriptedOpenAIServer([text_reply("never sent")]) as server:
        bad = {
            "model": "m",
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "system", "content": "late"},
                {"role": "tool", "tool_call_id": "c1", "content": "{}"},
            ],
        }
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(**bad)
        await client.close()
        assert "tool_call_ids did not have response messages: c1" in str(refused.value)
        assert len(server.refused) == 1 and len(server.replies) == 1  # the reply is kept
