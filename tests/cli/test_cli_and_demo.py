"""The command line, the tools-file loader and the quickstart demo, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llmrtc.cli import main
from llmrtc.tools.loader import load_tools_file

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "demos" / "tools_quickstart.py"


def test_quickstart_demo_runs_and_shows_every_status() -> None:
    completed = subprocess.run(
        [sys.executable, str(DEMO)], capture_output=True, text=True, timeout=60, check=True
    )
    out = completed.stdout
    for expected in ("ok", "invalid_arguments", "not_found", "timeout", "aborted"):
        assert expected in out
    assert "did you mean 'lookupWeather'?" in out


def test_load_tools_file_collects_module_level_tools_in_order() -> None:
    registry = load_tools_file(DEMO)
    assert registry.names() == ["lookupWeather", "forecast", "save_note", "slow_report"]


def test_load_tools_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing\.py"):
        load_tools_file(tmp_path / "missing.py")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ValueError, match="defines no tools"):
        load_tools_file(empty)
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('bad import')\n")
    with pytest.raises(RuntimeError, match="bad import") as info:
        load_tools_file(broken)
    assert any("broken.py" in note for note in info.value.__notes__)


def test_load_tools_file_prefers_an_explicit_registry(tmp_path: Path) -> None:
    file = tmp_path / "tools.py"
    file.write_text(
        "from llmrtc import ToolRegistry, tool\n"
        "@tool\n"
        "def a() -> int:\n    '''A.'''\n    return 1\n"
        "@tool\n"
        "def b() -> int:\n    '''B.'''\n    return 2\n"
        "registry = ToolRegistry([b])\n"
    )
    assert load_tools_file(file).names() == ["b"]


def test_cli_tools_lists_and_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", str(DEMO)]) == 0
    out = capsys.readouterr().out
    assert "lookupWeather  (default policy, 2 s)" in out
    assert "save_note  (sequential, default timeout)" in out
    assert main(["tools", str(DEMO), "--json"]) == 0
    schemas = json.loads(capsys.readouterr().out)
    assert [s["function"]["name"] for s in schemas][:2] == ["lookupWeather", "forecast"]


def test_cli_tools_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", str(tmp_path / "nope.py")]) == 1
    assert "tools file not found" in capsys.readouterr().err


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).parent / "llmrtc"
    completed = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=True)
    assert completed.stdout.startswith("llmrtc ")


def test_otel_console_demo_prints_masked_spans() -> None:
    demo = ROOT / "demos" / "otel_console.py"
    plain = subprocess.run(
        [sys.executable, str(demo)], capture_output=True, text=True, timeout=60, check=True
    )
    assert plain.stdout.count('"name": "execute_tool ') == 4
    assert "gen_ai.tool.call.arguments" not in plain.stdout  # no content without consent
    content = subprocess.run(
        [sys.executable, str(demo), "--content"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "gen_ai.tool.call.arguments" in content.stdout
    assert "4111111111111111" not in content.stdout
    assert "llmrtc.tool.call.duration" in content.stdout


def test_text_agent_demo_survives_a_failing_model() -> None:
    import anyio

    from llmrtc.testing import ErrorReply, ScriptedOpenAIServer

    async def run() -> subprocess.CompletedProcess[bytes]:
        async with ScriptedOpenAIServer([ErrorReply(400, "model is down")]) as server:
            env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}
            return await anyio.run_process(
                [sys.executable, str(ROOT / "demos" / "text_agent.py"), "Weather?"],
                env=env,
                check=False,
            )

    completed = anyio.run(run)
    assert completed.returncode == 0, completed.stderr.decode()
    assert "[error:" in completed.stderr.decode()
    assert "model is down" in completed.stderr.decode()
    assert "(error;" in completed.stdout.decode()  # the turn ended with stop_reason "error"
