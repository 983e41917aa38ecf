"""`MCPBackend` against the official MCP servers from npm (server-everything and
server-filesystem, real Node processes over stdio): a task-only tool is not offered and a
warning says why, media reaches the model as a placeholder (never base64), every result the
model is sent is capped, validation messages write JSON values, the server is told the abort's
reason when a call is cancelled, and the server's progress reaches the debug log."""

from __future__ import annotations

import json
import logging
import os
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("mcp")

sys.path.insert(0, str(Path(__file__).parents[1] / "mcp_servers"))
from node_servers import node_server

from llmrtc import AbortController, ToolCall, ToolExecutor, ToolRegistry, TurnRunner
from llmrtc.agent import ToolCallFinished
from llmrtc.agent.settings import DEFAULT_MAX_TOOL_RESULT_CHARS
from llmrtc.catalog.mcp import MCPBackend
from llmrtc.llm import ToolMessage
from llmrtc.testing import ScriptedLLM, ScriptedResponse

pytestmark = pytest.mark.anyio

LOGGER = "llmrtc.catalog.mcp"


def everything(**options: Any) -> MCPBackend:
    return MCPBackend("ev", command=node_server("mcp-server-everything"), **options)


def recorded_everything(wire: Path) -> MCPBackend:
    """server-everything with every message the client sends it copied to `wire` (`tee`
    between the client and the server: what the real server received, byte for byte)."""
    program = node_server("mcp-server-everything")[0]
    return MCPBackend("ev", command=["sh", "-c", 'tee "$1" | "$2"', "sh", str(wire), program])


def filesystem(root: Path) -> MCPBackend:
    return MCPBackend("fs", command=[*node_server("mcp-server-filesystem"), str(root)])


def png(path: Path, side: int) -> int:
    """Write a real `side` by `side` RGB PNG of noise, stored uncompressed; returns its size."""
    raw = b"".join(b"\0" + os.urandom(side * 3) for _ in range(side))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    data = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 0))
        + chunk(b"IEND", b"")
    )
    path.write_bytes(data)
    return len(data)


async def test_a_task_only_tool_is_not_offered_and_a_warning_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with everything() as backend:
        names = {tool.definition.name for tool in await backend.list()}
        await backend.list()  # listed again (as after tools/list_changed): warned once
    assert "mcp_ev.echo" in names and "mcp_ev.trigger-long-running-operation" in names
    assert "mcp_ev.simulate-research-query" not in names
    warnings = [r.getMessage() for r in caplog.records if "simulate-research-query" in r.message]
    assert len(warnings) == 1, warnings
    assert "not offered" in warnings[0] and "task-augmented" in warnings[0]
    assert "taskSupport 'required'" in warnings[0]


async def test_a_1_mb_png_from_read_media_file_is_a_placeholder_not_base64(
    tmp_path: Path,
) -> None:
    size = png(tmp_path / "photo.png", 578)
    assert 1_000_000 < size < 1_050_000
    async with filesystem(tmp_path) as backend:
        executor = ToolExecutor(ToolRegistry(await backend.list()), timeout=60.0)
        result = await executor.execute_single(
            ToolCall("c1", "mcp_fs.read_media_file", {"path": str(tmp_path / "photo.png")})
        )
    assert result.status == "ok", result.error
    # server-filesystem mirrors its image block in structuredContent: both become placeholders.
    assert result.result == {"content": ["[image image/png, 1.0 MB]"]}
    assert len(result.to_content()) < 100


async def test_an_image_content_block_is_a_placeholder_with_its_size() -> None:
    async with everything() as backend:
        executor = ToolExecutor(ToolRegistry(await backend.list()), timeout=60.0)
        result = await executor.execute_single(ToolCall("c1", "mcp_ev.get-tiny-image", {}))
    assert result.status == "ok", result.error
    assert "[image image/png, " in result.result and " kB]" in result.result
    assert "base64" not in result.result and len(result.result) < 300


async def test_a_long_mcp_result_is_cut_for_the_model(tmp_path: Path) -> None:
    text = "".join(f"row {i}: a line of the report\n" for i in range(10_000))
    (tmp_path / "report.txt").write_text(text)
    async with filesystem(tmp_path) as backend:
        llm = ScriptedLLM(
            [
                ScriptedResponse(
                    tool_calls=[
                        ToolCall(
                            "c1", "mcp_fs__read_text_file", {"path": str(tmp_path / "report.txt")}
                        )
                    ]
                ),
                "It is a long report.",
            ]
        )
        registry = ToolRegistry(await backend.list())
        runner = TurnRunner(llm, ToolExecutor(registry, timeout=60.0), system_prompt="Read.")
        events = [event async for event in runner.run_turn("What is in report.txt?")]
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    assert finished.result.status == "ok", finished.result.error
    (message,) = [m for m in llm.requests[1].messages if isinstance(m, ToolMessage)]
    assert len(message.content) <= DEFAULT_MAX_TOOL_RESULT_CHARS
    cut = json.loads(message.content)
    assert cut["truncated"] is True and cut["total_chars"] > len(text)
    assert "row 0: a line of the report" in cut["partial_result"]


async def test_validation_messages_write_json_null_and_true() -> None:
    async with everything() as backend:
        executor = ToolExecutor(ToolRegistry(await backend.list()), timeout=60.0)
        bad = await executor.execute_single(
            ToolCall("c1", "mcp_ev.get-sum", '{"a": null, "b": true}')
        )
    assert bad.status == "invalid_arguments"
    assert "a: null is not of type 'number'" in (bad.error or "")
    assert "b: true is not of type 'number'" in (bad.error or "")
    assert "None" not in (bad.error or "") and "True" not in (bad.error or "")


def cancels_sent(wire: Path) -> list[dict[str, Any]]:
    messages = [json.loads(line) for line in wire.read_text().splitlines() if line.strip()]
    return [m["params"] for m in messages if m.get("method") == "notifications/cancelled"]


async def wait_for_progress(caplog: pytest.LogCaptureFixture) -> None:
    with anyio.fail_after(30):
        while not any("progress" in r.message for r in caplog.records):
            await anyio.sleep(0.02)


@pytest.mark.parametrize("how", ["barge-in", "timeout"])
async def test_the_server_is_told_the_aborts_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, how: str
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    wire = tmp_path / "wire.jsonl"
    async with recorded_everything(wire) as backend:
        executor = ToolExecutor(
            ToolRegistry(await backend.list()), timeout=3.0 if how == "timeout" else 120.0
        )
        controller = AbortController()

        async def barge_in_once_running() -> None:
            await wait_for_progress(caplog)  # the server is working on it
            controller.abort("barge-in")

        call = ToolCall(
            "c1", "mcp_ev.trigger-long-running-operation", {"duration": 60, "steps": 60}
        )
        async with anyio.create_task_group() as group:
            if how == "barge-in":
                group.start_soon(barge_in_once_running)
            result = await executor.execute_single(call, abort_signal=controller.signal)
        assert result.status == ("aborted" if how == "barge-in" else "timeout")
        with anyio.fail_after(30):
            while not cancels_sent(wire):
                await anyio.sleep(0.05)
        # The session is still good for the next call.
        again = await executor.execute_single(ToolCall("c2", "mcp_ev.get-sum", {"a": 1, "b": 2}))
        assert again.status == "ok", again.error
    (cancel,) = cancels_sent(wire)
    assert cancel["reason"] == how  # not the SDK's fixed "caller cancelled"


async def test_server_progress_reaches_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    async with everything() as backend:
        executor = ToolExecutor(ToolRegistry(await backend.list()), timeout=60.0)
        result = await executor.execute_single(
            ToolCall("c7", "mcp_ev.trigger-long-running-operation", {"duration": 1, "steps": 3})
        )
    assert result.status == "ok", result.error
    progress = [
        r.getMessage()
        for r in caplog.records
        if r.name == LOGGER and r.levelno == logging.DEBUG and "progress" in r.message
    ]
    # Rate-limited: the first, then at most one a second, and the last.
    assert progress[0] == "MCP server 'ev': 'trigger-long-running-operation' (call c7) progress 1/3"
    assert progress[-1].startswith(
        "MCP server 'ev': 'trigger-long-running-operation' (call c7) progress 3/3"
    )
    assert 2 <= len(progress) <= 3, progress
