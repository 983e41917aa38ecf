"""`mcp_servers:` in a playbook: validated with where and what is allowed; stages name MCP
tools; `open_mcp_tools` connects the servers (a real SDK server), checks the stages again
with their tools, runs a playbook turn with them and follows `tools/list_changed`."""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from llmrtc import ToolCall, ToolRegistry, tool
from llmrtc.agent import ToolCallFinished
from llmrtc.playbook import PlaybookError, PlaybookOrchestrator, load_playbook
from llmrtc.testing import ScriptedLLM
from tests._requirements import require

pytestmark = pytest.mark.anyio

SERVERS = Path(__file__).parents[1] / "mcp_servers"


def write(tmp_path: Path, body: str, name: str = "bot.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def playbook_text(stage_tools: str, servers: str) -> str:
    return f"""\
id: shop
initial_stage: main
stages:
  - id: main
    system_prompt: Help.
    tools: {stage_tools}
mcp_servers:
{textwrap.indent(textwrap.dedent(servers), "  ")}
"""


@pytest.mark.parametrize(
    ("servers", "where", "what"),
    [
        ("- name: calc\n", "mcp_servers[0] (line 8)", "give either command"),
        (
            "- {name: calc, command: python, url: 'http://x/mcp'}\n",
            "mcp_servers[0] (line 8)",
            "not both or neither",
        ),
        ("- {name: 'my calc', command: python}\n", "mcp_servers[0].name (line 8)", "letters"),
        ("- {name: calc, url: 'ftp://x'}\n", "mcp_servers[0].url (line 8)", "http:// or https"),
        (
            "- {name: calc, url: 'http://x/mcp', args: [a]}\n",
            "mcp_servers[0] (line 8)",
            "args and env apply to a command",
        ),
        (
            "- {name: calc, command: python}\n- {name: calc, url: 'http://x/mcp'}\n",
            "mcp_servers (line 8)",
            "two MCP servers are named 'calc'",
        ),
        ("- {name: calc, command: python, cwd: /tmp}\n", "mcp_servers[0].cwd (line 8)", "extra"),
        (
            "- {name: calc, command: python, headers: {A: b}}\n",
            "mcp_servers[0] (line 8)",
            "headers apply to a url, not to a command",
        ),
    ],
)
def test_bad_mcp_servers_say_where_and_what_is_allowed(
    tmp_path: Path, servers: str, where: str, what: str
) -> None:
    path = write(tmp_path, playbook_text("[]", servers))
    with pytest.raises(PlaybookError) as raised:
        load_playbook(path)
    text = str(raised.value)
    assert where in text and what.lower() in text.lower(), text


def test_stages_may_name_mcp_tools_before_the_servers_are_connected(tmp_path: Path) -> None:
    (tmp_path / "tools.py").write_text(
        "from llmrtc import tool\n\n@tool\ndef note(text: str) -> str:\n"
        '    """Take a note."""\n    return text\n'
    )
    body = playbook_text(
        "[note, mcp_calc.add, mcp_calc__text_shout, 'mcp_calc:slow@2.1.0']",
        "- {name: calc, command: python, args: [server.py], env: {A: '1'}}\n",
    )
    playbook = load_playbook(write(tmp_path, "tools_file: tools.py\n" + body))
    server = playbook.mcp_servers[0]
    assert (server.command, server.args, server.env) == ("python", ["server.py"], {"A": "1"})
    # A tool of no declared server is still an unknown tool at load time.
    bad = playbook_text("[note, mcp_other.add]", "- {name: calc, command: python}\n")
    with pytest.raises(PlaybookError, match=r"unknown tool 'mcp_other.add'"):
        load_playbook(write(tmp_path, "tools_file: tools.py\n" + bad, "bad.yaml"))


@tool
def note(text: str) -> str:
    """Take a note.

    Args:
        text: What to note.
    """
    return f"noted {text}"


def connected_playbook(tmp_path: Path, stage_tools: str, env: str = "{}") -> Path:
    """A playbook next to a copy of the test server, started with a relative path: stdio
    servers run in the playbook's folder."""
    require("mcp")
    shutil.copy(SERVERS / "tools_server.py", tmp_path / "calc_server.py")
    servers = f"- {{name: calc, command: '{sys.executable}', args: [calc_server.py], env: {env}}}\n"
    return write(tmp_path, playbook_text(stage_tools, servers))


async def test_a_playbook_turn_calls_a_tool_of_its_mcp_server(tmp_path: Path) -> None:
    from llmrtc.cli.bot import open_mcp_tools

    playbook = load_playbook(connected_playbook(tmp_path, "[note, mcp_calc.add]"))
    registry = ToolRegistry([note])
    async with open_mcp_tools(registry, playbook) as tools:
        assert tools is registry and "mcp_calc.add" in tools and "mcp_calc.crash" in tools
        llm = ScriptedLLM([[ToolCall("c1", "mcp_calc__add", {"a": 2, "b": 40})], "It is 42."])
        orchestrator = PlaybookOrchestrator(playbook, llm, tools)
        events = [e async for e in orchestrator.run_turn("what is 2 + 40?")]
        finished = [e.result for e in events if isinstance(e, ToolCallFinished)]
        assert [(r.status, r.result) for r in finished] == [("ok", {"result": 42})]
        offered = [t.name for t in llm.requests[0].tools]
        assert "mcp_calc.add" in offered and "note" in offered
        assert "mcp_calc.crash" not in offered  # the stage offers only what it lists
        llm.assert_consumed()
    assert registry.names() == ["note"]  # the server's tools leave with the block


async def test_a_stage_naming_a_tool_the_server_lacks_fails_when_connected(
    tmp_path: Path,
) -> None:
    from llmrtc.cli.bot import open_mcp_tools

    playbook = load_playbook(connected_playbook(tmp_path, "[mcp_calc.divide]"))
    with pytest.raises(PlaybookError, match=r"unknown tool 'mcp_calc.divide'.*mcp_calc.add"):
        async with open_mcp_tools(None, playbook):
            pass


async def test_the_registry_follows_the_servers_tools_list_changed(tmp_path: Path) -> None:
    from llmrtc import ToolExecutor
    from llmrtc.cli.bot import open_mcp_tools

    playbook = load_playbook(connected_playbook(tmp_path, "[mcp_calc.grow]"))
    async with open_mcp_tools(None, playbook) as tools:
        assert tools is not None and "mcp_calc.fresh" not in tools
        grown = await ToolExecutor(tools).execute_single(ToolCall("c1", "mcp_calc.grow", {}))
        assert grown.status == "ok"
        with anyio.fail_after(30):
            while "mcp_calc.fresh" not in tools:
                await anyio.sleep(0.05)
        fresh = await ToolExecutor(tools).execute_single(ToolCall("c2", "mcp_calc.fresh", {}))
        assert fresh.status == "ok"


async def test_without_mcp_servers_the_registry_passes_through() -> None:
    from llmrtc.cli.bot import open_mcp_tools

    registry = ToolRegistry([note])
    async with open_mcp_tools(registry, None) as tools:
        assert tools is registry
    async with open_mcp_tools(None, None) as tools:
        assert tools is None


async def test_a_server_that_cannot_start_ends_the_command_with_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmrtc.cli.bot import run_with_mcp_tools

    body = playbook_text("[]", "- {name: calc, command: /nonexistent/calc-server}\n")
    playbook = load_playbook(write(tmp_path, body))

    async def never(*args: object) -> int:
        raise AssertionError("the command must not run without its MCP servers")

    assert await run_with_mcp_tools(never, None, None, playbook) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: MCP server 'calc' (command ['/nonexistent/calc-server'])")


async def test_the_command_runs_with_the_mcp_tools(tmp_path: Path) -> None:
    from llmrtc.cli.bot import run_with_mcp_tools

    playbook = load_playbook(connected_playbook(tmp_path, "[mcp_calc.add]"))
    seen: list[object] = []

    async def run(args: object, tools: ToolRegistry, playbook: object, extra: str) -> int:
        seen.extend([args, sorted(tools.names())[:2], extra])
        return 7

    assert await run_with_mcp_tools(run, "args", None, playbook, "extra") == 7
    # the test server also has `chatty` (added for the progress-log test of issue 17)
    assert seen == ["args", ["mcp_calc.add", "mcp_calc.chatty"], "extra"]


async def test_env_values_take_variables_of_llmrtcs_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmrtc import ToolExecutor
    from llmrtc.cli.bot import open_mcp_tools

    monkeypatch.setenv("MCP_TEST_SECRET", "s3cret")
    monkeypatch.setenv("MCP_TEST_NOT_PASSED", "x")
    env = "{TOKEN: '${MCP_TEST_SECRET}-1', PLAIN: 'as is $HOME'}"
    playbook = load_playbook(connected_playbook(tmp_path, "[mcp_calc.env_var]", env))
    async with open_mcp_tools(None, playbook) as tools:
        assert tools is not None
        executor = ToolExecutor(tools)

        async def value(name: str) -> object:
            result = await executor.execute_single(
                ToolCall(name, "mcp_calc.env_var", {"name": name})
            )
            return result.result

        assert await value("TOKEN") == {"result": "s3cret-1"}
        assert await value("PLAIN") == {"result": "as is $HOME"}
        assert await value("MCP_TEST_NOT_PASSED") == {"result": ""}  # only the safe defaults


async def test_an_env_variable_that_is_not_set_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmrtc.cli.bot import open_mcp_tools

    monkeypatch.delenv("MCP_TEST_MISSING", raising=False)
    env = "{TOKEN: '${MCP_TEST_MISSING}'}"
    playbook = load_playbook(connected_playbook(tmp_path, "[]", env))
    with pytest.raises(PlaybookError) as raised:
        async with open_mcp_tools(None, playbook):
            pass
    assert "mcp_servers[0].env.TOKEN: MCP server 'calc': env TOKEN uses ${MCP_TEST_MISSING}" in (
        str(raised.value)
    )


async def test_headers_of_a_url_server_take_variables_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require("mcp")
    sys.path.insert(0, str(SERVERS))
    from mcp_helpers import http_server

    from llmrtc import ToolExecutor
    from llmrtc.cli.bot import open_mcp_tools
    from llmrtc.playbook.models import MCPServerConfig

    monkeypatch.setenv("MCP_TEST_TOKEN", "t0ken")
    with http_server() as url:
        config = MCPServerConfig(
            name="web", url=url, headers={"Authorization": "Bearer ${MCP_TEST_TOKEN}"}
        )
        async with open_mcp_tools(None, servers=[config]) as tools:
            assert tools is not None
            call = ToolCall("c1", "mcp_web.header", {"name": "Authorization"})
            result = await ToolExecutor(tools).execute_single(call)
    assert result.result == {"result": "Bearer t0ken"}
