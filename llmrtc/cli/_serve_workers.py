"""`llmrtc serve --workers N`: N worker processes on one port, and the supervisor over them.

Why processes: one event loop keeps about 10 sessions' audio on time (ARCHITECTURE.md), so a
machine serves more with more loops. Each worker is `llmrtc serve` itself (`--worker-store`),
binding the port with `SO_REUSEPORT` (the kernel spreads connections among them) and keeping
vanished sessions in one SQLite store in a temporary directory, so a client may resume on any
worker. The supervisor:

- picks the port first when `--port 0` (it holds a `SO_REUSEPORT` socket bound to it, not
  listening, until every worker listens, so no other program takes it meanwhile);
- starts the workers in their own process group (a terminal's Ctrl-C reaches only the
  supervisor, which forwards it once) with a pipe as stdin (when the supervisor dies the pipe
  closes and the workers shut down);
- prints the one `listening on` line once every worker printed its own, forwards SIGTERM and
  SIGINT, and exits 0 when every worker exited 0 (130 after a second Ctrl-C). A worker that
  dies stops the others (exit 1).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from llmrtc.cli._serve_run import LISTENING

__all__ = ["supervise", "worker_command"]

_INTERRUPTED = 130  # the shell's status for a process ended by SIGINT
_STOP_TIMEOUT = 10.0  # seconds past the grace before a worker that did not exit is killed


def worker_command(args: argparse.Namespace, port: int, store: Path) -> list[str]:
    """The command line of one worker: the same options, the chosen port, the shared store."""
    command = [sys.executable, "-m", "llmrtc.cli", "serve", args.target]
    command += ["--host", args.host, "--port", str(port)]
    command += ["--max-sessions", str(args.max_sessions), "--llm", args.llm]
    command += ["--log-level", args.log_level, "--idle-timeout", repr(args.idle_timeout)]
    command += ["--resume-ttl", repr(args.resume_ttl)]
    command += ["--shutdown-grace", repr(args.shutdown_grace), "--worker-store", str(store)]
    if args.otel is not None:
        command += ["--otel", args.otel]
    if args.fake_engines is not None:
        command.append(f"--fake-engines={args.fake_engines}")
    return command


def _reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) with SO_REUSEPORT, not listening: the workers can bind
    the same port while it holds it, and no other program can."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    reserved = socket.socket(family, socket.SOCK_STREAM)
    try:
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        reserved.bind((host, port))
    except BaseException:
        reserved.close()
        raise
    return reserved


class _Workers:
    """The worker processes and what they reported."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.processes: list[anyio.abc.Process] = []
        self.listening: set[int] = set()
        self.url: str | None = None
        self.all_listening = anyio.Event()
        self.stopping = False
        self.failed = False
        self.interrupts = 0

    def signal_all(self, signum: signal.Signals) -> None:
        for process in self.processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signum)


async def supervise(args: argparse.Namespace) -> int:
    """Run `args.workers` workers on one port until a signal; the exit status."""
    if not hasattr(socket, "SO_REUSEPORT"):
        print("error: --workers needs SO_REUSEPORT (Linux, macOS, BSD)", file=sys.stderr)
        return 1
    try:
        reserved = _reserve_port(args.host, args.port)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    port = reserved.getsockname()[1]
    store_dir = Path(tempfile.mkdtemp(prefix="llmrtc-serve-"))
    workers = _Workers(args.workers)
    print(
        f"llmrtc serve: starting {args.workers} workers on port {port}", file=sys.stderr, flush=True
    )
    try:
        command = worker_command(args, port, store_dir / "sessions.sqlite3")
        async with anyio.create_task_group() as group:
            group.start_soon(_forward_signals, workers, args.shutdown_grace)
            for _ in range(args.workers):
                process = await anyio.open_process(
                    command, stdin=-1, stdout=-1, stderr=None, start_new_session=True
                )
                workers.processes.append(process)
                group.start_soon(_follow, process, workers, group.cancel_scope)
            group.start_soon(_announce, workers, reserved)
            for process in workers.processes:
                await process.wait()
            group.cancel_scope.cancel()
    finally:
        reserved.close()
        with anyio.CancelScope(shield=True):
            await _stop(workers, args.shutdown_grace)
        shutil.rmtree(store_dir, ignore_errors=True)
    if workers.interrupts > 1:
        return _INTERRUPTED  # stopped at once, as a single process would report it
    if workers.failed or any(p.returncode != 0 for p in workers.processes):
        return 1
    print("llmrtc serve: stopped", file=sys.stderr, flush=True)
    return 0


async def _announce(workers: _Workers, reserved: socket.socket) -> None:
    await workers.all_listening.wait()
    reserved.close()  # every worker holds the port now
    print(f"{LISTENING}{workers.url} (open it in Chromium)", flush=True)


async def _follow(process: anyio.abc.Process, workers: _Workers, scope: anyio.CancelScope) -> None:
    """Read a worker's stdout: its `listening` line, then anything else it prints (passed on);
    a worker that exits before the supervisor stops it fails the whole server."""
    assert process.stdout is not None
    buffer = ""
    async for text in TextReceiveStream(process.stdout):
        buffer += text
        *lines, buffer = buffer.split("\n")
        for line in lines:
            if line.startswith(LISTENING):
                workers.url = line[len(LISTENING) :].split(" ", 1)[0]
                workers.listening.add(process.pid)
                if len(workers.listening) == workers.count:
                    workers.all_listening.set()
            else:
                print(line, flush=True)
    code = await process.wait()
    if not workers.stopping:
        print(f"error: worker {process.pid} exited with status {code}", file=sys.stderr)
        workers.failed = True
        workers.stopping = True
        workers.signal_all(signal.SIGTERM)
        scope.cancel()


async def _forward_signals(workers: _Workers, grace: float) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            if signum == signal.SIGINT:
                workers.interrupts += 1
            if workers.interrupts > 1:
                workers.signal_all(signal.SIGINT)  # the second Ctrl-C: workers exit at once
                continue
            if not workers.stopping:
                workers.stopping = True
                print(
                    f"llmrtc serve: shutting down {len(workers.processes)} workers; live sessions "
                    f"get up to {grace:g} s to end",
                    file=sys.stderr,
                    flush=True,
                )
                workers.signal_all(signum)


async def _stop(workers: _Workers, grace: float) -> None:
    """Make sure no worker outlives the supervisor: SIGTERM, then SIGKILL after the grace."""
    workers.stopping = True
    workers.signal_all(signal.SIGTERM)
    with anyio.move_on_after(grace + _STOP_TIMEOUT):
        for process in workers.processes:
            await process.wait()
    for process in workers.processes:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if process.stdin is not None:
            await process.stdin.aclose()
