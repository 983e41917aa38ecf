"""`llmrtc mcp` serving LLM-backed tools (`UTIL_TOOLS`): they run on the default model, here
the real `openai` client against `ScriptedOpenAIServer` via OPENAI_BASE_URL (review R12 #4)."""

from __future__ import annotations

import os
import shlex
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from tests._requirements import require

require("mcp")

from llmrtc.testing import ScriptedOpenAIServer, text_reply

pytestmark = pytest.mark.anyio


def params(tools: Path, stderr: Path, env: dict[str, str]) -> object:
    """The server command, its stderr kept in a file (the SDK client does not expose it)."""
    from mcp import StdioServerParameters

    line = shlex.join([sys.executable, "-m", "llmrtc.cli", "mcp", str(tools)])
    return StdioServerParameters(
        command="/bin/sh", args=["-c", f"exec {line} 2>{shlex.quote(str(stderr))}"], env=env
    )


UTIL = """
from llmrtc.catalog import UTIL_TOOLS
summarize, classify, extract = UTIL_TOOLS
"""


async def test_llm_backed_tools_run_on_the_default_model(tmp_path: Path) -> None:
    from mcp import Client

    tools = tmp_path / "util.py"
    tools.write_text(textwrap.dedent(UTIL))
    stderr = tmp_path / "stderr.txt"
    async with ScriptedOpenAIServer([text_reply("Cats are long.")]) as server:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "test",
            "LLMRTC_MODEL": "scripted-model",
        }
        with anyio.fail_after(60):
            async with Client(params(tools, stderr, env)) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                (summarize,) = [name for name in names if "summarize" in name]
                result = await client.call_tool(summarize, {"text": "A long text about cats."})
        assert not result.is_error, stderr.read_text()
        assert result.content[0].text == "Cats are long."  # type: ignore[union-attr]
        (request,) = server.requests
        assert request.body["model"] == "scripted-model"
        assert "A long text about cats." in request.body["messages"][-1]["content"]


def test_the_default_model_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from llmrtc.cli.models import default_model_pool
    from llmrtc.llm.local import LOCAL_MODELS

    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LLMRTC_MODEL"):
        monkeypatch.delenv(key, raising=False)
    # Nothing is opened by building the pool (the offline model is not loaded here).
    assert default_model_pool().default_model == f"default/{LOCAL_MODELS['1.5b'].name}"
    monkeypatch.setenv("LLMRTC_MODEL", "0.5b")
    assert default_model_pool().default_model == f"default/{LOCAL_MODELS['0.5b'].name}"
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert default_model_pool().default_model == "default/0.5b"
    monkeypatch.delenv("LLMRTC_MODEL")
    assert default_model_pool().default_model == "default/gpt-4o-mini"
