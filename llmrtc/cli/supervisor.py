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
  SIGINT, and exits 0 when every worker exited 0 (130 after a second Ctrl-C); a worker still
  running `_STOP_TIMEOUT` seconds past the grace is killed;
- restarts a worker that exits while the server runs (killed, crashed, failed at start), and
  keeps the store: the other workers' sessions and every vanished session stay resumable.
  Restarts are bounded: a worker that exits `_QUICK_FAILURES` times in a row, each time
  before it listened or within `_STEADY` seconds after, is crash-looping and is not started
  again; nor is one that could not open what it serves with (`WORKER_SETUP_FAILED`: it said
  why, and would fail the same way). The others keep serving (stopping them would cut their
  live sessions, the very loss restarting avoids); with none left the command exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import anyio
import anyio.abc
from anyio.streams.text import TextReceiveStream

from llmrtc.cli.errors import CLIError
from llmrtc.cli.serve_engines import ServeSetupError, check_setup, workers_message
from llmrtc.cli.serve_process import LISTENING, WORKER_SETUP_FAILED

__all__ = ["supervise", "worker_command"]

_INTERRUPTED = 130  # the shell's status for a process ended by SIGINT
_STOP_TIMEOUT = 10.0  # seconds past the grace before a worker that did not exit is killed
# (longer than a worker's own BACKSTOP_MARGIN, so it can say what still ran before it goes).
_QUICK_FAILURES = 3  # exits in a row, each soon after the start, before a worker is given up
_STEADY = 60.0  # seconds a worker listened before it exited: not a crash loop, just a crash
_RESTART_DELAYS = (0.5, 1.0, 2.0)  # before the 1st, 2nd, ... quick restart in a row


def worker_command(args: argparse.Namespace, port: int, store: Path) -> list[str]:
    """The command line of one worker: the same options, the chosen port, the shared store."""
    command = [sys.executable, "-m", "llmrtc.cli", "serve", args.target]
    command += ["--host", args.host, "--port", str(port)]
    command += ["--max-sessions", str(args.max_sessions), "--llm", args.llm]
    command += ["--log-level", args.log_level, "--idle-timeout", repr(args.idle_timeout)]
    command += ["--resume-ttl", repr(args.resume_ttl), "--approvals", args.approvals]
    command += ["--shutdown-grace", repr(args.shutdown_grace), "--worker-store", str(store)]
    if args.otel is not None:
        command += ["--otel", args.otel]
    if args.fake_engines is not None:
        command.append(f"--fake-engines={args.fake_engines}")
    return command


def _probe_port(host: str, port: int) -> None:
    """Fail if something listens on (host, port) already: the workers' SO_REUSEPORT would
    otherwise share the port with it (another `llmrtc serve --workers` there), and the
    kernel would spread this server's connections over both.

    Raises:
        OSError: the port is taken (EADDRINUSE), or the host is not this machine's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR only: a port in TIME_WAIT is free; one held by a listener is not, not
        # even by listeners that set SO_REUSEPORT themselves.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


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


class _Slot:
    """One of the N workers: its current process (a new one after each restart)."""

    def __init__(self) -> None:
        self.process: anyio.abc.Process | None = None
        self.listening = False
        self.given_up = False


class _Workers:
    """The worker slots and what they reported."""

    def __init__(self, count: int) -> None:
        self.slots = [_Slot() for _ in range(count)]
        self.url: str | None = None
        self.all_listening = anyio.Event()
        self.stopping = False
        self.stop_requested = anyio.Event()  # by SIGTERM / SIGINT: the grace runs from now
        self.now = False  # a Ctrl-C after the stop began: the workers exit at once

    @property
    def processes(self) -> list[anyio.abc.Process]:
        """The current process of each slot that has one."""
        return [slot.process for slot in self.slots if slot.process is not None]

    @property
    def serving(self) -> list[_Slot]:
        """The slots not given up."""
        return [slot for slot in self.slots if not slot.given_up]

    def check_listening(self) -> None:
        """Announce the URL once every slot not given up listens (at least one)."""
        serving = self.serving
        if serving and all(slot.listening for slot in serving):
            self.all_listening.set()

    def unclean(self) -> list[anyio.abc.Process]:
        """The current processes that did not stop cleanly. After the stop began, a worker
        killed by the signal itself (one restarting, not yet handling signals) or exiting 130
        stopped as it was told to."""
        told = (-signal.SIGTERM, -signal.SIGINT, _INTERRUPTED) if self.stopping else ()
        return [p for p in self.processes if p.returncode != 0 and p.returncode not in told]

    def signal_all(self, signum: signal.Signals) -> None:
        for process in self.processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signum)


async def supervise(args: argparse.Namespace) -> int:
    """Run `args.workers` workers on one port until a signal; the exit status.

    Raises:
        CLIError: what every worker would fail on (said once, before any starts).
    """
    if not hasattr(socket, "SO_REUSEPORT"):
        raise CLIError("--workers needs SO_REUSEPORT (Linux, macOS, BSD)")
    try:
        check_setup(args.llm)  # what every worker would fail the same way: said once
    except ServeSetupError as exc:
        raise CLIError(str(exc)) from exc
    try:
        if args.port != 0:
            _probe_port(args.host, args.port)
        reserved = _reserve_port(args.host, args.port)
    except OSError as exc:
        taken = " (something is already listening there)" if exc.errno == errno.EADDRINUSE else ""
        raise CLIError(f"cannot listen on {args.host}:{args.port}: {exc}{taken}") from exc
    port = reserved.getsockname()[1]
    store_dir = Path(tempfile.mkdtemp(prefix="llmrtc-serve-"))
    workers = _Workers(args.workers)
    fake = args.fake_engines is not None
    print(
        workers_message(args.llm, fake=fake, workers=args.workers, port=port),
        file=sys.stderr,
        flush=True,
    )
    try:
        command = worker_command(args, port, store_dir / "sessions.sqlite3")
        async with anyio.create_task_group() as group:
            group.start_soon(_forward_signals, workers, args.shutdown_grace)
            group.start_soon(_enforce_grace, workers, args.shutdown_grace)
            group.start_soon(_announce, workers, reserved)
            async with anyio.create_task_group() as slots:
                for slot in workers.slots:
                    slots.start_soon(_run_slot, slot, command, workers)
            group.cancel_scope.cancel()
    finally:
        reserved.close()
        with anyio.CancelScope(shield=True):
            await _stop(workers, args.shutdown_grace)
        shutil.rmtree(store_dir, ignore_errors=True)
    if workers.now:
        return _INTERRUPTED  # stopped at once, as a single process would report it
    problems = [f"worker {p.pid} exited with status {p.returncode}" for p in workers.unclean()]
    given_up = sum(slot.given_up for slot in workers.slots)
    if given_up:
        problems.insert(0, f"{given_up} of {len(workers.slots)} workers were given up")
    why = f" ({'; '.join(problems)}: status 1)" if problems else ""
    print(f"llmrtc serve: stopped{why}", file=sys.stderr, flush=True)
    return 1 if problems else 0


async def _announce(workers: _Workers, reserved: socket.socket) -> None:
    await workers.all_listening.wait()
    reserved.close()  # every worker holds the port now
    print(f"{LISTENING}{workers.url} (open it in Chromium)", flush=True)


async def _run_slot(slot: _Slot, command: list[str], workers: _Workers) -> None:
    """Run one worker until the server stops, starting it again when it exits before that
    (bounded: see the module docstring)."""
    quick = 0
    while not workers.stopping:
        process = await anyio.open_process(
            command, stdin=-1, stdout=-1, stderr=None, start_new_session=True
        )
        slot.process = process
        if workers.stopping:  # a signal came while it started: signal_all did not see it
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        listened_at = await _follow(process, slot, workers)
        code = process.returncode
        if workers.stopping:
            return
        steady = listened_at is not None and time.monotonic() - listened_at >= _STEADY
        quick = 0 if steady else quick + 1
        exited = _how_it_exited(process.pid, code)
        if code == WORKER_SETUP_FAILED:
            _give_up(slot, workers, f"error: {exited}: it could not start (its error is above)")
            return
        if quick >= _QUICK_FAILURES:
            _give_up(
                slot,
                workers,
                f"error: {exited}, the {quick}th time in a row within {_STEADY:g} s of its "
                "start: it is crash-looping (see its errors above)",
            )
            return
        print(
            f"llmrtc serve: {exited}; starting it again (the session store is kept: vanished "
            "sessions stay resumable)",
            file=sys.stderr,
            flush=True,
        )
        if process.stdin is not None:
            await process.stdin.aclose()
        await anyio.sleep(_RESTART_DELAYS[min(quick, len(_RESTART_DELAYS)) - 1] if quick else 0)


def _how_it_exited(pid: int, code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"worker {pid} was killed by {signal.Signals(-code).name}"
    return f"worker {pid} exited with status {code}"


def _give_up(slot: _Slot, workers: _Workers, why: str) -> None:
    """Start this slot no more; the server goes on with the others, or ends without any."""
    slot.given_up = True
    left = len(workers.serving)
    if left:
        listening = sum(slot.listening for slot in workers.serving)
        # Some still starting may well fail the same way: do not promise that they serve.
        starting = left - listening
        doing = f"left ({starting} still starting)" if starting else "serve on"
        why += f"; not starting it again, {left} of {len(workers.slots)} workers {doing}"
    else:
        why += "; not starting it again, and no worker is left: stopping"
        workers.stopping = True
        workers.signal_all(signal.SIGTERM)
    print(why, file=sys.stderr, flush=True)
    workers.check_listening()


async def _follow(process: anyio.abc.Process, slot: _Slot, workers: _Workers) -> float | None:
    """Read a worker's stdout until it exits: its `listening` line, then anything else it
    prints (passed on). Returns when it started listening (`time.monotonic()`), or None."""
    assert process.stdout is not None
    buffer = ""
    listened_at: float | None = None
    async for text in TextReceiveStream(process.stdout):
        buffer += text
        *lines, buffer = buffer.split("\n")
        for line in lines:
            if line.startswith(LISTENING):
                listened_at = time.monotonic()
                workers.url = line[len(LISTENING) :].split(" ", 1)[0]
                slot.listening = True
                if workers.all_listening.is_set():  # a restarted worker: the URL is out
                    print(
                        f"llmrtc serve: worker {process.pid} listening",
                        file=sys.stderr,
                        flush=True,
                    )
                workers.check_listening()
            else:
                print(line, flush=True)
    await process.wait()
    slot.listening = False
    return listened_at


async def _forward_signals(workers: _Workers, grace: float) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            if workers.stop_requested.is_set():
                # As in one process: after the first signal, a Ctrl-C stops everything now.
                if signum == signal.SIGINT and not workers.now:
                    workers.now = True
                    print("llmrtc serve: stopping now", file=sys.stderr, flush=True)
                    workers.signal_all(signal.SIGINT)
                continue
            workers.stopping = True
            workers.stop_requested.set()
            hint = " (Ctrl-C again to stop now)" if signum == signal.SIGINT else ""
            print(
                f"llmrtc serve: shutting down {len(workers.serving)} workers; live sessions "
                f"get up to {grace:g} s to end{hint}",
                file=sys.stderr,
                flush=True,
            )
            workers.signal_all(signum)


async def _enforce_grace(workers: _Workers, grace: float) -> None:
    """Kill the workers still running `_STOP_TIMEOUT` seconds past the grace (each has its own
    backstop a little earlier; this one holds even for a worker that hangs harder)."""
    await workers.stop_requested.wait()
    await anyio.sleep(grace + _STOP_TIMEOUT)
    for process in workers.processes:
        if process.returncode is None:
            print(
                f"error: worker {process.pid} still running {grace + _STOP_TIMEOUT:g} s after "
                "the signal: killing it",
                file=sys.stderr,
                flush=True,
            )
            with contextlib.suppress(ProcessLookupError):
                process.kill()


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
