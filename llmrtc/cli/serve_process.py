"""One serving process of `llmrtc serve`: open the engines, serve until a signal, stop within
the grace (a backstop exits whatever still runs past it).

It runs alone, or as one worker of `--workers N` under `supervisor`: then its stdout carries
only the `LISTENING` line the supervisor waits for, its messages on stderr are prefixed with
its pid, and `WORKER_SETUP_FAILED` tells the supervisor not to start it again.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, TextIO

import anyio
import anyio.abc

from llmrtc.cli.logs import serve_logging
from llmrtc.cli.serve_engines import (
    ServeSetupError,
    open_llm,
    open_speech,
    opening_message,
    speech_mode_for,
    telemetry,
)
from llmrtc.telemetry.hooks import CompositeHooks, Hooks

if TYPE_CHECKING:
    from llmrtc.agent import TurnHandler
    from llmrtc.catalog import Toolkit
    from llmrtc.cli.bot import Bot
    from llmrtc.playbook import Playbook
    from llmrtc.rtc.server import RTCServer
    from llmrtc.telemetry.events import ToolEndEvent, ToolStartEvent
    from llmrtc.tools import ToolRegistry

__all__ = ["BACKSTOP_MARGIN", "LISTENING", "WORKER_SETUP_FAILED", "serve_process"]

logger = logging.getLogger(__name__)

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


def serve_process(args: argparse.Namespace, bot: Bot) -> int:
    """Serve `bot` in this process until a signal (as a worker when `args.worker_store` is
    set); the exit status."""
    worker = args.worker_store is not None
    serve_logging(args.log_level, worker=worker)
    try:
        status = anyio.run(
            _serve, args, bot.playbook, bot.registry, bot.toolkits, bot.resource_limits
        )
    except KeyboardInterrupt:  # only where SIGINT cannot be received as a signal
        return _INTERRUPTED
    if status == 0:
        # Stopped: but a thread still running (a sync tool that ignores cancellation) keeps
        # the interpreter from exiting; "stopped" is true only once it is done (the backstop
        # armed at the signal ends the wait, saying what still ran). The interpreter's exit
        # is what knows which threads those are: it first tells idle pool threads to quit
        # (a ThreadPoolExecutor's workers waiting for work, such as the turn detector's, end
        # only then), then joins the others, then runs atexit. Joining every thread here
        # instead waited on an idle pool worker until the backstop: 35 s and status 1.
        atexit.register(_say_stopped, worker)
    return status


def _say_stopped(worker: bool) -> None:
    print("llmrtc serve: stopped", file=_messages(worker=worker), flush=True)


def _messages(*, worker: bool) -> TextIO:
    """Where this process's own messages go: stderr (a worker's prefixed with its pid)."""
    if worker:
        return _PlainLines(sys.stderr, _worker_prefix())  # type: ignore[return-value]
    return sys.stderr


def _worker_prefix() -> str:
    return f"[worker {os.getpid()}] "


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


class _RunningTools(Hooks):
    """The tool calls whose handlers run right now (by name): what the backstop names first
    when a shutdown does not finish."""

    def __init__(self) -> None:
        self.calls: dict[tuple[str, str], str] = {}

    def on_tool_start(self, event: ToolStartEvent) -> None:
        self.calls[(event.execution_id, event.call_id)] = event.tool_name

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.calls.pop((event.execution_id, event.call_id), None)


class _Stop:
    """How this process stops: the first SIGTERM / SIGINT (or, in a worker, its supervisor
    going away) stops the start while the engines open, or the server once it serves; a
    second SIGINT exits at once (130). Installed before the engines open, so no signal meets
    Python's default action (a silent death with the progress bar left on the screen)."""

    def __init__(self, grace: float, say: TextIO, *, worker: bool) -> None:
        self.grace, self.say, self.worker = grace, say, worker
        self.requested = anyio.Event()
        self.opening = anyio.CancelScope()  # cancelled by a stop while the engines open
        self.server: RTCServer | None = None
        self.tools = _RunningTools()
        self.clear_screen: Any = None  # ModelProgress.done while the bar may be shown

    def serving(self, server: RTCServer) -> None:
        """The server listens: from now on a stop refuses new sessions and ends live ones."""
        self.server = server
        if self.requested.is_set():
            server.stop_admitting()

    def request(self) -> None:
        """Stop: the opening is cancelled (it ends once a load that cannot be interrupted
        returns), and whatever still runs `grace + BACKSTOP_MARGIN` seconds from now does not
        keep the process alive."""
        if self.requested.is_set():
            return
        self.requested.set()
        self.opening.cancel()
        if self.server is not None:
            self.server.stop_admitting()
        _arm_backstop(self)

    async def watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                if self.requested.is_set():
                    if signum == signal.SIGINT:
                        # The user does not want to wait for the sessions: leave now.
                        self._say("llmrtc serve: stopping now")
                        sys.stdout.flush()
                        os._exit(_INTERRUPTED)
                    continue
                # The supervisor of --workers says it for all of them.
                again = signum == signal.SIGINT and not self.worker
                hint = " (Ctrl-C again to stop now)" if again else ""
                if self.server is None:
                    self._say(f"llmrtc serve: stopping: the model is still loading{hint}")
                else:
                    sessions = self.server.active_sessions
                    self._say(
                        f"llmrtc serve: shutting down; {sessions} live session(s) get up to "
                        f"{self.grace:g} s to end" + (hint if sessions else "")
                    )
                self.request()

    async def watch_supervisor(self) -> None:
        """A worker stops when its supervisor's end of stdin closes (the supervisor is gone)."""
        async for _ in _stdin_chunks():
            pass
        self.request()

    def _say(self, text: str) -> None:
        if self.clear_screen is not None:
            self.clear_screen()
        print(text, file=self.say, flush=True)


async def _serve(
    args: argparse.Namespace,
    playbook: Playbook | None,
    registry: ToolRegistry | None,
    toolkits: list[Toolkit],
    resource_limits: Mapping[str, int] | None,
) -> int:
    worker = args.worker_store is not None
    fake = args.fake_engines is not None
    say = _messages(worker=worker)
    # A worker's supervisor said how long the workers take together.
    print(opening_message(args.llm, fake=fake, estimate=not worker), file=say, flush=True)
    stop = _Stop(args.shutdown_grace, say, worker=worker)
    try:
        otel = telemetry(args.otel)
    except ServeSetupError as exc:
        print(f"error: {exc}", file=say, flush=True)
        return WORKER_SETUP_FAILED if worker else 1
    try:
        async with anyio.create_task_group() as watchers:
            watchers.start_soon(stop.watch_signals)
            if worker:
                watchers.start_soon(stop.watch_supervisor)
            status = await _open_and_serve(
                args, playbook, registry, toolkits, resource_limits, otel, stop
            )
            watchers.cancel_scope.cancel()
    finally:
        otel.shutdown()
    return status


async def _open_and_serve(
    args: argparse.Namespace,
    playbook: Playbook | None,
    registry: ToolRegistry | None,
    toolkits: list[Toolkit],
    resource_limits: Mapping[str, int] | None,
    otel: Any,
    stop: _Stop,
) -> int:
    from llmrtc.cli.terminal import model_progress

    worker = args.worker_store is not None
    hooks = CompositeHooks([h for h in (otel.hooks, stop.tools) if h is not None])
    async with contextlib.AsyncExitStack() as stack:
        with stop.opening:
            try:
                # A bar on a terminal; plain lines otherwise, and always in a worker (several
                # workers drawing bars on one terminal would garble each other). A worker
                # gives no load estimate: it does not know how many others load beside it.
                async with model_progress(stop.say, estimate=not worker) as progress:
                    stop.clear_screen = progress.done
                    llm = await stack.enter_async_context(
                        open_llm(args.llm, fake_script=args.fake_engines, progress=progress)
                    )
                    with speech_mode_for(args.llm):
                        speech = await stack.enter_async_context(
                            open_speech(
                                fake=args.fake_engines is not None, progress=progress.speech
                            )
                        )
            except (ServeSetupError, ImportError, RuntimeError, ValueError, OSError) as exc:
                # A missing package or model, a bad LLMRTC_SPEECH, no API key for --llm
                # openai: the message says what to do.
                if not stop.requested.is_set():  # else: what the cancelled opening raised
                    print(f"error: {exc}", file=stop.say, flush=True)
                    return WORKER_SETUP_FAILED if worker else 1
        stop.clear_screen = None
        if stop.requested.is_set():
            return 0  # stopped while opening: what did open closes as the stack unwinds
        from llmrtc.cli.bot import open_mcp_tools

        # The playbook's `mcp_servers:`, connected once and shared by every session. Opened
        # here, at the stack's own level, not inside the progress display or the opening's
        # cancel scope: their connections run task groups that outlive both, and a scope
        # must close in the order it opened.
        try:
            registry = await stack.enter_async_context(
                open_mcp_tools(registry, playbook, toolkits=toolkits)
            )
        except (ServeSetupError, ImportError, RuntimeError, ValueError, OSError) as exc:
            print(f"error: {exc}", file=stop.say, flush=True)  # e.g. a server that won't start
            return WORKER_SETUP_FAILED if worker else 1
        if stop.requested.is_set():
            return 0
        # One set of pools for every session's executor: a CRM allowing two calls at a time
        # gets two from this process, not two per session.
        if resource_limits is not None:
            from llmrtc.execution.resources import ResourceLimits

            resource_limits = ResourceLimits(resource_limits)
        server = _server(args, llm, speech, playbook, registry, toolkits, resource_limits, hooks)
        async with anyio.create_task_group() as group:
            if _keeps_prompts(llm):
                # In the background: the page is opened and the first words said meanwhile;
                # a turn that comes first waits its turn at the server, as it would cold.
                warm = _handler(llm, registry, playbook, toolkits, resource_limits, None)
                group.start_soon(_warm, warm)
            code = await _run_until_signal(server, args, stop)
            group.cancel_scope.cancel()
        return code


def _keeps_prompts(llm: object) -> bool:
    """Whether `llm`'s server keeps prompt prefixes, so warming a session's prompt pays
    (`CompatProfile.prompt_cache`: the offline model; never a hosted API, which bills it)."""
    from llmrtc.llm import OpenAIProvider

    return isinstance(llm, OpenAIProvider) and llm.compat.prompt_cache


async def _warm(handler: TurnHandler) -> None:
    """Have the model server read the first prompt of a session (its system prompt and tools)
    before the first caller's turn needs it (`WarmableHandler`)."""
    from llmrtc.agent.handler import WarmableHandler

    if not isinstance(handler, WarmableHandler):
        return
    started = time.perf_counter()
    try:
        await handler.warm()
    except Exception as exc:  # only the first turn is slower: never a reason to stop serving
        logger.warning("warming the first prompt failed (%s: %s)", type(exc).__name__, exc)
        return
    logger.info("first prompt warmed in %.1f s", time.perf_counter() - started)


def _server(
    args: argparse.Namespace,
    llm: Any,
    speech: Any,
    playbook: Playbook | None,
    registry: ToolRegistry | None,
    toolkits: list[Toolkit],
    resource_limits: Mapping[str, int] | None,
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
        approvals=args.approvals,
    )
    store = SQLiteSessionStore(args.worker_store) if args.worker_store else None
    return RTCServer(
        lambda: _handler(llm, registry, playbook, toolkits, resource_limits, hooks),
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
    resource_limits: Mapping[str, int] | None,
    hooks: Any,
) -> TurnHandler:
    """One session's handler: `build_handler`'s, with the `--otel` hooks on its turns, model
    requests and tools too (the server's hooks see only the voice loop and the session).
    Each session has its own executor; given one `ResourceLimits`, they share its limits."""
    from llmrtc.cli.bot import build_handler

    return build_handler(
        llm,
        registry,
        playbook,
        toolkits=toolkits,
        hooks=hooks,
        resource_limits=resource_limits,
    )


async def _run_until_signal(server: RTCServer, args: argparse.Namespace, stop: _Stop) -> int:
    """Serve until `stop` is requested, then shut down gracefully (the server gives live
    sessions the grace; the backstop armed by the stop bounds the rest)."""
    try:
        async with server:
            stop.serving(server)
            if not _announce(server.url):
                stop.request()  # the supervisor is gone: nobody can reach this worker's line
            await stop.requested.wait()
    except OSError as exc:  # the port is taken, the host is not ours
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=stop.say)
        return WORKER_SETUP_FAILED if stop.worker else 1
    return 0


def _announce(url: str) -> bool:
    """Print the URL line on stdout; False if nobody reads it any more (a worker's supervisor
    died: the pipe is broken)."""
    try:
        print(f"{LISTENING}{url} (open it in Chromium)", flush=True)
    except BrokenPipeError:
        # Later writes (and the flush at exit) must not fail the same way.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return False
    return True


def _arm_backstop(stop: _Stop) -> None:
    """From now on the process exits within `grace + BACKSTOP_MARGIN` seconds, whatever runs.

    The server cuts the sessions still live when the grace ends; this is for what does not
    stop when told (a `"finish"` tool whose handler ignores cancellation, a thread that cannot
    be cancelled, a close that hangs, a model load). A timer thread, not a task: it fires even
    if a handler blocks the event loop, and during interpreter exit while threads are joined.
    """
    timer = threading.Timer(stop.grace + BACKSTOP_MARGIN, _give_up, (stop,))
    timer.daemon = True
    timer.name = "llmrtc-serve-backstop"
    timer.start()


def _give_up(stop: _Stop) -> None:
    grace = stop.grace
    try:
        report = _still_running(stop)
    except Exception as exc:  # a report that fails must not stop the exit
        report = f"(could not list it: {exc!r})"
    prefix = _worker_prefix() if stop.worker else ""
    text = (
        f"{prefix}llmrtc serve: still not stopped {grace + BACKSTOP_MARGIN:g} s after the "
        f"signal (--shutdown-grace {grace:g} s + {BACKSTOP_MARGIN:g} s); exiting with this "
        f"still running: {report}\n"
    )
    # Straight to the descriptor, from a thread of its own: sys.stderr's lock may be held
    # for good by the thread that is stuck, and a full pipe must not stop the exit either.
    writer = threading.Thread(target=_write_stderr, args=(text.encode(),), daemon=True)
    writer.start()
    writer.join(2.0)
    os._exit(1)


def _write_stderr(data: bytes) -> None:
    with contextlib.suppress(OSError):
        while data:
            data = data[os.write(2, data) :]


def _still_running(stop: _Stop) -> str:
    """What keeps the process alive, in one line: the tool calls still running (by name)
    first, then live sessions, the opening of the engines if it is not over, and busy threads
    (their current code). The event loop's own tasks (aiortc, anyio) are left out: they are
    what waits for these, not what is stuck."""
    parts = []
    tools = Counter(list(stop.tools.calls.values()))
    if tools:
        listed = [name + (f" x{n}" if n > 1 else "") for name, n in sorted(tools.items())]
        parts.append("tool calls: " + ", ".join(listed))
    if stop.server is None:
        parts.append("the opening of the model and the speech engines")
    else:
        parts.append(f"{stop.server.active_sessions} live session(s)")
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


async def _stdin_chunks() -> AsyncIterator[bytes]:
    fd = sys.stdin.fileno()
    while True:
        await anyio.wait_readable(fd)
        chunk = os.read(fd, 4096)
        if not chunk:
            return
        yield chunk
