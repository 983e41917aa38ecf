"""`MCPBackend` against a real MCP server written with the `mcp` SDK, started by the test
(stdio, and streamable HTTP on 127.0.0.1): listing, calls through `ToolExecutor` and a turn,
cancellation the server sees, a crash mid-call, reconnection and `tools/list_changed`."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._requirements import require

require("mcp")

sys.path.insert(0, str(Path(__file__).parents[1] / "mcp_servers"))
from mcp_helpers import http_server, stdio_command

from llmrtc import AbortController, ToolCall, ToolExecutor, ToolRegistry, TurnRunner
from llmrtc.agent import ToolCallFinished, TurnCompleted
from llmrtc.catalog import ToolCatalog
from llmrtc.catalog.mcp import MCPBackend, MCPConnectionError
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

IDS = [
    "mcp_tt:add@2.1.0",
    "mcp_tt:text_shout@2.1.0",
    "mcp_tt:slow@2.1.0",
    "mcp_tt:refuse@2.1.0",
    "mcp_tt:crash@2.1.0",
    "mcp_tt:env_var@2.1.0",
    "mcp_tt:header@2.1.0",
    "mcp_tt:exit_soon@2.1.0",
    "mcp_tt:grow@2.1.0",
    "mcp_tt:chatty@2.1.0",
]


def stdio_backend(marks: Path | None = None, protocol: Any = "auto") -> MCPBackend:
    env = {"MCP_TEST_MARKS": str(marks)} if marks is not None else None
    return MCPBackend("tt", command=stdio_command(), env=env, protocol=protocol)


async def wait_for(path: Path, seconds: float = 30.0) -> None:
    with anyio.fail_after(seconds):
        while not path.exists():
            await anyio.sleep(0.02)


async def test_a_stdio_servers_tools_are_catalog_tools_with_versioned_ids() -> None:
    async with stdio_backend() as backend:
        catalog = backend.add_to(ToolCatalog(embedder=None))
        tools = await catalog.list()
        assert [t.definition.tool_id for t in tools] == IDS
        add = await catalog.get("mcp_tt.add")
        assert add is not None and add.definition.wire_name == "mcp_tt__add"
        assert add.definition.description == "Add two integers."
        assert add.definition.parameters["required"] == ["a", "b"]
        assert set(add.definition.tags) == {"mcp", "tt"}
        assert await backend.get("mcp_tt:add@2.1.0") is add
        assert await backend.get("not an id") is None
        hits = await catalog.search("upper-case a text", mode="keyword")
        assert hits[0].definition.name == "mcp_tt.text_shout"


async def test_calls_run_through_the_executor_with_validation_and_mapped_results() -> None:
    async with stdio_backend() as backend:
        executor = ToolExecutor(ToolRegistry(await backend.list()))
        add, shout, refuse, bad = await executor.execute(
            [
                ToolCall("1", "mcp_tt__add", {"a": 2, "b": 3}),
                ToolCall("2", "mcp_tt.text_shout", {"text": "hi"}),
                ToolCall("3", "mcp_tt.refuse", {"reason": "closed on sundays"}),
                ToolCall("4", "mcp_tt.add", {"a": "x"}),
            ]
        )
    assert add.status == "ok" and add.result == {"result": 5}  # structuredContent preferred
    assert shout.result == {"result": "HI"}
    # isError: the server's own words reach the model.
    assert refuse.status == "error" and "refused: closed on sundays" in (refuse.error or "")
    # The schema is checked before the server sees the call.
    assert bad.status == "invalid_arguments"
    assert "'b' is a required property" in (bad.error or "")


async def test_a_turn_calls_an_mcp_tool_and_answers_with_its_result() -> None:
    async with stdio_backend() as backend:
        catalog = backend.add_to(ToolCatalog(embedder=None))
        registry = ToolRegistry(await catalog.list())
        llm = ScriptedLLM([[ToolCall("c1", "mcp_tt__add", {"a": 20, "b": 22})], "It is 42."])
        runner = TurnRunner(llm, ToolExecutor(registry), system_prompt="s")
        events = [e async for e in runner.run_turn("what is 20 + 22?")]
    finished = [e.result for e in events if isinstance(e, ToolCallFinished)]
    assert [(r.status, r.result) for r in finished] == [("ok", {"result": 42})]
    assert "mcp_tt__add" in [t.wire_name for t in llm.requests[0].tools]
    tool_message = llm.requests[1].messages[-1]
    assert '"result":42' in str(getattr(tool_message, "content", "")).replace(" ", "")
    assert isinstance(events[-1], TurnCompleted)
    llm.assert_consumed()


@pytest.mark.parametrize(
    ("how", "protocol"), [("abort", "auto"), ("timeout", "auto"), ("abort", "legacy")]
)
async def test_an_aborted_or_timed_out_call_is_cancelled_on_the_server(
    tmp_path: Path, how: str, protocol: str
) -> None:
    async with stdio_backend(tmp_path, protocol) as backend:
        executor = ToolExecutor(
            ToolRegistry(await backend.list()), timeout=2.0 if how == "timeout" else 60.0
        )
        controller = AbortController()

        async def abort_once_started() -> None:
            await wait_for(tmp_path / "started")
            controller.abort("barge-in")

        async with anyio.create_task_group() as group:
            if how == "abort":
                group.start_soon(abort_once_started)
            result = await executor.execute_single(
                ToolCall("c1", "mcp_tt.slow", {"seconds": 60}), abort_signal=controller.signal
            )
        assert result.status == ("aborted" if how == "abort" else "timeout")
        await wait_for(tmp_path / "cancelled")  # notifications/cancelled reached the server
        # The session is still good for the next call.
        again = await executor.execute_single(ToolCall("c2", "mcp_tt.add", {"a": 1, "b": 1}))
        assert again.result == {"result": 2}


async def test_a_server_crash_mid_call_is_an_error_result_and_the_next_call_reconnects(
    tmp_path: Path,
) -> None:
    async with stdio_backend(tmp_path) as backend:
        catalog = backend.add_to(ToolCatalog(embedder=None))
        executor = ToolExecutor(ToolRegistry(await catalog.list()), timeout=60.0)
        invalidated: list[bool] = []
        backend.on_tools_changed(lambda: invalidated.append(True))
        crashed = await executor.execute_single(ToolCall("c1", "mcp_tt.crash", {}))
        assert (tmp_path / "crashed").exists()
        assert crashed.status == "error"
        # Only the executor's generic text: no SDK or transport message reaches the model.
        assert crashed.error == "tool 'mcp_tt.crash' failed because of an internal error"
        assert not backend.connected or invalidated == []
        after = await executor.execute_single(ToolCall("c2", "mcp_tt.add", {"a": 4, "b": 5}))
        assert after.status == "ok" and after.result == {"result": 9}
        assert backend.connected and invalidated == [True]  # a new session: list again
        assert len(await catalog.list()) == len(IDS)


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_a_server_that_dies_between_calls_is_restarted_for_the_next_one(
    tmp_path: Path, protocol: str
) -> None:
    async with stdio_backend(tmp_path, protocol) as backend:
        executor = ToolExecutor(ToolRegistry(await backend.list()), timeout=60.0)
        bye = await executor.execute_single(ToolCall("c1", "mcp_tt.exit_soon", {}))
        assert bye.status == "ok"
        await anyio.sleep(1.5)  # the process exits 0.3 s after answering
        after = await executor.execute_single(ToolCall("c2", "mcp_tt.add", {"a": 1, "b": 2}))
        assert after.status == "ok" and after.result == {"result": 3}


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
async def test_tools_list_changed_invalidates_the_catalog(protocol: str) -> None:
    """`auto` speaks 2026-07-28 with this server (a `subscriptions/listen` stream carries the
    change); `legacy` the initialize handshake (the server sends the notification unasked)."""
    async with stdio_backend(protocol=protocol) as backend:
        assert backend.connected
        session = backend._connection.client.session  # type: ignore[union-attr]
        assert (session.protocol_version >= "2026") == (protocol == "auto")
        catalog = backend.add_to(ToolCatalog(embedder=None))
        assert await catalog.get("mcp_tt.fresh") is None
        executor = ToolExecutor(ToolRegistry(await catalog.list()))
        grown = await executor.execute_single(ToolCall("c1", "mcp_tt.grow", {}))
        assert grown.status == "ok"
        with anyio.fail_after(30):
            while await catalog.get("mcp_tt.fresh") is None:
                await anyio.sleep(0.05)
        fresh = await catalog.get("mcp_tt.fresh")
        assert fresh is not None and fresh.definition.tool_id == "mcp_tt:fresh@2.1.0"


async def test_an_http_server_serves_calls_and_sees_cancellation(tmp_path: Path) -> None:
    with http_server(tmp_path) as url:
        async with MCPBackend("web", url=url) as backend:
            tools = {t.definition.name: t for t in await backend.list()}
            assert "mcp_web.add" in tools
            executor = ToolExecutor(ToolRegistry(tools.values()), timeout=2.0)
            add, slow = await executor.execute(
                [
                    ToolCall("1", "mcp_web.add", {"a": 1, "b": 2}),
                    ToolCall("2", "mcp_web.slow", {"seconds": 60}),
                ]
            )
            assert add.result == {"result": 3}
            assert slow.status == "timeout"
            await wait_for(tmp_path / "cancelled")


async def test_an_http_server_gets_the_headers_given() -> None:
    with http_server() as url:
        headers = {"Authorization": "Bearer t0ken", "X-Tenant": "acme"}
        async with MCPBackend("web", url=url, headers=headers) as backend:
            executor = ToolExecutor(ToolRegistry(await backend.list()))
            auth, tenant = await executor.execute(
                [
                    ToolCall("1", "mcp_web.header", {"name": "Authorization"}),
                    ToolCall("2", "mcp_web.header", {"name": "X-Tenant"}),
                ]
            )
    assert auth.result == {"result": "Bearer t0ken"} and tenant.result == {"result": "acme"}


async def test_a_server_that_cannot_start_says_which_and_why() -> None:
    backend = MCPBackend("ghost", command=["/nonexistent/mcp-server"], connect_timeout=20)
    with pytest.raises(MCPConnectionError, match=r"MCP server 'ghost' \(command \["):
        async with backend:
            pass


async def test_an_unreachable_url_fails_within_the_connect_timeout() -> None:
    from mcp_helpers import free_port

    backend = MCPBackend("nowhere", url=f"http://127.0.0.1:{free_port()}/mcp", connect_timeout=20)
    with pytest.raises(MCPConnectionError, match="MCP server 'nowhere'"):
        async with backend:
            pass


async def test_using_a_backend_outside_its_block_says_how() -> None:
    backend = MCPBackend("tt", command=stdio_command())
    with pytest.raises(RuntimeError, match=r"async with MCPBackend"):
        await backend.list()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of command="),
        ({"command": ["a"], "url": "http://x/mcp"}, "exactly one of command="),
        ({"command": "python server.py"}, "non-empty list of strings"),
        ({"url": "ftp://x"}, "must start with http"),
        ({"url": "http://x/mcp", "env": {"A": "1"}}, "env and cwd apply to a command"),
        ({"command": ["a"], "env": {"A": 1}}, "env must map strings to strings"),
        ({"command": ["a"], "connect_timeout": 0}, "connect_timeout must be seconds > 0"),
        ({"command": ["a"], "protocol": "2025"}, "protocol must be 'auto' or 'legacy'"),
        ({"command": ["a"], "headers": {"A": "1"}}, "headers .* apply to a url only"),
        ({"url": "http://x/mcp", "headers": {"A": 1}}, "headers .* apply to a url only"),
    ],
)
def test_bad_options_are_refused_when_the_backend_is_described(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        MCPBackend("tt", **kwargs)


@pytest.mark.parametrize("name", ["", "a__b", "a_", "has space", "dot.ted"])
def test_server_names_must_make_a_namespace(name: str) -> None:
    with pytest.raises(ValueError, match="it becomes the tools' namespace"):
        MCPBackend(name, command=["x"])


async def test_an_error_in_the_block_comes_out_as_itself_and_the_server_stops() -> None:
    backend = stdio_backend()
    with pytest.raises(KeyError, match="mine"):
        async with backend:
            assert backend.connected
            raise KeyError("mine")
    assert not backend.connected


async def test_a_stdio_servers_stderr_goes_to_the_log_not_the_terminal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="llmrtc.catalog.mcp")
    async with stdio_backend() as backend:
        executor = ToolExecutor(ToolRegistry(await backend.list()))
        await executor.execute_single(ToolCall("c1", "mcp_tt.refuse", {"reason": "no"}))
        with anyio.fail_after(30):
            while not any("refuse" in r.getMessage() for r in caplog.records):
                await anyio.sleep(0.05)
    line = next(r.getMessage() for r in caplog.records if "refuse" in r.getMessage())
    assert line.startswith("MCP server 'tt': ")


class _Unprintable:
    """An abort reason whose `__str__` raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this reason")


def recorded_backend(wire: Path, marks: Path) -> MCPBackend:
    """The tools server with every message the client sends it copied to `wire` (`tee`)."""
    python, server = stdio_command()
    return MCPBackend(
        "tt",
        command=["sh", "-c", 'tee "$1" | "$2" "$3"', "sh", str(wire), python, server],
        env={"MCP_TEST_MARKS": str(marks)},
        protocol="legacy",
    )


def cancel_reasons_sent(wire: Path) -> list[str | None]:
    messages = [json.loads(line) for line in wire.read_text().splitlines() if line.strip()]
    return [
        m["params"].get("reason") for m in messages if m.get("method") == "notifications/cancelled"
    ]


@pytest.mark.parametrize(
    ("reason", "told"),
    [
        ("barge-in", "barge-in"),
        (ConnectionError("lost https://user:secret@db.internal/x"), "caller cancelled"),
        ("token=SECRET " + "x" * 300, "caller cancelled"),
        ("two\nlines", "caller cancelled"),
        (_Unprintable(), "caller cancelled"),
    ],
    ids=["word", "exception", "long", "multiline", "raising-str"],
)
async def test_only_a_short_string_abort_reason_reaches_the_server(
    tmp_path: Path, reason: object, told: str
) -> None:
    # The model is told only short one-line string reasons (they may hold addresses or tokens
    # otherwise): the server is told no more. A reason whose __str__ raises still cancels.
    wire = tmp_path / "wire.jsonl"
    async with recorded_backend(wire, tmp_path) as backend:
        executor = ToolExecutor(ToolRegistry(await backend.list()), timeout=60.0)
        controller = AbortController()

        async def abort_once_started() -> None:
            await wait_for(tmp_path / "started")
            controller.abort(reason)

        async with anyio.create_task_group() as group:
            group.start_soon(abort_once_started)
            result = await executor.execute_single(
                ToolCall("c1", "mcp_tt.slow", {"seconds": 60}), abort_signal=controller.signal
            )
        assert result.status == "aborted"
        await wait_for(tmp_path / "cancelled")  # the server stopped working on it
    assert cancel_reasons_sent(wire) == [told]


async def test_server_progress_is_logged_rate_limited_with_its_message_cut(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="llmrtc.catalog.mcp")
    async with stdio_backend() as backend:
        executor = ToolExecutor(ToolRegistry(await backend.list()), timeout=60.0)
        result = await executor.execute_single(
            ToolCall("c9", "mcp_tt.chatty", {"steps": 40, "seconds": 1.5, "message_chars": 5000})
        )
    assert result.status == "ok", result.error
    lines = [r.getMessage() for r in caplog.records if " progress " in r.getMessage()]
    # 40 updates in ~1.5 s: the first, about one a second, and the last.
    assert 2 <= len(lines) <= 6, lines
    assert lines[0].startswith("MCP server 'tt': 'chatty' (call c9) progress 1/40: step 1 mmm")
    assert lines[-1].startswith("MCP server 'tt': 'chatty' (call c9) progress 40/40: step 40")
    assert "updates not logged)" in lines[-1]
    assert all(len(line) < 300 for line in lines), [len(line) for line in lines]
