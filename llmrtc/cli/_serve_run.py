"""One `llmrtc serve` process: load the bot, open the engines, serve until a signal.

With `--workers N` (N > 1) this process is the supervisor instead (`_serve_workers`): it
starts N of these as worker processes and prints the one URL line once all of them listen.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc

from llmrtc.cli._serve_engines import (
    ServeSetupError,
    open_llm,
    open_speech,
    opening_message,
    speech_mode_for,
    telemetry,
)

if TYPE_CHECKING:
    from llmrtc.agent import TurnHandler
    from llmrtc.catalog import Toolkit
    from llmrtc.playbook import Playbook
    from llmrtc.rtc.server import RTCServer
    from llmrtc.tools import ToolRegistry

__all__ = ["LISTENING", "WORKER_SETUP_FAILED", "serve_command"]

LISTENING = "llmrtc serve: listening on "
"""How the one line on stdout starts (then the URL and `(open it in Chromium)`)."""
WORKER_SETUP_FAILED = 3
"""A worker's exit status when it could not open what it serves with (a missing package or
model, a bad option) and said why: starting it again would fail the same way, so the
supervisor does not restart it (a crash exits 1 and is restarted)."""
_INTERRUPTED = 130  # the shell's status for a process ended by SIGINT
BACKSTOP_MARGIN = 5.0
"""Seconds past `--shutdown-grace` after which a stopping process exits whatever still runs
(a tool that ignores cancellation, a shutdown step that hangs), listing it (status 1)."""


def serve_command(args: argparse.Namespace) -> int:
    """Run `llmrtc serve` with parsed `args`; the exit status."""
    from llmrtc.cli import _load_bot

    target = args.target
    is_tools = target.endswith(".py")
    loaded = _load_bot(None if is_tools else target, target if is_tools else None)
    if isinstance(loaded, int):
        return loaded  # the reason is printed already
    if args.workers > 1 and args.worker_store is None:
        from llmrtc.cli._serve_workers import supervise

        return anyio.run(supervise, args)
    _configure_logging(args.log_level, worker=args.worker_store is not None)
    playbook, registry, toolkits = loaded
    try:
        return anyio.run(_serve, args, playbook, registry, toolkits)
    except KeyboardInterrupt:  # only where SIGINT cannot be received as a signal
        return _INTERRUPTED


def _configure_logging(level: str, *, worker: bool) -> None:
    """Log lines on stderr from `--log-level` up (a worker's are prefixed with its pid)."""
    prefix = f"[worker {os.getpid()}] " if worker else ""
    logging.basicConfig(
        level=level.upper(),
        stream=sys.stderr,
        format=f"{prefix}%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _messages(*, worker: bool) -> TextIO:
    """Where this process's own messages go: stderr (a worker's prefixed with its pid)."""
    if worker:
        return _PlainLines(sys.stderr, f"[worker {os.getpid()}] ")  # type: ignore[return-value]
    return sys.stderr


class _PlainLines:
    """A text stream that is never a terminal and prefixes what is written to it."""

    def __init__(self, out: TextIO, prefix: str) -> None:
        self._out, self._prefix = out, prefix
        self._line_start = True

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            self._out.write(self._prefix + piece if self._line_start else piece)
            self._line_start = piece.endswith("\n")
        return len(text)

    def flush(self) -> None:
        self._out.flush()

    def isatty(self) -> bool:
        return False


async def _serve(
    args: argparse.Namespace,
    playbook: Playbook | None,
    registry: ToolRegistry | None,
    toolkits: list[Toolkit],
) -> int:
    from llmrtc.cli.terminal import ModelProgress

    worker = args.worker_store is not None
    fake = args.fake_engines is not None
    say = _messages(worker=worker)
    # A bar on a terminal; plain lines otherwise, and always in a worker (several workers
    # drawing bars on one terminal would garble each other).
    progress = ModelProgress(say)
    print(opening_message(args.llm, fake=fake), file=say, flush=True)
    try:
        otel = telemetry(args.otel)
    except ServeSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return WORKER_SETUP_FAILED if worker else 1
    try:
        async with anyio.create_task_group() as ticking:
            # Loading the model reports nothing for many seconds: the seconds keep showing.
            ticking.start_soon(progress.animate)
            try:
                status = await _open_and_serve(args, playbook, registry, toolkits, otel, progress)
            finally:
                progress.done()
    finally:
        otel.shutdown()
    return status


async def _open_and_serve(
    args: argparse.Namespace,
    playbook: Playbook | None,
    registry: ToolRegistry | None,
    toolkits: list[Toolkit],
    otel: Any,
    progress: Any,
) -> int:
    worker = args.worker_store is not None
    async with contextlib.AsyncExitStack() as stack:
        try:
            llm = await stack.enter_async_context(
                open_llm(args.llm, fake_script=args.fake_engines, progress=progress)
            )
            with speech_mode_for(args.llm):
                speech = await stack.enter_async_context(
                    open_speech(fake=args.fake_engines is not None, progress=progress)
                )
            from llmrtc.cli.bot import open_mcp_tools

            # The playbook's `mcp_servers:`: connected once, shared by every session.
            registry = await stack.enter_async_context(
                open_mcp_tools(registry, playbook, toolkits=toolkits)
            )
        except (ServeSetupError, ImportError, RuntimeError, ValueError, OSError) as exc:
            # A missing package or model, a bad LLMRTC_SPEECH, no API key for --llm
            # openai: the message says what to do.
            progress.done()
            print(f"error: {exc}", file=sys.stderr)
            return WORKER_SETUP_FAILED if worker else 1
        progress.done()
        server = _server(args, llm, speech, playbook, registry, toolkits, otel.hooks)
        return await _run_until_signal(server, args, worker=worker)


def _server(
    args: argparse.Namespace,
    llm: Any,
    speech: Any,
    playbook: Playbook | None,
    registry: ToolRegistry | None,
    toolkits: list[Toolkit],
    hooks: Any,
) -> RTCServer:
    from llmrtc.rtc.config import ServerConfig
    from llmrtc.rtc.server import RTCServer
    from llmrtc.rtc.store import SQLiteSessionStore

    config = ServerConfig(
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        idle_timeout=args.idle_timeout,
        resume_ttl=args.resume_ttl,
        reuse_port=args.worker_store is not None,
        shutdown_grace=args.shutdown_grace,
    )
    store = SQLiteSessionStore(args.worker_store) if args.worker_store else None
    return RTCServer(
        lambda: _handler(llm, registry, playbook, toolkits, hooks),
        speech=speech,
        config=config,
        hooks=hooks,
        store=store,
    )


def _handler(
    llm: Any,
    registry: ToolRegistry | None,
    playbook: Playbook | None,
    toolkits: list[Toolkit],
    hooks: Any,
) -> TurnHandler:
    """One session's handler: `build_handler`'s, with the `--otel` hooks on its turns, model
    requests and tools too (the server's hooks see only the voice loop and the session)."""
    from llmrtc.cli.bot import build_handler

    return build_handler(llm, registry, playbook, toolkits=toolkits, hooks=hooks)


async def _run_until_signal(server: RTCServer, args: argparse.Namespace, *, worker: bool) -> int:
    """Serve until SIGTERM / SIGINT (or, in a worker, its stdin closing), then shut down
    gracefully; a second SIGINT exits at once, and whatever still runs `BACKSTOP_MARGIN`
    seconds past the grace does not keep the process alive."""
    stopping = anyio.Event()
    async with anyio.create_task_group() as group:
        say = _messages(worker=worker)
        group.start_soon(_watch_signals, server, args.shutdown_grace, stopping, say)
        if worker:
            group.start_soon(_watch_supervisor, stopping)
        try:
            async with server:
                print(f"{LISTENING}{server.url} (open it in Chromium)", flush=True)
                await stopping.wait()
                _arm_backstop(server, args.shutdown_grace, say)
        except OSError as exc:  # the port is taken, the host is not ours
            print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            group.cancel_scope.cancel()
            return WORKER_SETUP_FAILED if worker else 1
        group.cancel_scope.cancel()
    print("llmrtc serve: stopped", file=say, flush=True)
    return 0


async def _watch_signals(
    server: RTCServer, grace: float, stopping: anyio.Event, say: TextIO
) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            if stopping.is_set():
                if signum == signal.SIGINT:
                    # The user does not want to wait for the sessions: leave now.
                    print("llmrtc serve: stopping now", file=say, flush=True)
                    sys.stdout.flush()
                    os._exit(_INTERRUPTED)
                continue
            server.stop_admitting()
            sessions = server.active_sessions
            print(
                f"llmrtc serve: shutting down; {sessions} live session(s) get up to "
                f"{grace:g} s to end" + (" (Ctrl-C again to stop now)" if sessions else ""),
                file=say,
                flush=True,
            )
            stopping.set()


def _arm_backstop(server: RTCServer, grace: float, say: TextIO) -> None:
    """From now on the process exits within `grace + BACKSTOP_MARGIN` seconds, whatever runs.

    The server cuts the sessions still live when the grace ends; this is for what does not
    stop when told (a `"finish"` tool whose handler ignores cancellation, a thread that cannot
    be cancelled, a close that hangs). A timer thread, not a task: it fires even if a handler
    blocks the event loop, and during interpreter exit while executor threads are joined.
    """
    loop = asyncio.get_running_loop()
    timer = threading.Timer(grace + BACKSTOP_MARGIN, _give_up, (server, loop, grace, say))
    timer.daemon = True
    timer.name = "llmrtc-serve-backstop"
    timer.start()


def _give_up(server: RTCServer, loop: asyncio.AbstractEventLoop, grace: float, say: TextIO) -> None:
    with contextlib.suppress(Exception):  # a report that fails must not stop the exit
        print(
            f"llmrtc serve: still not stopped {grace + BACKSTOP_MARGIN:g} s after the signal "
            f"(--shutdown-grace {grace:g} s + {BACKSTOP_MARGIN:g} s); exiting with this still "
            f"running: {_still_running(server, loop)}",
            file=say,
            flush=True,
        )
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    os._exit(1)


def _still_running(server: RTCServer, loop: asyncio.AbstractEventLoop) -> str:
    """What keeps the process alive, in one line: live sessions, the tasks of the event loop
    (each as `outer -> innermost awaited` coroutine) and busy threads (their current code)."""
    parts = [f"{server.active_sessions} live session(s)"]
    tasks: Counter[str] = Counter()
    for _ in range(3):  # read from another thread: the task set may change meanwhile
        try:
            running = list(asyncio.all_tasks(loop))
            break
        except RuntimeError:
            running = []
    for task in running:
        tasks[_awaiting(task.get_coro())] += 1
    if tasks:
        listed = [f"{name}" + (f" x{n}" if n > 1 else "") for name, n in tasks.most_common(12)]
        parts.append("tasks: " + ", ".join(listed))
    frames = sys._current_frames()
    busy = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if thread is threading.current_thread() or thread is threading.main_thread():
            continue
        if frame is None or frame.f_code.co_filename.endswith(_IDLE_THREAD_FILES):
            continue  # an idle worker thread waiting for work
        code = frame.f_code
        busy.append(f"{thread.name} in {code.co_qualname} ({code.co_filename}:{frame.f_lineno})")
    if busy:
        parts.append("threads: " + ", ".join(busy))
    return "; ".join(parts)


_IDLE_THREAD_FILES = ("threading.py", "queue.py", f"concurrent{os.sep}futures{os.sep}thread.py")


def _awaiting(coro: Any) -> str:
    """A task as `outer -> ... -> innermost` coroutine names: where it waits is what is stuck."""
    names: list[str] = []
    awaited = coro
    for _ in range(50):
        if awaited is None:
            break
        name = getattr(awaited, "__qualname__", None)
        if name is not None and (not names or names[-1] != name):
            names.append(name)
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return " -> ".join(names) if names else repr(coro)


async def _watch_supervisor(stopping: anyio.Event) -> None:
    """A worker stops when its supervisor's end of stdin closes (the supervisor is gone)."""
    async for _ in _stdin_chunks():
        pass
    stopping.set()


async def _stdin_chunks() -> AsyncIterator[bytes]:
    fd = sys.stdin.fileno()
    while True:
        await anyio.wait_readable(fd)
        chunk = os.read(fd, 4096)
        if not chunk:
            return
        yield chunk
