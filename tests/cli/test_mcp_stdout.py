"""`llmrtc mcp` driven by the `mcp` SDK's own client over stdio: a tools file that print()s
(at import and in a handler) keeps the protocol intact, its output on stderr (review R12 #5)."""

from __future__ import annotations

import shlex
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from tests._requirements import require

require("mcp")

pytestmark = pytest.mark.anyio

PRINTING = '''
from llmrtc import tool
print("loading my tools")


@tool
def greet(name: str) -> str:
    """Greet someone.

    Args:
        name: Who.
    """
    print(f"debug: greeting {name}")
    return f"Hello, {name}!"
'''


def params(tools: Path, stderr: Path, env: dict[str, str] | None = None) -> object:
    """The server command, its stderr kept in a file (the SDK client does not expose it)."""
    from mcp import StdioServerParameters

    line = shlex.join([sys.executable, "-m", "llmrtc.cli", "mcp", str(tools)])
    return StdioServerParameters(
        command="/bin/sh", args=["-c", f"exec {line} 2>{shlex.quote(str(stderr))}"], env=env
    )


async def test_a_printing_tools_file_keeps_the_protocol_and_prints_to_stderr(
    tmp_path: Path,
) -> None:
    from mcp import Client

    tools = tmp_path / "printing.py"
    tools.write_text(textwrap.dedent(PRINTING))
    stderr = tmp_path / "stderr.txt"
    with anyio.fail_after(60):
        async with Client(params(tools, stderr)) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ["greet"]
            for who in ("Ann", "Bob"):
                result = await client.call_tool("greet", {"name": who})
                assert not result.is_error
                assert result.content[0].text == f"Hello, {who}!"  # type: ignore[union-attr]
    logged = stderr.read_text()
    assert "loading my tools" in logged
    assert "debug: greeting Ann" in logged and "debug: greeting Bob" in logged
