"""A tools file's `RESOURCE_LIMITS` (per-resource limits for the commands that build their own
executor): read and checked by the loader, carried by `load_bot` to `build_handler`, and a
resource with no limit refused at startup by `llmrtc chat` and `llmrtc serve` with the line to
add. The commands run as real processes (a scripted OpenAI server for chat, `--fake-engines` for
serve); the executor behind them is the real one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from llmrtc.cli.bot import build_handler, load_bot, load_target
from llmrtc.cli.errors import CLIError
from llmrtc.playbook import Playbook, load_playbook
from llmrtc.playbook.loading import load_playbook_toolkit_tools, load_playbook_tools_file
from llmrtc.testing import ScriptedLLM, ScriptedOpenAIServer, text_reply, tool_call_reply
from llmrtc.tools.loader import load_tools_module

pytestmark = pytest.mark.anyio

# Two calls of `update_crm` in one batch run in parallel unless the "crm" limit holds one back:
# each records how many calls held the CRM at once (in the file SERVE_TEST_PEAKS names).
CRM_TOOLS = '''
import os

import anyio

from llmrtc import tool

running = 0


@tool(resources=("crm",))
async def update_crm(note: str) -> dict:
    """Write a note to the CRM."""
    global running
    running += 1
    peak = running
    await anyio.sleep(0.3)
    peak = max(peak, running)
    running -= 1
    with open(os.environ["CRM_TEST_PEAKS"], "a") as out:
        out.write(f"{peak}\\n")
    return {"saved": note}


@tool
def lookup(order_id: str) -> dict:
    """Look an order up."""
    return {"order_id": order_id}
'''
LIMITS = 'RESOURCE_LIMITS = {"crm": 1}\n'
FIX = 'RESOURCE_LIMITS = {"crm": N}'
NO_API = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "test-key"}
TIMEOUT = 60.0  # generous: a loaded 2-core machine is slow to start a process


def _tools(tmp_path: Path, tail: str = LIMITS, name: str = "tools.py") -> Path:
    path = tmp_path / name
    path.write_text(CRM_TOOLS + tail)
    return path


def _playbook(tmp_path: Path, tools: Path) -> Path:
    path = tmp_path / "crm.yaml"
    path.write_text(
        f"id: crm\ntools_file: {tools.name}\ninitial_stage: notes\n"
        "stages:\n  - id: notes\n    system_prompt: Take notes.\n    tools: [update_crm, lookup]\n"
    )
    return path


# The loader ----------------------------------------------------------------------------------


def test_the_loader_reads_resource_limits_read_only(tmp_path: Path) -> None:
    loaded = load_tools_module(_tools(tmp_path, 'RESOURCE_LIMITS = {"crm": 2, "erp.v2": 5}\n'))
    assert loaded.resource_limits == {"crm": 2, "erp.v2": 5}
    assert loaded.path == (tmp_path / "tools.py").resolve()
    with pytest.raises(TypeError):
        loaded.resource_limits["crm"] = 9  # type: ignore[index]
    assert load_tools_module(_tools(tmp_path, "", "bare.py")).resource_limits is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('[("crm", 2)]', "RESOURCE_LIMITS must be a dict of resource name to limit"),
        ('{"crm": 0}', "RESOURCE_LIMITS['crm'] must be an integer >= 1"),
        ('{"crm": True}', "RESOURCE_LIMITS['crm'] must be an integer >= 1"),
        ('{"crm": "2"}', "RESOURCE_LIMITS['crm'] must be an integer >= 1"),
        ('{"crm": 1.5}', "RESOURCE_LIMITS['crm'] must be an integer >= 1"),
        ('{"the crm": 2}', "RESOURCE_LIMITS: 'the crm' is not a resource name"),
        ("{3: 2}", "RESOURCE_LIMITS: 3 is not a resource name"),
    ],
)
def test_a_bad_resource_limits_is_a_precise_error_naming_the_file(
    tmp_path: Path, value: str, says: str
) -> None:
    path = _tools(tmp_path, f"RESOURCE_LIMITS = {value}\n")
    with pytest.raises(ValueError) as raised:
        load_tools_module(path)
    assert str(raised.value).startswith(f"{path.resolve()}: {says}")


def test_a_playbook_tools_file_gives_its_limits_and_the_old_api_is_unchanged(
    tmp_path: Path,
) -> None:
    playbook = load_playbook(_playbook(tmp_path, _tools(tmp_path)))
    loaded = load_playbook_tools_file(playbook)
    assert loaded.resource_limits == {"crm": 1}
    registry, toolkits = load_playbook_toolkit_tools(playbook)
    assert sorted(registry.names()) == ["lookup", "update_crm"] and toolkits == []
    with pytest.raises(ValueError, match="names no tools_file"):
        load_playbook_tools_file(
            Playbook.model_validate({"id": "p", "initial_stage": "a", "stages": [{"id": "a"}]})
        )


# load_bot and build_handler ------------------------------------------------------------------


def test_load_bot_carries_the_limits_of_either_tools_file(tmp_path: Path) -> None:
    tools = _tools(tmp_path)
    assert load_target(str(tools)).resource_limits == {"crm": 1}
    assert load_bot(str(_playbook(tmp_path, tools)), None).resource_limits == {"crm": 1}
    other = _tools(tmp_path, 'RESOURCE_LIMITS = {"crm": 3}\n', "other.py")
    # An explicit --tools wins over the playbook's own file, limits included.
    assert load_bot(str(tmp_path / "crm.yaml"), str(other)).resource_limits == {"crm": 3}
    assert load_target(None).resource_limits is None


def test_a_resource_with_no_limit_is_a_cli_error_saying_what_to_add(tmp_path: Path) -> None:
    tools = _tools(tmp_path, "")
    with pytest.raises(CLIError) as raised:
        load_target(str(tools))
    text = raised.value.text
    assert "'update_crm' holds 'crm'" in text
    assert f"Add it in {tools.resolve()}:\n  {FIX}\n" in text
    # A file with limits for other resources is told the whole line, its own entries kept.
    tools = _tools(tmp_path, 'RESOURCE_LIMITS = {"erp": 4}\n', "partial.py")
    with pytest.raises(CLIError) as raised:
        load_bot(str(_playbook(tmp_path, tools)), None)
    assert f'Change it in {tools.resolve()}:\n  RESOURCE_LIMITS = {{"erp": 4, "crm": N}}\n' in (
        raised.value.text
    )


def test_a_bad_resource_limits_is_a_cli_error(tmp_path: Path) -> None:
    tools = _tools(tmp_path, 'RESOURCE_LIMITS = {"crm": 0}\n')
    with pytest.raises(CLIError, match=r"RESOURCE_LIMITS\['crm'\] must be an integer >= 1"):
        load_target(str(tools))


async def test_build_handler_gives_the_limits_to_the_runner_and_the_orchestrator(
    tmp_path: Path,
) -> None:
    tools = _tools(tmp_path)
    for bot in (load_target(str(tools)), load_bot(str(_playbook(tmp_path, tools)), None)):
        llm = ScriptedLLM(["Hello."])
        handler = build_handler(
            llm, bot.registry, bot.playbook, resource_limits=bot.resource_limits
        )
        assert dict(handler.executor.resource_limits) == {"crm": 1}  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="with no limit"):
            build_handler(llm, bot.registry, bot.playbook)


# The commands --------------------------------------------------------------------------------


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "CRM_TEST_PEAKS": str(tmp_path / "peaks"),
        **extra,
    }


async def test_chat_runs_resource_tools_within_the_files_limit(tmp_path: Path) -> None:
    calls = [("c1", "update_crm", '{"note": "a"}'), ("c2", "update_crm", '{"note": "b"}')]
    async with ScriptedOpenAIServer([tool_call_reply(calls), text_reply("Saved both.")]) as api:
        env = _env(tmp_path, OPENAI_BASE_URL=api.base_url, OPENAI_API_KEY="test-key")
        with anyio.fail_after(TIMEOUT):
            result = await anyio.run_process(
                [sys.executable, "-m", "llmrtc.cli", "chat", "--tools", str(_tools(tmp_path))],
                input=b"Note a and b\n",
                env=env,
                check=False,
            )
    assert result.returncode == 0, result.stderr.decode()
    assert "bot> Saved both." in result.stdout.decode()
    # Both ran, one at a time: the limit of 1 reached the executor (unlimited, they overlap).
    assert (tmp_path / "peaks").read_text().split() == ["1", "1"]


async def test_chat_refuses_a_resource_with_no_limit_before_the_model(tmp_path: Path) -> None:
    tools = _tools(tmp_path, "")
    with anyio.fail_after(TIMEOUT):
        result = await anyio.run_process(
            [sys.executable, "-m", "llmrtc.cli", "chat", "--tools", str(tools)],
            input=b"hello\n",
            env=_env(tmp_path, **NO_API),
            check=False,
        )
    err = result.stderr.decode()
    assert result.returncode == 1
    assert err.startswith("error: resources with no limit: 'update_crm' holds 'crm'")
    assert FIX in err and "Traceback" not in err and "127.0.0.1:9" not in err
    assert result.stdout == b""


async def test_voice_refuses_a_resource_with_no_limit_before_any_model(tmp_path: Path) -> None:
    tools = _tools(tmp_path, "")
    command = [sys.executable, "-m", "llmrtc.cli", "voice", str(tools), "--text", "hello"]
    command += ["--out", str(tmp_path / "reply.wav")]
    with anyio.fail_after(TIMEOUT):
        result = await anyio.run_process(command, env=_env(tmp_path, **NO_API), check=False)
    err = result.stderr.decode()
    assert result.returncode == 1
    assert err.startswith("error: resources with no limit: 'update_crm' holds 'crm'")
    assert FIX in err and "Traceback" not in err
    assert not (tmp_path / "reply.wav").exists()


async def _serve(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    """`llmrtc serve ARGS` to its end (for commands that stop by themselves)."""
    with anyio.fail_after(TIMEOUT):
        result = await anyio.run_process(
            [sys.executable, "-m", "llmrtc.cli", "serve", *args],
            env=_env(tmp_path),
            check=False,
        )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]])
async def test_serve_refuses_a_resource_with_no_limit_at_startup(
    tmp_path: Path, workers: list[str]
) -> None:
    tools = _tools(tmp_path, "")
    code, out, err = await _serve(tmp_path, str(tools), "--port", "0", "--fake-engines", *workers)
    assert code == 1
    assert err.startswith("error: resources with no limit: 'update_crm' holds 'crm'")
    assert f"Add it in {tools.resolve()}:\n  {FIX}\n" in err
    assert "Traceback" not in err and out == ""


@pytest.mark.requires("rtc")
async def test_serve_sessions_run_resource_tools_within_the_files_limit(tmp_path: Path) -> None:
    from llmrtc.testing import FakeTTS, RTCTestClient

    calls: list[dict[str, Any]] = [
        {"call_id": f"c{i}", "name": "update_crm", "arguments": {"note": n}}
        for i, n in ((1, "a"), (2, "b"))
    ]
    script = tmp_path / "script.json"
    script.write_text(json.dumps([calls, "Saved both."]))
    command = [sys.executable, "-m", "llmrtc.cli", "serve", str(_tools(tmp_path))]
    command += ["--port", "0", f"--fake-engines={script}"]
    process = await anyio.open_process(command, env=_env(tmp_path), stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        line = b""
        with anyio.fail_after(TIMEOUT):
            while b"listening on " not in line:
                line += await process.stdout.receive()
        url = line.decode().split("listening on ", 1)[1].split()[0]
        async with RTCTestClient(url, tts=FakeTTS()) as client:
            await client.send_text("Note a and b")
            await client.wait_for("turn_completed", timeout=TIMEOUT)
        assert (tmp_path / "peaks").read_text().split() == ["1", "1"]
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(TIMEOUT):
            assert await process.wait() == 0
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()
