"""`llmrtc validate` and `llmrtc chat` with a playbook whose stages name a toolkit its tools
file defines at module level."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from llmrtc.cli import main
from llmrtc.testing import ScriptedOpenAIServer, text_reply

TOOLS = '''
from llmrtc.catalog import Toolkit
from llmrtc.tools import tool


@tool(namespace="billing")
def refund(payment_id: str) -> str:
    """Refund a card payment."""
    return "ok"


billing_kit = Toolkit(
    "billing_kit", tools=["billing.refund"], policy="Read the amount back first.", title="Billing"
)
'''

PLAYBOOK = """
id: demo
tools_file: tools.py
initial_stage: start
stages:
  - id: start
    system_prompt: Help.
    tools: [billing_kit]
    terminal: true
"""


def _files(tmp_path: Path) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "pb.yaml").write_text(PLAYBOOK)
    return tmp_path / "pb.yaml"


def test_validate_accepts_a_stage_naming_the_tools_files_toolkit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", str(_files(tmp_path))]) == 0, capsys.readouterr()
    assert "0 errors" in capsys.readouterr().out


@pytest.mark.anyio
async def test_chat_offers_the_toolkits_tools_and_its_policy(tmp_path: Path) -> None:
    playbook = _files(tmp_path)
    async with ScriptedOpenAIServer([text_reply("Sure.")]) as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "test-key",
            "XDG_CACHE_HOME": str(tmp_path / "cache"),
        }
        result = await anyio.run_process(
            [sys.executable, "-m", "llmrtc.cli", "chat", str(playbook)],
            input=b"refund pay_1\n",
            env=env,
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    body = server.requests[0].body
    assert [t["function"]["name"] for t in body["tools"]] == ["billing__refund"]
    assert "Billing: Read the amount back first." in body["messages"][0]["content"]


@pytest.mark.parametrize("limit", ["0", "-3", "many"])
def test_tools_search_refuses_a_limit_below_one_with_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limit: str
) -> None:
    (tmp_path / "tools.py").write_text(TOOLS)
    with pytest.raises(SystemExit) as exit_info:
        main(["tools", str(tmp_path / "tools.py"), "--search", "refund", "--limit", limit])
    assert exit_info.value.code == 2
    assert f"--limit: must be a whole number >= 1, got '{limit}'" in capsys.readouterr().err
