"""`MCPBackend`: an MCP server's tools as catalog tools (seed 001), over stdio or HTTP.

```python
async with MCPBackend("weather", command=["python", "weather_server.py"]) as weather:
    catalog = ToolCatalog()
    weather.add_to(catalog)            # list_changed from the server invalidates the catalog
    registry = ToolRegistry(await catalog.list())
    executor = ToolExecutor(registry)  # calls go to the server: validation, timeout, abort
```

Each tool is `mcp_<server>:<tool>@<version>` (named `mcp_<server>.<tool>`, wire name
`mcp_<server>__<tool>`): the version is the server's own (`serverInfo.version`), cut to semver
by `semver_of`. A call runs through `ToolExecutor` like any tool; an abort or a timeout cancels
the handler, and the server is sent `notifications/cancelled` for the request with the abort's
reason when it is a short string (`"barge-in"`, `"timeout"`), else `"caller cancelled"`. Calls
ask for progress; the server's progress notifications are logged at DEBUG (rate-limited). MCP
image/audio/blob blocks in a result (content blocks or `structuredContent`) reach the model as
a placeholder (`[image image/png, 1.0 MB]`), never as base64. A tool that accepts only
task-augmented calls (`execution.taskSupport: "required"`) is not offered: a warning names it.

The connection lives in a task the backend owns (entered and left in the same task, as anyio
requires); calls from any task of the same event loop share it. A server that dies mid-call
gives that call an error result, and the next use of the backend connects again.

Its submodules: `connection` (one live MCP session, owned by the backend's task) and `convert`
(MCP tools and results as llmrtc definitions and values).
"""

from __future__ import annotations

import builtins
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, cast

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.catalog.mcp.connection import (
    Connection,
    cancel_reason,
    import_sdk,
    is_connection_loss,
    list_all_tools,
    serve_connection,
    target_of,
)
from llmrtc.catalog.mcp.convert import (
    error_text,
    mcp_definition,
    namespace_for,
    result_value,
    semver_of,
    task_required,
    tool_names,
)
from llmrtc.errors import LLMRTCError
from llmrtc.tools.context import ToolContext
from llmrtc.tools.errors import ToolError
from llmrtc.tools.ids import parse_tool_id
from llmrtc.tools.tool import Tool

if TYPE_CHECKING:
    from anyio.abc import TaskGroup, TaskStatus

    from llmrtc.catalog.catalog import ToolCatalog

__all__ = ["MCPBackend", "MCPConnectionError"]

logger = logging.getLogger(__name__)


class MCPConnectionError(LLMRTCError, ConnectionError):
    """The MCP server could not be started or reached, or lost the connection."""


class MCPBackend:
    """The tools of one MCP server, as a `ToolBackend` a `ToolCatalog` can hold.

    Give either `command` (a stdio server the backend starts) or `url` (a streamable HTTP
    endpoint). Use it as `async with MCPBackend(...) as backend:` so the connection (and a
    stdio server's process) ends with the block.
    """

    def __init__(
        self,
        name: str,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float = 30.0,
        protocol: Literal["auto", "legacy"] = "auto",
    ) -> None:
        """Describe the server; nothing starts before `async with`.

        Args:
            name: The server's name in the catalog; its tools' namespace is `mcp_<name>`.
            command: The program and its arguments (`["python", "server.py"]`) of a stdio
                server.
            env: Environment variables for a stdio server, over the SDK's safe defaults
                (`PATH`, `HOME`, ...; the parent's other variables are not passed on).
            cwd: The working directory of a stdio server.
            url: The streamable HTTP endpoint (`http://127.0.0.1:8000/mcp`).
            headers: HTTP headers every request to `url` carries (`Authorization`, ...).
            connect_timeout: Seconds to start the server, connect and list its tools.
            protocol: `"auto"` asks the server for the 2026-07-28 protocol (`server/discover`)
                and falls back to the initialize handshake of older servers; `"legacy"`
                uses the handshake at once (for a server that mishandles the probe). Both
                follow `tools/list_changed`.

        Raises:
            ValueError: naming the bad argument and what is allowed.
        """
        self.namespace = namespace_for(name)
        if (command is None) == (url is None):
            raise ValueError(
                f"MCP server {name!r}: give exactly one of command=[program, *args] (stdio) "
                f"or url='http://host:port/mcp' (streamable HTTP)"
            )
        if command is not None:
            if (
                isinstance(command, str)
                or not command
                or not all(isinstance(part, str) and part for part in command)
            ):
                raise ValueError(
                    f"MCP server {name!r}: command must be a non-empty list of strings "
                    f"([program, *args]), got {command!r}"
                )
        elif not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {name!r}: url must start with http:// or https://")
        elif env is not None or cwd is not None:
            raise ValueError(f"MCP server {name!r}: env and cwd apply to a command, not a url")
        if headers is not None and (
            command is not None
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
        ):
            raise ValueError(
                f"MCP server {name!r}: headers (strings to strings) apply to a url only"
            )
        if env is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ValueError(f"MCP server {name!r}: env must map strings to strings")
        if protocol not in ("auto", "legacy"):
            raise ValueError(f"protocol must be 'auto' or 'legacy', got {protocol!r}")
        if isinstance(connect_timeout, bool) or not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be seconds > 0, got {connect_timeout!r}")
        self._name = name
        self.command = tuple(command) if command is not None else None
        self.env = dict(env) if env is not None else None
        self.cwd = str(cwd) if cwd is not None else None
        self.url = url
        self.headers = dict(headers) if headers is not None else None
        self.connect_timeout = float(connect_timeout)
        self.protocol = protocol
        self._group: TaskGroup | None = None
        self._connection: Connection | None = None
        self._lock = anyio.Lock()
        self._listeners: list[Callable[[], Any]] = []
        self._tools: dict[str, Tool] = {}
        self._unoffered: set[str] = set()  # task-only tools already warned about

    # -- the ToolBackend protocol -------------------------------------------------------------

    @property
    def name(self) -> str:
        """The server's name (also the backend's name in a catalog)."""
        return self._name

    async def list(self) -> builtins.list[Tool]:
        """The server's tools, listed afresh (connecting first if needed).

        Raises:
            MCPConnectionError: if the server cannot be reached (a catalog reports it and
                counts the backend as empty until its retry).
        """
        connection = await self._connected()
        try:
            listed = await list_all_tools(connection.client)
        except Exception as exc:
            self._lost(connection, exc)
            raise MCPConnectionError(
                f"MCP server {self._name!r}: listing its tools failed ({type(exc).__name__})"
            ) from exc
        version = semver_of(getattr(connection.client.server_info, "version", None))
        names = tool_names(self.namespace, (t.name for t in listed))
        tools: dict[str, Tool] = {}
        for mcp_tool in listed:
            if task_required(mcp_tool):
                self._warn_task_only(mcp_tool.name)
                continue
            definition = mcp_definition(
                mcp_tool,
                namespace=self.namespace,
                name=names[mcp_tool.name],
                version=version,
                server=self._name,
            )
            if definition is not None:
                tools[definition.tool_id] = Tool(definition, self._handler(mcp_tool.name))
        self._tools = tools
        return list(tools.values())

    def _warn_task_only(self, mcp_name: str) -> None:
        """Once per tool: say why a task-only tool is not offered."""
        if mcp_name in self._unoffered:
            return
        self._unoffered.add(mcp_name)
        logger.warning(
            "MCP server %r: tool %r is not offered to the model: it accepts only task-augmented "
            "calls (execution.taskSupport 'required') and this client does not implement "
            "task-augmented calls, so every call to it would fail",
            self._name,
            mcp_name,
        )

    async def get(self, tool_id: str) -> Tool | None:
        """The tool with exactly this id from the last listing (listing first if none was
        made, or the tools changed since), or None.

        Raises:
            MCPConnectionError: as `list()`.
        """
        if not self._tools:
            await self.list()
        try:
            return self._tools.get(str(parse_tool_id(tool_id)))
        except ValueError:
            return None

    # -- change notification ------------------------------------------------------------------

    def on_tools_changed(self, callback: Callable[[], Any]) -> Callable[[], None]:
        """Call `callback()` when the server's tools change (`tools/list_changed`) or the
        backend reconnected; returns a function that stops the calls. A callback that
        returns an awaitable has it awaited in a task of the backend (it may call the
        server, e.g. `list()`); one that raises is logged."""
        self._listeners.append(callback)

        def remove() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return remove

    def add_to(self, catalog: ToolCatalog) -> ToolCatalog:
        """Add this backend to `catalog` and invalidate the catalog whenever the server's
        tools change; returns the catalog."""
        catalog.add_backend(self)
        self.on_tools_changed(catalog.invalidate)
        return catalog

    def _changed(self) -> None:
        """Tell every listener; awaitables they return run in the backend's task group
        (never inline: the SDK's message handler must not wait for a request of its own)."""
        self._tools = {}
        for callback in builtins.list(self._listeners):
            try:
                outcome = callback()
            except Exception:
                logger.exception("MCP server %r: a tools-changed callback failed", self._name)
                continue
            if inspect.isawaitable(outcome) and self._group is not None:
                self._group.start_soon(self._await_listener, outcome)

    async def _await_listener(self, outcome: Awaitable[Any]) -> None:
        try:
            await outcome
        except Exception:
            logger.exception("MCP server %r: a tools-changed callback failed", self._name)

    # -- lifetime -----------------------------------------------------------------------------

    async def __aenter__(self) -> MCPBackend:
        """Start the server (or reach it) and connect.

        Raises:
            MCPConnectionError: if it cannot be started or reached in `connect_timeout`.
            ImportError: if the `mcp` package is not installed (`pip install llmrtc[mcp]`).
        """
        import_sdk()
        if self._group is not None:
            raise RuntimeError(f"MCPBackend {self._name!r} is already open")
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        try:
            await self._connected()
        except BaseException:
            self._group = None
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the connection (a stdio server's process ends with it)."""
        group, self._group = self._group, None
        if group is None:
            return
        if self._connection is not None:
            self._connection.stop.set()
        # Not handed the block's exception: anyio would wrap it in an ExceptionGroup, and the
        # caller's `except PlaybookError` would miss it. The connection task ends on `stop`.
        await group.__aexit__(None, None, None)

    @property
    def connected(self) -> bool:
        """Whether a session with the server is open right now."""
        connection = self._connection
        return connection is not None and not connection.closed.is_set()

    async def _connected(self) -> Connection:
        """The open connection, or a new one (one caller connects; the others wait)."""
        connection = self._connection
        if connection is not None and not connection.stop.is_set():
            if connection.alive():
                return connection
            connection.stop.set()  # died while idle: reconnect before sending this call
        async with self._lock:
            connection = self._connection
            if connection is not None and not connection.stop.is_set():
                return connection
            if self._group is None:
                raise RuntimeError(
                    f"MCPBackend {self._name!r} is not open: use 'async with MCPBackend(...)'"
                )
            reconnect = connection is not None
            if connection is not None:
                with anyio.CancelScope(shield=True):
                    await connection.closed.wait()  # the old process is gone first
            try:
                with anyio.fail_after(self.connect_timeout):
                    connection = cast(Connection, await self._group.start(self._serve))
            except Exception as exc:
                raise MCPConnectionError(self._connect_failure(exc)) from exc
            self._connection = connection
        if reconnect:
            logger.info("MCP server %r: reconnected", self._name)
            self._changed()
        return connection

    def _connect_failure(self, exc: BaseException) -> str:
        where = f"command {list(self.command)}" if self.command else f"url {self.url}"
        if isinstance(exc, TimeoutError):
            why = f"no answer within {self.connect_timeout:g} s"
        else:
            why = f"{type(exc).__name__}: {exc}"
        return f"MCP server {self._name!r} ({where}) could not be connected: {why}"

    async def _on_message(self, message: Any) -> None:
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            logger.info("MCP server %r: its tools changed", self._name)
            self._changed()

    async def _serve(self, *, task_status: TaskStatus[Connection]) -> None:
        target = target_of(self.command, self.env, self.cwd, self.url, self.headers)
        await serve_connection(
            target, self._name, self._on_message, self.protocol, task_status=task_status
        )

    def _lost(self, connection: Connection, exc: BaseException) -> None:
        """Mark `connection` broken after a failure that says so; the next use reconnects."""
        if is_connection_loss(exc):
            connection.stop.set()

    # -- calls --------------------------------------------------------------------------------

    def _handler(self, mcp_name: str) -> Callable[[Any, ToolContext], Any]:
        async def call_mcp_tool(args: Any, ctx: ToolContext) -> Any:
            return await self.call(
                mcp_name, dict(args), abort_signal=ctx.abort_signal, call_id=ctx.call_id
            )

        return call_mcp_tool

    async def call(
        self,
        mcp_name: str,
        arguments: Mapping[str, Any],
        *,
        abort_signal: AbortSignal | None = None,
        call_id: str | None = None,
    ) -> Any:
        """Call the server's tool `mcp_name` (its MCP name) with `arguments`; what a catalog
        tool's handler runs (prefer calling through a `ToolExecutor`).

        The call asks the server for progress (`_meta.progressToken`); its
        `notifications/progress` are logged at DEBUG on `llmrtc.catalog.mcp`: the first, then
        at most one a second, and the last (progress reaching total), each line naming how
        many were not logged; the server's message is cut to 120 characters. When the call is
        cancelled, the server's `notifications/cancelled` carries `abort_signal`'s reason if
        it is a short one-line string (`"barge-in"`, `"timeout"`, the executor's
        `speakable_reason` check); any other reason (an exception, an object, a long text that
        may hold an address or a token) is not sent: the server is told `"caller cancelled"`.

        Args:
            mcp_name: The tool's MCP name.
            arguments: Its arguments.
            abort_signal: The call's signal (the handler's `ToolContext.abort_signal`): its
                reason, if short and a string, is the cancel reason the server is told.
            call_id: The call's id, named in the progress log lines.

        Returns:
            The result's `structuredContent` (a dict) when the server sent one, else the text
            of its content blocks; media in either becomes a placeholder such as
            `[image image/png, 1.0 MB]` (the model is never sent base64 bytes).

        Raises:
            ToolError: the server reported the tool failed (`isError`), with its text.
            MCPConnectionError: the server could not be reached or died during the call (the
                next call reconnects).
            mcp.MCPError: the server answered with a JSON-RPC error (an unknown tool, say).
            Only a `ToolError`'s text reaches a model through the executor; the others are
            internal errors (a generic message; the exception goes to hooks and the log).
        """
        from mcp import MCPError

        connection = await self._connected()
        server = self._name
        label = f"{mcp_name!r}" + (f" (call {call_id})" if call_id else "")

        progress = _ProgressLog(server, label)

        def reason() -> object:
            # The raw reason: the connection sends it only if it passes `speakable_reason`.
            return (
                abort_signal.reason if abort_signal is not None and abort_signal.aborted else None
            )

        try:
            with cancel_reason(reason):
                result = await connection.client.call_tool(
                    mcp_name, dict(arguments), progress_callback=progress
                )
        except (MCPError, anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            if not is_connection_loss(exc):
                raise  # a JSON-RPC error of the server's: the executor reports it, unshown
            connection.stop.set()
            raise MCPConnectionError(
                f"MCP server {self._name!r}: the connection was lost during {mcp_name!r}"
            ) from exc
        if result.is_error:
            raise ToolError(error_text(result, self._name, mcp_name))
        return result_value(result)

    def __repr__(self) -> str:
        where = f"command={list(self.command)!r}" if self.command else f"url={self.url!r}"
        return f"MCPBackend({self._name!r}, {where})"


_PROGRESS_LOG_INTERVAL = 1.0
"""Seconds between two progress lines of one call (a server may report every few ms)."""

_MAX_PROGRESS_MESSAGE = 120
"""A server's progress message is logged cut to this many characters."""


class _ProgressLog:
    """One call's `progress_callback`: the server's progress at DEBUG, rate-limited (the
    first, then at most one per `_PROGRESS_LOG_INTERVAL`, and the last), messages cut."""

    def __init__(self, server: str, label: str) -> None:
        self._server = server
        self._label = label
        self._last: float | None = None
        self._skipped = 0

    async def __call__(self, value: float, total: float | None, message: str | None) -> None:
        # Until tools have a progress hook of their own, the server's progress is logged.
        if not logger.isEnabledFor(logging.DEBUG):
            return
        now = time.monotonic()
        done = total is not None and value >= total
        if self._last is not None and now - self._last < _PROGRESS_LOG_INTERVAL and not done:
            self._skipped += 1
            return
        self._last = now
        text = ""
        if message:
            text = " ".join(message[: _MAX_PROGRESS_MESSAGE + 1].split())
            if len(message) > _MAX_PROGRESS_MESSAGE:
                text = text[:_MAX_PROGRESS_MESSAGE] + f"... ({len(message)} characters)"
            text = f": {text}"
        skipped = f" ({self._skipped} updates not logged)" if self._skipped else ""
        self._skipped = 0
        logger.debug(
            "MCP server %r: %s progress %g%s%s%s",
            self._server,
            self._label,
            value,
            f"/{total:g}" if total is not None else "",
            text,
            skipped,
        )
