"""Starting the test MCP servers of this folder (real processes, loopback only)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).parent
TOOLS_SERVER = HERE / "tools_server.py"
"""The SDK-written server with add, text.shout, slow, refuse, crash and grow."""


def stdio_command(server: Path = TOOLS_SERVER) -> list[str]:
    """The command that starts `server` over stdio with this interpreter."""
    return [sys.executable, str(server)]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def http_server(marks: Path | None = None, timeout: float = 60.0) -> Iterator[str]:
    """Run the tools server over streamable HTTP on 127.0.0.1; yields its MCP URL. The
    process (started here) is killed by its PID on exit."""
    port = free_port()
    env = {"MCP_TEST_MARKS": str(marks)} if marks is not None else {}
    import os

    process = subprocess.Popen(
        [sys.executable, str(TOOLS_SERVER), "--http", str(port)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the HTTP MCP server exited with {process.returncode}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the HTTP MCP server did not listen in time")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=10)
