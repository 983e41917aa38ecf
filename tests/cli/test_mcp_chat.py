"""`llmrtc chat PLAYBOOK` with `mcp_servers:`: the real command, the real openai client against
a scripted server, and the playbook's MCP server (written with the `mcp` SDK) started for the
session; the model's call reaches the server and its result the model."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from tests._requirements import require

require("mcp")

from llmrtc.testing import ScriptedOpenAIServer, text_reply, tool_call_reply

pytestmark = pytest.mark.anyio

SERVERS = Path(__file__).parents[1] / "mcp_servers"


def playbook(tmp_path: Path, command: str) -> Path:
    shutil.copy(SERVERS / "tools_server.py", tmp_path / "calc_server.py")
    path = tmp_path / "calc.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            id: calc
            initial_stage: main
            stages:
              - id: main
                system_prompt: Use the calculator.
                tools: [mcp_calc.add]
                terminal: true
            mcp_servers:
              - name: calc
                command: '{command}'
                args: [calc_server.py]
            """
        )
    )
    return path


def env(server: ScriptedOpenAIServer, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }


async def test_chat_calls_a_tool_of_the_playbooks_mcp_server(tmp_path: Path) -> None:
    replies = [
        tool_call_reply([("c1", "mcp_calc__add", '{"a": 20, "b": 22}')]),
        text_reply("It is 42."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        done = await anyio.run_process(
            [sys.executable, "-m", "llmrtc.cli", "chat", str(playbook(tmp_path, sys.executable))],
            input=b"what is 20 + 22?\n",
            env=env(server, tmp_path),
            check=False,
        )
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "It is 42." in done.stdout.decode()
    offered = [t["function"]["name"] for t in server.requests[0].body["tools"]]
    assert "mcp_calc__add" in offered
    tool_message = server.requests[1].body["messages"][-1]
    assert tool_message["role"] == "tool" and json.loads(tool_message["content"]) == {"result": 42}


async def test_chat_says_which_mcp_server_cannot_start(tmp_path: Path) -> None:
    async with ScriptedOpenAIServer([]) as server:
        done = await anyio.run_process(
            [sys.executable, "-m", "llmrtc.cli", "chat", str(playbook(tmp_path, "/no/such/py"))],
            input=b"hi\n",
            env=env(server, tmp_path),
            check=False,
        )
    err = done.stderr.decode()
    assert done.returncode == 1
    assert "error: MCP server 'calc' (command ['/no/such/py', 'calc_server.py'])" in err
    assert "Traceback" not in err
