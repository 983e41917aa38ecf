"""`llmrtc serve PLAYBOOK` with `mcp_servers:`: the real command (fake speech and a scripted
model), a real WebRTC session (RTCTestClient), and the playbook's MCP server (written with
the `mcp` SDK) answering the model's tool call."""

from __future__ import annotations

import shutil
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from tests._requirements import require

require("mcp")
require("rtc")

sys.path.insert(0, str(Path(__file__).parent))
from test_serve import TURN_TIMEOUT, serve, write_script

from llmrtc.testing import FakeTTS, RTCTestClient

pytestmark = pytest.mark.anyio

SERVERS = Path(__file__).parents[1] / "mcp_servers"


async def test_serve_runs_a_tool_of_the_playbooks_mcp_server(tmp_path: Path) -> None:
    shutil.copy(SERVERS / "tools_server.py", tmp_path / "calc_server.py")
    playbook = tmp_path / "calc.yaml"
    playbook.write_text(
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
                command: '{sys.executable}'
                args: [calc_server.py]
            """
        )
    )
    call = {"call_id": "c1", "name": "mcp_calc__add", "arguments": {"a": 20, "b": 22}}
    script = write_script(tmp_path / "script.json", [[call], "It is 42."])
    async with serve(str(playbook), "--port", "0", "--fake-engines", script) as run:
        assert run.url is not None
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await client.send_text("What is 20 plus 22?")
            finished = await client.wait_for("tool_call_finished", timeout=TURN_TIMEOUT)
            assert finished["name"] == "mcp_calc.add" and finished["status"] == "ok"
            completed = await client.wait_for("turn_completed", timeout=TURN_TIMEOUT)
            assert completed["text"] == "It is 42."
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0
