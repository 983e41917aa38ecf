"""`llmrtc chat` asks on the terminal before a tool that needs approval runs: the next line
answers (`y`/`yes` approves, anything else denies, the model told "the user said no"); the
arguments shown have the tool's sensitive fields masked."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from llmrtc.testing import ScriptedOpenAIServer, text_reply, tool_call_reply

pytestmark = pytest.mark.anyio

TOOLS = '''
import os

from llmrtc import tool


@tool(needs_approval=True, sensitive_fields=("card",))
def refund(order_id: str, card: str) -> dict:
    """Refund an order to a card."""
    with open(os.environ["REFUNDS"], "a") as out:
        out.write(order_id + "\\n")
    return {"refunded": order_id}
'''


async def test_chat_asks_before_a_tool_that_needs_approval(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(TOOLS)
    script = [
        tool_call_reply([("c1", "refund", '{"order_id": "A7", "card": "4111-1111"}')]),
        text_reply("Refunded A7."),
        tool_call_reply([("c2", "refund", '{"order_id": "B2", "card": "4111-1111"}')]),
        text_reply("I did not refund B2."),
    ]
    async with ScriptedOpenAIServer(script) as api:
        env = {
            **os.environ,
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
            "REFUNDS": str(tmp_path / "refunds"),
            "OPENAI_BASE_URL": api.base_url,
            "OPENAI_API_KEY": "test-key",
        }
        with anyio.fail_after(60):
            result = await anyio.run_process(
                [sys.executable, "-m", "llmrtc.cli", "chat", "--tools", str(tools)],
                input=b"Refund A7 to my card\nyes\nAnd B2\nno\n",
                env=env,
                check=False,
            )
        last = api.requests[-1]
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    asked = [line for line in out.splitlines() if "[approve refund" in line]
    assert asked[0].strip() == '[approve refund {"order_id": "A7", "card": "***"}? y/N]'
    assert len(asked) == 2 and not any("4111" in line for line in asked)
    assert "bot> Refunded A7." in out and "bot> I did not refund B2." in out
    assert (tmp_path / "refunds").read_text().split() == ["A7"]
    tool_messages = [m for m in last.body["messages"] if m["role"] == "tool"]
    denied = json.loads(tool_messages[-1]["content"])
    assert denied["status"] == "denied" and "(the user said no)" in denied["error"]
