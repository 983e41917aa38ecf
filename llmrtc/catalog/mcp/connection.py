"""One live MCP session, owned by a task of `MCPBackend`'s task group.

The SDK's `Client` must be entered and left in the same task (its task groups and cancel
scopes say so), while tool calls come from the executor's tasks. So one task per connection
opens the client, hands it out through `task_status.started`, and keeps it until its `stop`
event is set (by the backend closing, or by a call that saw the connection die).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio

from llmrtc.tools._errors import speakable_reason

if TYPE_CHECKING:
    from anyio.abc import TaskGroup, TaskStatus

__all__ = [
    "Connection",
    "HTTPTarget",
    "cancel_reason",
    "import_sdk",
    "is_connection_loss",
    "serve_connection",
    "target_of",
]

logger = logging.getLogger(__name__)


class Connection:
    """One session with the server: the SDK client and the events that end it."""

    def __init__(self) -> None:
        self.client: Any = None
        """The entered `mcp.Client` (set before the connection is handed out)."""
        self.stop = anyio.Event()
        """Set to end the session (close, or a call saw it die): the next use reconnects."""
        self.closed = anyio.Event()
        """Set once the session and a stdio server's process are gone."""

    def alive(self) -> bool:
        """False when the SDK already knows the transport closed (a server that died
        between calls, on a session without a listen stream to notice it). Reads the SDK's
        JSON-RPC dispatcher state (pinned by tests/catalog/test_mcp_sdk_pin.py); True when
        that is not readable (an SDK that changed); False once the client left its session."""
        try:
            session = getattr(self.client, "session", None)
        except RuntimeError:  # mcp.Client.session raises once the client's context ended
            return False
        dispatcher = getattr(session, "_dispatcher", None)
        return not getattr(dispatcher, "_closed", False)


_cancel_reason: ContextVar[Callable[[], object] | None] = ContextVar(
    "llmrtc_mcp_cancel_reason", default=None
)


@contextlib.contextmanager
def cancel_reason(reason: Callable[[], object]) -> Iterator[None]:
    """While in this block, a request this task abandons is cancelled on the server with
    `reason()` (e.g. the call's abort reason: `"barge-in"`, `"timeout"`) instead of the SDK's
    fixed `"caller cancelled"`, but only a reason that passes `speakable_reason` (a short
    one-line `str`): any other (None, an exception, an object, a long text that may hold an
    address or a token) keeps the SDK's wording."""
    token = _cancel_reason.set(reason)
    try:
        yield
    finally:
        _cancel_reason.reset(token)


def _told_reason(reason_of: Callable[[], object], server: str) -> str | None:
    """The reason the server may be told, or None (the SDK's own is sent). Never raises: the
    cancel must go out whatever the reason is."""
    try:
        reason = reason_of()
        told = speakable_reason(reason)
    except Exception:
        logger.warning(
            "MCP server %r: the cancelled call's reason could not be read; sending "
            "'caller cancelled'",
            server,
            exc_info=True,
        )
        return None
    if told is None and reason is not None:
        logger.debug(
            "MCP server %r: the abort reason (a %s) is not sent to the server, only short "
            "one-line strings are; sending 'caller cancelled'",
            server,
            type(reason).__name__,
        )
    return told


def _send_cancel_reasons(client: Any, server: str) -> None:
    """Make the SDK's courtesy `notifications/cancelled` carry the reason `cancel_reason`
    set. The SDK words it `"caller cancelled"` whatever the cause and has no option for it;
    it sends it from the abandoning task (inside the cancelled `call_tool`), so that task's
    context says why. Wraps the session dispatcher's `notify` (pinned by
    tests/catalog/test_mcp_sdk_pin.py); an SDK without it keeps its own wording."""
    try:
        dispatcher = getattr(client.session, "_dispatcher", None)
    except RuntimeError:
        return
    notify = getattr(dispatcher, "notify", None)
    if dispatcher is None or notify is None:
        logger.debug("MCP server %r: cancel reasons are the SDK's own", server)
        return

    async def notify_with_reason(
        method: str, params: Mapping[str, Any] | None, *args: Any, **kwargs: Any
    ) -> None:
        reason_of = _cancel_reason.get()
        if method == "notifications/cancelled" and params is not None and reason_of is not None:
            told = _told_reason(reason_of, server)
            if told is not None:
                params = {**params, "reason": told}
        await notify(method, params, *args, **kwargs)

    dispatcher.notify = notify_with_reason


@dataclass(frozen=True)
class HTTPTarget:
    """A streamable HTTP endpoint and the headers every request carries."""

    url: str
    headers: Mapping[str, str]


def target_of(
    command: Sequence[str] | None,
    env: Mapping[str, str] | None,
    cwd: str | None,
    url: str | None,
    headers: Mapping[str, str] | None = None,
) -> Any:
    """What `mcp.Client` connects to: a URL string, an `HTTPTarget` (a URL with headers) or
    `StdioServerParameters`."""
    from mcp import StdioServerParameters

    if url is not None:
        return HTTPTarget(url, dict(headers)) if headers else url
    assert command is not None
    program, *args = command
    return StdioServerParameters(
        command=program, args=args, env=dict(env) if env is not None else None, cwd=cwd
    )


async def serve_connection(
    target: Any,
    server: str,
    on_message: Any,
    mode: str = "auto",
    *,
    task_status: TaskStatus[Connection],
) -> None:
    """Open a session with `target` (`on_message`: the SDK's message handler; `mode`: the
    SDK's protocol negotiation, `"auto"` or `"legacy"`), report it,
    and keep it until its `stop` is set or it fails (a failure before it is reported is
    raised to the task that started it)."""
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    connection = Connection()
    started = False
    stderr = _StderrLog(server) if isinstance(target, StdioServerParameters) else None
    transport = target if stderr is None else stdio_client(target, errlog=stderr.writer)
    try:
        async with contextlib.AsyncExitStack() as resources, anyio.create_task_group() as outer:
            if isinstance(target, HTTPTarget):
                transport = await _http_transport(target, resources)
            if stderr is not None:
                outer.start_soon(stderr.follow)
            try:
                # cache=None: a listing must be fresh after tools/list_changed or a reconnect.
                async with Client(
                    transport, message_handler=on_message, cache=None, mode=mode
                ) as client:
                    if stderr is not None:
                        stderr.spawned()
                    connection.client = client
                    _send_cancel_reasons(client, server)
                    async with anyio.create_task_group() as group:
                        await _listen(client, group, connection, server)
                        task_status.started(connection)
                        started = True
                        await connection.stop.wait()
                        group.cancel_scope.cancel()
            finally:
                if stderr is not None:
                    stderr.spawned()  # also when the spawn failed: no writer is left open
                    # The server is gone: its stderr ends at once, unless a process it
                    # started holds the pipe open; give up on that after a moment.
                    outer.cancel_scope.deadline = anyio.current_time() + 2.0
    except Exception as exc:
        if not started:
            raise _unwrapped(exc) from None
        logger.warning(
            "MCP server %r: the connection ended (%s); the next use reconnects",
            server,
            type(exc).__name__,
            exc_info=True,
        )
    finally:
        connection.stop.set()
        connection.closed.set()


async def _http_transport(target: HTTPTarget, resources: contextlib.AsyncExitStack) -> Any:
    """The SDK's streamable HTTP transport on an HTTP client that sends `target.headers`
    (the SDK's own timeouts: 30 s, and 300 s to read a held-open stream)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = await resources.enter_async_context(
        httpx2.AsyncClient(headers=dict(target.headers), timeout=httpx2.Timeout(30.0, read=300.0))
    )
    return streamable_http_client(target.url, http_client=http)


def _unwrapped(exc: Exception) -> Exception:
    """The one error inside task-group wrappers (the spawn's own `FileNotFoundError`)."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


class _StderrLog:
    """A stdio server's stderr, line by line into the `llmrtc.catalog.mcp` log (at INFO)
    instead of the terminal, where it would garble `llmrtc chat`."""

    def __init__(self, server: str) -> None:
        self.server = server
        read_fd, write_fd = os.pipe()
        self.reader = os.fdopen(read_fd, "rb")
        self.writer = os.fdopen(write_fd, "w")

    def spawned(self) -> None:
        """Close this process's copy of the write end: the child holds its own, so the
        reader sees the end of the file when the child is gone."""
        if not self.writer.closed:
            self.writer.close()

    async def follow(self) -> None:
        try:
            while True:
                line = await anyio.to_thread.run_sync(self.reader.readline, abandon_on_cancel=True)
                if not line:
                    break
                text = line.decode("utf-8", "replace").rstrip()
                if text:
                    logger.info("MCP server %r: %s", self.server, text)
        finally:
            self.spawned()
            with contextlib.suppress(OSError):
                self.reader.close()


async def _listen(client: Any, group: TaskGroup, connection: Connection, server: str) -> None:
    """On a 2026-07-28 connection, open the `subscriptions/listen` stream that carries
    `tools/list_changed` (handshake-era servers send it unasked). Each event also reaches
    the client's message handler, which is where the backend reacts to it."""
    from mcp.client.subscriptions import ListenNotSupportedError

    capability = getattr(client.server_capabilities, "tools", None)
    if not getattr(capability, "list_changed", False):
        return
    subscription = client.listen(tools_list_changed=True)
    try:
        stream = await subscription.__aenter__()
    except ListenNotSupportedError:
        return

    async def drain() -> None:
        try:
            async for _event in stream:
                pass
        except Exception:
            logger.debug("MCP server %r: the listen stream ended", server, exc_info=True)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await subscription.__aexit__(None, None, None)
            connection.stop.set()  # the stream ends with the connection (or the close)

    group.start_soon(drain)


_LIST_PAGES = 100
"""At most this many `tools/list` pages are read (a server that pages forever is cut off)."""


async def list_all_tools(client: Any) -> list[Any]:
    """Every MCP `Tool` the server lists, page after page."""
    listed: list[Any] = []
    cursor = None
    for _ in range(_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        listed.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return listed


def is_connection_loss(exc: BaseException) -> bool:
    """Whether `exc` (from a request) means the connection is gone."""
    from mcp_types.jsonrpc import CONNECTION_CLOSED

    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream):
        return True
    return getattr(exc, "code", None) == CONNECTION_CLOSED


def import_sdk() -> None:
    """Import the `mcp` SDK now, or say how to install it.

    Raises:
        ImportError: naming the extra to install.
    """
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise ImportError("MCPBackend needs the mcp package: pip install 'llmrtc[mcp]'") from None
