"""`llmrtc mcp TOOLS.py` driven by the `mcp` SDK's own client over stdio: listing, calls
through the executor (validation, timeout, internal errors hidden) and cancellation."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from tests._requirements import require

require("mcp")

from llmrtc.cli import build_parser

pytestmark = pytest.mark.anyio

TOOLS = '''
import anyio
from pathlib import Path
from llmrtc import ToolContext, ToolError, tool

MARKS = Path(__file__).parent


@tool(namespace="shop")
def price(item: str) -> dict:
    """Price of an item.

    Args:
        item: The item.
    """
    return {"item": item, "price": 3.5}


@tool
def greet(name: str) -> str:
    """Greet someone.

    Args:
        name: Who.
    """
    return f"Hello, {name}!"


@tool
def boom() -> str:
    """Always breaks."""
    raise RuntimeError("password=hunter2")


@tool
def sorry() -> str:
    """Refuses."""
    raise ToolError("closed today")


@tool
async def wait(seconds: float, ctx: ToolContext) -> str:
    """Waits.

    Args:
        seconds: How long.
    """
    (MARKS / "started").write_text("1")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        (MARKS / "cancelled").write_text("1")
        raise
    return "waited"
'''


def server(tmp_path: Path, *extra: str) -> object:
    from mcp import StdioServerParameters

    tools = tmp_path / "shop_tools.py"
    tools.write_text(textwrap.dedent(TOOLS))
    args = ["-m", "llmrtc.cli", "mcp", str(tools), *extra]
    return StdioServerParameters(command=sys.executable, args=args)


async def test_an_mcp_client_lists_and_calls_the_files_tools(tmp_path: Path) -> None:
    from mcp import Client

    async with Client(server(tmp_path, "--timeout", "2")) as client:
        assert client.server_info is not None and client.server_info.name == "shop_tools"
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert sorted(listed) == ["boom", "greet", "shop__price", "sorry", "wait"]
        assert listed["shop__price"].input_schema["required"] == ["item"]
        assert listed["shop__price"].description == "Price of an item."

        price = await client.call_tool("shop__price", {"item": "tea"})
        assert not price.is_error and price.structured_content == {"item": "tea", "price": 3.5}
        greet = await client.call_tool("greet", {"name": "Ada"})
        assert greet.content[0].text == "Hello, Ada!"  # type: ignore[union-attr]

        def text(result: object) -> str:
            return result.content[0].text  # type: ignore[attr-defined,no-any-return]

        boom = await client.call_tool("boom", {})
        assert boom.is_error and text(boom) == "tool 'boom' failed because of an internal error"
        sorry = await client.call_tool("sorry", {})
        assert sorry.is_error and text(sorry) == "closed today"
        bad = await client.call_tool("shop__price", {})
        assert bad.is_error and "'item' is a required property" in text(bad)
        late = await client.call_tool("wait", {"seconds": 30})
        assert late.is_error and text(late) == "tool 'wait' timed out after 2 s"
        unknown = await client.call_tool("nope", {})
        assert unknown.is_error and "unknown tool 'nope'" in text(unknown)


async def test_a_client_cancellation_cancels_the_handler(tmp_path: Path) -> None:
    from mcp import Client

    async with Client(server(tmp_path, "--name", "shop")) as client:
        assert client.server_info is not None and client.server_info.name == "shop"
        with anyio.move_on_after(60):
            async with anyio.create_task_group() as group:

                async def call() -> None:
                    await client.call_tool("wait", {"seconds": 60})

                group.start_soon(call)
                with anyio.fail_after(30):
                    while not (tmp_path / "started").exists():
                        await anyio.sleep(0.02)
                group.cancel_scope.cancel()  # the SDK sends notifications/cancelled
        with anyio.fail_after(30):
            while not (tmp_path / "cancelled").exists():
                await anyio.sleep(0.02)
        again = await client.call_tool("greet", {"name": "Bo"})
        assert not again.is_error


def test_the_command_line_is_parsed_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["mcp", "tools.py", "--timeout", "5", "--name", "x"])
    assert (args.tools, args.timeout, args.name) == ("tools.py", 5.0, "x")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["mcp", "tools.py", "--timeout", "0"])
    assert "must be seconds > 0" in capsys.readouterr().err


def test_a_missing_tools_file_is_one_line_and_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmrtc.cli import main

    assert main(["mcp", str(tmp_path / "missing.py")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "missing.py" in err and "Traceback" not in err


def test_a_tools_file_that_fails_shows_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmrtc.cli import main

    broken = tmp_path / "broken.py"
    broken.write_text("import nothing_here_at_all\n")
    assert main(["mcp", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "cannot load the tools file" in err and "nothing_here_at_all" in err
