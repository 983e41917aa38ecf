"""`llmrtc serve` staying up and going down as a user runs it (the real command in a subprocess,
with the hidden `--fake-engines`): a `--workers` server whose worker is killed or fails at
start keeps serving (the worker started again, the session store kept), a crash-looping worker
is given up after a few tries, SIGTERM ends the process within the grace plus a small margin
even when a tool ignores cancellation, and model loading shows its seconds instead of silence.
"""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc.cli.serve_process import BACKSTOP_MARGIN
from llmrtc.cli.terminal import ModelProgress
from llmrtc.testing import FakeTTS, RTCTestClient

from .test_serve import LISTENING, PID_TOOLS, ROOT, WEATHER, pid_turn, resume, serve, write_script

pytestmark = pytest.mark.anyio

WAIT = 60.0  # generous: restarting a worker imports aiortc again on a loaded 2-core machine

# A tools file that fails in worker processes (the supervisor loads it too, without
# --worker-store): the first worker to load it raises what two workers opening a new store at
# once used to raise, every later one loads fine.
FAILS_ONCE_TOOLS = (
    PID_TOOLS
    + """
import sqlite3, sys
if "--worker-store" in sys.argv:
    try:
        os.close(os.open(os.environ["SERVE_TEST_MARK"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        pass
    else:
        raise sqlite3.OperationalError("database is locked")
"""
)

# The first worker to load it lives; every other one dies at once (a crash loop).
ONE_HEALTHY_TOOLS = (
    PID_TOOLS
    + """
import signal, sys
if "--worker-store" in sys.argv:
    with open(os.environ["SERVE_TEST_STARTS"], "a") as out:
        out.write(f"{os.getpid()}\\n")
    try:
        os.close(os.open(os.environ["SERVE_TEST_MARK"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        os.kill(os.getpid(), signal.SIGKILL)
"""
)

STUBBORN_TOOLS = '''
import anyio
from llmrtc import tool

@tool(on_interrupt="finish", timeout=600)
async def settle_payment() -> dict:
    """A payment that must not be cut (and ignores cancellation altogether)."""
    with anyio.CancelScope(shield=True):
        await anyio.sleep(600)
    return {"ok": True}
'''


def workers_of(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def store_of(worker: int) -> Path:
    """The `--worker-store` path on a worker's command line."""
    argv = Path(f"/proc/{worker}/cmdline").read_bytes().decode().split("\0")
    return Path(argv[argv.index("--worker-store") + 1])


def stored(store: Path, session_id: str) -> bool:
    with sqlite3.connect(store) as db:
        rows = db.execute("SELECT 1 FROM sessions WHERE session_id = ?", (session_id,)).fetchall()
    return bool(rows)


async def until(condition: object, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.1)


async def test_a_killed_worker_is_started_again_and_saved_sessions_resume(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(PID_TOOLS)
    script = write_script(tmp_path / "s.json", [[{"call_id": "c1", "name": "whoami"}], "Ok."] * 20)
    pids = tmp_path / "pids"
    env = {"SERVE_TEST_PIDS": str(pids)}
    args = [str(tools), "--port", "0", "--workers", "2", "--fake-engines", script]
    async with serve(*args, env=env) as run:
        assert run.url is not None
        before = workers_of(run.process.pid)
        assert len(before) == 2
        store = store_of(before[0])
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            served_by = int(await pid_turn(client, pids, 0))
            await client.drop()
            session = (client.session_id, client.resume_token)
        assert session[0] is not None and session[1] is not None
        await until(lambda: stored(store, session[0]), "the vanished session to be saved")
        os.kill(served_by, signal.SIGKILL)  # the worker that served (and saved) the session
        await run.wait_stderr(f"worker {served_by} was killed by SIGKILL; starting it again")
        await run.wait_stderr("listening", timeout=WAIT)
        await until(lambda: len(workers_of(run.process.pid)) == 2, "a second worker again")
        after = workers_of(run.process.pid)
        assert served_by not in after and set(before) - {served_by} <= set(after)
        assert run.process.returncode is None and store.is_file()
        assert run.stdout == [f"{LISTENING}{run.url} (open it in Chromium)"]  # still one line
        async with AsyncExitStack() as stack:
            again = await resume(stack, run.url, (session[0], session[1]))
            assert again.resumed
            assert int(await pid_turn(again, pids, 1)) in after
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0
        assert "Traceback" not in run.stderr


async def test_a_worker_that_fails_at_start_is_started_again(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(FAILS_ONCE_TOOLS)
    script = write_script(tmp_path / "s.json", [[{"call_id": "c1", "name": "whoami"}], "Ok."])
    env = {"SERVE_TEST_PIDS": str(tmp_path / "pids"), "SERVE_TEST_MARK": str(tmp_path / "mark")}
    args = [str(tools), "--port", "0", "--workers", "2", "--fake-engines", script]
    async with serve(*args, env=env) as run:  # the URL line comes: the server is up
        assert run.url is not None
        assert "database is locked" in run.stderr
        assert "exited with status 1; starting it again" in run.stderr
        assert len(workers_of(run.process.pid)) == 2
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await pid_turn(client, tmp_path / "pids", 0)
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0


async def test_a_crash_looping_worker_is_given_up_and_the_others_serve_on(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(ONE_HEALTHY_TOOLS)
    starts = tmp_path / "starts"
    env = {
        "SERVE_TEST_PIDS": str(tmp_path / "pids"),
        "SERVE_TEST_MARK": str(tmp_path / "mark"),
        "SERVE_TEST_STARTS": str(starts),
    }
    args = [str(tools), "--port", "0", "--workers", "2", "--fake-engines"]
    async with serve(*args, env=env) as run:
        assert run.url is not None
        assert "it is crash-looping" in run.stderr
        assert "not starting it again, 1 of 2 workers serve on" in run.stderr
        assert len(starts.read_text().split()) == 4  # the healthy one, then 3 tries: bounded
        assert len(workers_of(run.process.pid)) == 1
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await client.send_text("Hi")
            await client.wait_for("turn_completed", timeout=20)
        await anyio.sleep(1.0)
        assert len(starts.read_text().split()) == 4  # and no more tries later
        run.signal(signal.SIGTERM)
        assert await run.wait() == 1  # it served, but not with every worker: say so


async def test_sigterm_ends_the_process_within_the_grace_when_a_tool_ignores_it(
    tmp_path: Path,
) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(STUBBORN_TOOLS)
    script = write_script(tmp_path / "s.json", [[{"call_id": "c1", "name": "settle_payment"}]])
    grace = 1.0
    args = [str(tools), "--port", "0", "--shutdown-grace", f"{grace:g}", "--fake-engines", script]
    async with serve(*args) as run:
        assert run.url is not None
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await client.send_text("Pay my bill")
            await client.wait_for("tool_call_started", timeout=20)
            run.signal(signal.SIGTERM)
            started = time.monotonic()
            # Far less than the tool's 600 s (and the executor's own timeouts); the bound
            # leaves room for a loaded machine.
            code = await run.wait(timeout=grace + BACKSTOP_MARGIN + 20)
            took = time.monotonic() - started
            await client.drop()
    assert code in (0, 1)
    if code == 1:  # the server could not stop the tool: the backstop said what still ran
        assert "still not stopped" in run.stderr, run.stderr
        # The stuck tool is named first; the event loop's internals are not listed.
        assert "still running: tool calls: settle_payment;" in run.stderr, run.stderr
        assert "RTCRtpSender" not in run.stderr and "TaskHandle" not in run.stderr
        assert "llmrtc serve: stopped" not in run.stderr  # it did not stop: it was ended
        assert took >= grace + BACKSTOP_MARGIN - 0.5  # not before the grace and margin


SYNC_STUBBORN_TOOLS = """
import time
from llmrtc import tool

@tool(on_interrupt="finish", timeout=600)
def settle_sync() -> dict:
    \"\"\"A blocking payment in a thread, which nothing can cancel.\"\"\"
    time.sleep(600)
    return {"ok": True}
"""


async def test_stopped_is_said_only_once_a_thread_running_a_tool_is_done(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(SYNC_STUBBORN_TOOLS)
    script = write_script(tmp_path / "s.json", [[{"call_id": "c1", "name": "settle_sync"}]])
    args = [str(tools), "--port", "0", "--shutdown-grace", "1", "--fake-engines", script]
    async with serve(*args) as run:
        assert run.url is not None
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await client.send_text("Pay my bill")
            await client.wait_for("tool_call_started", timeout=20)
            run.signal(signal.SIGTERM)
            code = await run.wait(timeout=1 + BACKSTOP_MARGIN + 20)
            await client.drop()
    # The thread keeps the process alive past the session's end (the call itself was given
    # its result): not "stopped", but ended by the backstop, which names the tool's thread.
    assert code == 1, run.stderr
    assert "llmrtc serve: stopped" not in run.stderr, run.stderr
    assert "still not stopped" in run.stderr and "in settle_sync (" in run.stderr


async def test_a_stage_without_progress_keeps_showing_its_seconds() -> None:
    plain = io.StringIO()
    progress = ModelProgress(plain, line_every=0.2)
    async with anyio.create_task_group() as group:
        group.start_soon(progress.animate, 0.05)
        progress("loading model", None)
        await anyio.sleep(0.7)
        progress.done()
    lines = plain.getvalue().splitlines()
    assert lines[0] == "llmrtc: loading model..."
    assert len(lines) >= 3 and all(
        line.startswith("llmrtc: still loading model (") for line in lines[1:]
    )
    ended = len(lines)
    await anyio.sleep(0.3)
    assert len(plain.getvalue().splitlines()) == ended  # nothing after done()


async def test_the_opening_line_says_how_long_the_offline_start_takes(tmp_path: Path) -> None:
    env = {"LLMRTC_CACHE_DIR": str(tmp_path), "OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}
    # An empty cache: the first start (stopped before it gets far: no model is loaded here).
    async with serve(WEATHER, "--port", "0", "--llm", "offline", env=env, wait=False) as run:
        await run.wait_stderr("llmrtc serve: opening the model and the speech engines")
        run.process.kill()
    assert "the first start takes about" in run.stderr
    assert "joining the model from its packages" in run.stderr


async def test_a_stage_that_blocks_the_loop_says_what_to_expect_then_how_long_it_took() -> None:
    plain = io.StringIO()
    progress = ModelProgress(plain, line_every=0.1, blocking={"loading model": 5})
    async with anyio.create_task_group() as group:
        group.start_soon(progress.animate, 0.05)
        progress("loading model", None)
        await anyio.sleep(0.3)  # the loop runs: a live counter would tick here...
        time.sleep(1.2)  # ...and freeze here (llama.cpp holding the GIL)
        progress("warming up", None)
        await anyio.sleep(0.5)
        progress.done()
    lines = plain.getvalue().splitlines()
    assert lines[0] == "llmrtc: loading model (about 5 s)..."
    assert not any("still loading model" in line for line in lines), lines  # no counter
    took = lines.index("llmrtc: warming up...") - 1
    assert lines[took].startswith("llmrtc: loading model took ") and took == 1, lines
    assert int(lines[took].split()[-2]) >= 1  # the time it took, frozen part included
    assert any(line.startswith("llmrtc: still warming up (") for line in lines)  # live again


async def test_a_second_workers_server_on_a_used_port_is_refused(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(PID_TOOLS)
    env = {"SERVE_TEST_PIDS": str(tmp_path / "pids")}
    common = [str(tools), "--workers", "2", "--fake-engines"]
    async with serve(*common, "--port", "0", env=env) as first:
        assert first.url is not None
        port = first.url.rsplit(":", 1)[1].strip("/")
        async with serve(*common, "--port", port, env=env, wait=False) as second:
            code = await second.wait(timeout=WAIT)
        assert code == 1 and second.url is None
        assert f"error: cannot listen on 127.0.0.1:{port}" in second.stderr, second.stderr
        assert "already listening there" in second.stderr
        assert first.process.returncode is None
        first.signal(signal.SIGTERM)
        assert await first.wait() == 0


async def test_a_worker_whose_supervisor_is_gone_stops_quietly(tmp_path: Path) -> None:
    """The supervisor died before the worker listened: its stdout pipe is broken. The worker
    stops (status 0, 'stopped'), saying nothing about a port it could listen on."""
    tools = tmp_path / "tools.py"
    tools.write_text(PID_TOOLS)
    command = [sys.executable, "-m", "llmrtc.cli", "serve", str(tools), "--port", "0"]
    command += ["--fake-engines", "--worker-store", str(tmp_path / "store.sqlite3")]
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read the URL line
    try:
        process = await anyio.open_process(
            command, stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.PIPE, cwd=ROOT
        )
    finally:
        os.close(write_end)
    async with process:
        with anyio.fail_after(WAIT):
            code = await process.wait()
        assert process.stderr is not None
        stderr = (await process.stderr.receive(1 << 20)).decode()
    assert code == 0, stderr
    assert "cannot listen" not in stderr and "Broken pipe" not in stderr, stderr
    assert f"[worker {process.pid}] llmrtc serve: stopped" in stderr, stderr
