"""`llmrtc serve` as a user runs it: the real command in a subprocess (`python -m llmrtc.cli
serve`), with the hidden `--fake-engines` (ScriptedLLM + FakeVAD/FakeSTT/FakeTTS) so it starts
at once. Checked: the one URL line, the page, a session over real WebRTC (RTCTestClient), the
options (limits, timeouts, log level, --llm openai against a scripted OpenAI server, --otel),
SIGTERM and SIGINT, and `--workers 2` answering on one port from two processes that share
resumable sessions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.abc
import pytest

from tests._requirements import require

require("rtc")

from llmrtc.rtc.errors import RTCError
from llmrtc.testing import FakeTTS, RTCTestClient, ScriptedOpenAIServer, text_reply

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
WEATHER = str(ROOT / "playbooks" / "weather.yaml")
LISTENING = "llmrtc serve: listening on "
START_TIMEOUT = 60.0  # generous: a loaded 2-core machine may be slow to import aiortc
EXIT_TIMEOUT = 30.0
TURN_TIMEOUT = 20.0

PID_TOOLS = '''
import os
from llmrtc import tool

@tool
def whoami() -> dict:
    """Which process answers."""
    with open(os.environ["SERVE_TEST_PIDS"], "a") as out:
        out.write(f"{os.getpid()}\\n")
    return {"ok": True}
'''


class Serve:
    """A running `llmrtc serve` subprocess and what it printed."""

    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.stdout: list[str] = []
        self.stderr = ""
        self.url: str | None = None
        self.listening = anyio.Event()
        self.exited = anyio.Event()

    async def read_stdout(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            *lines, rest = buffer.split(b"\n")
            buffer = rest
            for line in lines:
                text = line.decode()
                self.stdout.append(text)
                if text.startswith(LISTENING):
                    self.url = text[len(LISTENING) :].split(" ")[0]
                    self.listening.set()
        self.exited.set()

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        async for chunk in self.process.stderr:
            self.stderr += chunk.decode(errors="replace")

    def signal(self, signum: int) -> None:
        self.process.send_signal(signal.Signals(signum))

    async def wait(self, timeout: float = EXIT_TIMEOUT) -> int:
        with anyio.fail_after(timeout):
            code = await self.process.wait()
            await self.exited.wait()
        return code

    async def wait_stderr(self, text: str, timeout: float = TURN_TIMEOUT) -> None:
        with anyio.fail_after(timeout):
            while text not in self.stderr:
                await anyio.sleep(0.05)


def write_script(path: Path, entries: list[Any]) -> str:
    path.write_text(json.dumps(entries))
    return str(path)


def weather_script(tmp_path: Path, turns: int = 1) -> str:
    call = {"call_id": "c1", "name": "lookupWeather", "arguments": {"city": "Tokyo"}}
    return write_script(tmp_path / "script.json", [[call], "Sunny in Tokyo."] * turns)


@asynccontextmanager
async def serve(
    *args: str, env: dict[str, str] | None = None, wait: bool = True
) -> AsyncIterator[Serve]:
    """Start `llmrtc serve ARGS` and (with `wait`) wait for its URL line; killed if still
    running at the end (the test's own process, by its handle)."""
    command = [sys.executable, "-m", "llmrtc.cli", "serve", *args]
    environment = {**os.environ, **(env or {})}
    process = await anyio.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, cwd=ROOT
    )
    running = Serve(process)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(running.read_stdout)
            group.start_soon(running.read_stderr)
            if wait:
                with anyio.fail_after(START_TIMEOUT):
                    await _first(running.listening.wait, running.exited.wait)
                assert running.url is not None, f"no URL line; stderr:\n{running.stderr}"
            yield running
            if process.returncode is None:
                process.kill()
            await process.wait()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()  # its pipes and transport too, while the loop still runs


async def _first(*waits: Any) -> None:
    async with anyio.create_task_group() as group:

        async def run(wait: Any) -> None:
            await wait()
            group.cancel_scope.cancel()

        for wait in waits:
            group.start_soon(run, wait)


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


async def weather_turn(client: RTCTestClient) -> dict[str, Any]:
    await client.send_text("What is the weather in Tokyo?")
    finished = await client.wait_for("tool_call_finished", timeout=TURN_TIMEOUT)
    assert finished["name"] == "lookupWeather" and finished["status"] == "ok"
    return await client.wait_for("turn_completed", timeout=TURN_TIMEOUT)


# One process ---------------------------------------------------------------------------------


async def test_serve_prints_one_url_line_serves_the_page_and_a_session(tmp_path: Path) -> None:
    async with serve(WEATHER, "--port", "0", "--fake-engines", weather_script(tmp_path)) as run:
        assert run.url is not None and run.url.startswith("http://127.0.0.1:")
        assert run.stdout == [f"{LISTENING}{run.url} (open it in Chromium)"]
        assert "opening the fake engines" in run.stderr  # progress before the line
        status, page = await anyio.to_thread.run_sync(get, run.url)
        assert status == 200 and "<html" in page.lower()
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            completed = await weather_turn(client)
            assert completed["text"] == "Sunny in Tokyo."
            stage = [e for e in client.events if e["type"] == "tool_call_started"]
            assert [e["name"] for e in stage] == ["lookupWeather"]
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0
        assert run.stdout == [f"{LISTENING}{run.url} (open it in Chromium)"]  # still one line
        assert "Traceback" not in run.stderr


async def test_host_is_where_it_listens(tmp_path: Path) -> None:
    script = weather_script(tmp_path)
    async with serve(
        WEATHER, "--host", "localhost", "--port", "0", "--fake-engines", script
    ) as run:
        assert run.url is not None and run.url.startswith("http://localhost:")
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await weather_turn(client)
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0


async def test_sigterm_refuses_new_sessions_and_lets_a_live_one_end(tmp_path: Path) -> None:
    script = weather_script(tmp_path, turns=2)
    async with serve(
        WEATHER, "--port", "0", "--shutdown-grace", "3", "--fake-engines", script
    ) as run:
        assert run.url is not None
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await weather_turn(client)
            run.signal(signal.SIGTERM)
            await run.wait_stderr("shutting down; 1 live session(s) get up to 3 s")
            with pytest.raises(RTCError) as refused:
                async with RTCTestClient(run.url, tts=FakeTTS(), timeout=10):
                    pass
            assert refused.value.code == "shutting_down"
            await weather_turn(client)  # the live session still works within the grace
            error = await client.wait_for("error", timeout=TURN_TIMEOUT)
            assert error["code"] == "shutting_down"  # the grace ran out: the server closed it
            assert await run.wait() == 0


async def test_sigint_twice_exits_at_once_with_a_live_session(tmp_path: Path) -> None:
    script = weather_script(tmp_path)
    async with serve(
        WEATHER, "--port", "0", "--shutdown-grace", "60", "--fake-engines", script
    ) as run:
        assert run.url is not None
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await weather_turn(client)
            run.signal(signal.SIGINT)
            await run.wait_stderr("Ctrl-C again to stop now")
            run.signal(signal.SIGINT)
            assert await run.wait(timeout=15) == 130  # not the 60 s grace
            await client.drop()


async def test_sigint_alone_is_a_graceful_stop() -> None:
    async with serve(WEATHER, "--port", "0", "--fake-engines") as run:
        run.signal(signal.SIGINT)
        assert await run.wait() == 0
        assert "llmrtc serve: stopped" in run.stderr


async def test_max_sessions_idle_timeout_and_resume_ttl_reach_the_server(tmp_path: Path) -> None:
    options = ["--max-sessions", "1", "--idle-timeout", "3", "--resume-ttl", "1"]
    async with serve(WEATHER, "--port", "0", *options, "--fake-engines") as run:
        assert run.url is not None
        async with RTCTestClient(run.url, tts=FakeTTS()) as first:
            with pytest.raises(RTCError) as full:
                async with RTCTestClient(run.url, tts=FakeTTS(), timeout=10):
                    pass
            assert full.value.code == "server_full"
            error = await first.wait_for("error", timeout=TURN_TIMEOUT)
            assert error["code"] == "idle_timeout"
            session = (first.session_id, first.resume_token)
        await anyio.sleep(2.0)  # past --resume-ttl 1
        assert session[0] is not None and session[1] is not None
        with pytest.raises(RTCError) as refused:
            async with RTCTestClient(run.url, tts=FakeTTS(), resume=(session[0], session[1])):
                pass
        assert refused.value.code == "resume_refused"
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0


async def test_a_tools_file_target_and_the_log_level(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(PID_TOOLS)
    script = write_script(tmp_path / "s.json", [[{"call_id": "c1", "name": "whoami"}], "Done."])
    env = {"SERVE_TEST_PIDS": str(tmp_path / "pids")}
    args = [str(tools), "--port", "0", "--log-level", "info", "--fake-engines", script]
    async with serve(*args, env=env) as run:
        assert run.url is not None
        assert "INFO llmrtc.rtc.server: RTCServer listening" in run.stderr
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await client.send_text("who are you?")
            finished = await client.wait_for("tool_call_finished", timeout=TURN_TIMEOUT)
            assert finished["name"] == "whoami" and finished["status"] == "ok"
        assert (tmp_path / "pids").read_text().split() == [str(run.process.pid)]
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0
    async with serve(str(tools), "--port", "0", "--fake-engines", env=env) as quiet:
        assert "INFO" not in quiet.stderr  # the default level is warning
        quiet.signal(signal.SIGTERM)
        assert await quiet.wait() == 0


async def test_llm_openai_talks_to_the_configured_server(tmp_path: Path) -> None:
    async with ScriptedOpenAIServer([text_reply("Hello from the API.")]) as api:
        env = {"OPENAI_BASE_URL": api.base_url, "OPENAI_API_KEY": "test-key"}
        async with serve(
            WEATHER, "--port", "0", "--llm", "openai", "--fake-engines", env=env
        ) as run:
            assert run.url is not None
            async with RTCTestClient(run.url, tts=FakeTTS()) as client:
                await client.send_text("Hi")
                completed = await client.wait_for("turn_completed", timeout=TURN_TIMEOUT)
                assert completed["text"] == "Hello from the API."
            run.signal(signal.SIGTERM)
            assert await run.wait() == 0
        assert api.requests[0].body["messages"][-1] == {"role": "user", "content": "Hi"}


async def test_llm_openai_without_a_key_or_server_is_an_error() -> None:
    env = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}
    async with serve(WEATHER, "--port", "0", "--llm", "openai", env=env, wait=False) as run:
        assert await run.wait() == 1
        assert "--llm openai needs OPENAI_API_KEY" in run.stderr
        assert run.stdout == [] and "Traceback" not in run.stderr


async def test_bad_targets_and_a_taken_port_fail_with_one_message(tmp_path: Path) -> None:
    async with serve(str(tmp_path / "missing.yaml"), "--fake-engines", wait=False) as run:
        assert await run.wait() == 1
        assert "missing.yaml" in run.stderr and "Traceback" not in run.stderr
    async with serve(WEATHER, "--port", "0", "--fake-engines") as first:
        assert first.url is not None
        port = first.url.rsplit(":", 1)[1].strip("/")
        async with serve(WEATHER, "--port", port, "--fake-engines", wait=False) as second:
            assert await second.wait() == 1
            assert f"cannot listen on 127.0.0.1:{port}" in second.stderr
        first.signal(signal.SIGTERM)
        assert await first.wait() == 0


async def test_otel_console_prints_spans_on_stderr(tmp_path: Path) -> None:
    args = [WEATHER, "--port", "0", "--otel", "console", "--fake-engines", weather_script(tmp_path)]
    async with serve(*args) as run:
        assert run.url is not None
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await weather_turn(client)
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0
    assert '"name": "execute_tool lookupWeather"' in run.stderr
    assert len(run.stdout) == 1  # spans never go to stdout, where the URL line is


class _Collector(BaseHTTPRequestHandler):
    paths: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.paths.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


async def test_otel_otlp_sends_spans_to_the_collector(tmp_path: Path) -> None:
    require("otlp")
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=collector.serve_forever, daemon=True)
    thread.start()
    try:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_port}",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        }
        args = [
            WEATHER,
            "--port",
            "0",
            "--otel",
            "otlp",
            "--fake-engines",
            weather_script(tmp_path),
        ]
        async with serve(*args, env=env) as run:
            assert run.url is not None
            async with RTCTestClient(run.url, tts=FakeTTS()) as client:
                await weather_turn(client)
            run.signal(signal.SIGTERM)
            assert await run.wait() == 0  # the exporters flush on the way out
    finally:
        collector.shutdown()
        collector.server_close()
        thread.join()
    traces = [body for path, body in _Collector.paths if path == "/v1/traces"]
    assert traces and any(b"execute_tool lookupWeather" in body for body in traces)


# Workers ---------------------------------------------------------------------------------------


async def pid_turn(client: RTCTestClient, pids: Path, seen: int) -> str:
    """A turn whose tool writes the answering worker's pid; returns that pid."""
    await client.send_text("who answers?")
    finished = await client.wait_for("tool_call_finished", timeout=TURN_TIMEOUT)
    assert finished["status"] == "ok"
    await client.wait_for("turn_completed", timeout=TURN_TIMEOUT)
    lines = pids.read_text().split()
    assert len(lines) == seen + 1
    return lines[-1]


async def resume(stack: AsyncExitStack, url: str, session: tuple[str, str]) -> RTCTestClient:
    """Resume `session`, retrying a refusal for a few seconds: a worker saves a vanished
    session once it has noticed the drop and stopped its turn, and a resume that reaches the
    other worker before that finds nothing yet (a reconnecting client retries likewise)."""
    for _ in range(25):
        try:
            client = RTCTestClient(url, tts=FakeTTS(), resume=session)
            return await stack.enter_async_context(client)
        except RTCError as error:
            if error.code != "resume_refused":
                raise
            await anyio.sleep(0.2)
    raise AssertionError(f"session {session[0]} was never resumable")


async def test_two_workers_answer_on_one_port_and_resume_each_others_sessions(
    tmp_path: Path,
) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(PID_TOOLS)
    call = [{"call_id": "c1", "name": "whoami"}]
    script = write_script(tmp_path / "s.json", [call, "Done."] * 40)
    pids = tmp_path / "pids"
    env = {"SERVE_TEST_PIDS": str(pids)}
    async with serve(
        str(tools), "--port", "0", "--workers", "2", "--fake-engines", script, env=env
    ) as run:
        assert run.url is not None
        assert run.stdout == [f"{LISTENING}{run.url} (open it in Chromium)"]
        status, _ = await anyio.to_thread.run_sync(get, run.url)
        assert status == 200
        # Sessions (new connections, new source ports) until both workers have answered.
        answered: list[str] = []
        while len(set(answered)) < 2 and len(answered) < 16:
            async with RTCTestClient(run.url, tts=FakeTTS()) as client:
                answered.append(await pid_turn(client, pids, len(answered)))
        workers = set(answered)
        assert len(workers) == 2 and str(run.process.pid) not in workers
        # A vanished session resumes on whichever worker the kernel picks: the store is shared.
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            first = await pid_turn(client, pids, len(answered))
            await client.drop()
            session = (client.session_id, client.resume_token)
        count = len(answered) + 1
        resumed_on: list[str] = []
        while len(resumed_on) < 12 and all(pid == first for pid in resumed_on):
            assert session[0] is not None and session[1] is not None
            async with AsyncExitStack() as stack:
                again = await resume(stack, run.url, (session[0], session[1]))
                assert again.resumed
                resumed_on.append(await pid_turn(again, pids, count))
                count += 1
                await again.drop()
                session = (again.session_id, again.resume_token)
        assert set(resumed_on) - {first}, "every resume landed on the first worker"
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0
    for pid in workers:  # no worker outlives the server
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)


async def test_workers_that_cannot_start_fail_the_command() -> None:
    env = {"OPENAI_API_KEY": "", "OPENAI_BASE_URL": ""}
    args = [WEATHER, "--port", "0", "--workers", "2", "--llm", "openai"]
    async with serve(*args, env=env, wait=False) as run:
        assert await run.wait() == 1
        assert "--llm openai needs OPENAI_API_KEY" in run.stderr
        assert run.stdout == []


async def test_sigint_reaches_the_workers_once_and_twice_stops_them_now(tmp_path: Path) -> None:
    script = weather_script(tmp_path)
    args = [WEATHER, "--port", "0", "--workers", "2", "--shutdown-grace", "60"]
    async with serve(*args, "--fake-engines", script) as run:
        assert run.url is not None
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await weather_turn(client)
            run.signal(signal.SIGINT)
            await run.wait_stderr("Ctrl-C again to stop now")  # the busy worker waits
            run.signal(signal.SIGINT)
            assert await run.wait(timeout=15) == 130  # not the 60 s grace
            await client.drop()


# Arguments -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--port", "70000"),
        ("--workers", "0"),
        ("--max-sessions", "none"),
        ("--idle-timeout", "-1"),
        ("--resume-ttl", "inf"),
        ("--shutdown-grace", "0"),
        ("--llm", "gpt"),
        ("--otel", "jaeger"),
        ("--log-level", "loud"),
    ],
)
def test_bad_option_values_are_usage_errors(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmrtc.cli import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", WEATHER, option, value])
    assert exited.value.code == 2
    assert option in capsys.readouterr().err


def test_help_lists_the_options_but_not_the_hidden_ones(capsys: pytest.CaptureFixture[str]) -> None:
    from llmrtc.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = capsys.readouterr().out
    for option in ("--host", "--port", "--workers", "--max-sessions", "--llm", "--otel"):
        assert option in shown
    assert "--fake-engines" not in shown and "--worker-store" not in shown


async def test_build_handler_gives_hooks_to_the_turns_model_and_tools() -> None:
    from llmrtc import ToolCall, ToolRegistry, tool
    from llmrtc.cli.bot import build_handler
    from llmrtc.playbook import Playbook
    from llmrtc.telemetry.hooks import Hooks
    from llmrtc.testing import ScriptedLLM

    @tool
    async def ping() -> str:
        """Answer pong."""
        return "pong"

    seen: list[str] = []

    class Recorder(Hooks):
        def on_turn_start(self, event: Any) -> None:
            seen.append("turn")

        def on_llm_start(self, event: Any) -> None:
            seen.append("llm")

        def on_tool_start(self, event: Any) -> None:
            seen.append("tool")

        def on_stage_enter(self, event: Any) -> None:
            seen.append("stage")

    registry = ToolRegistry()
    registry.register(ping)
    book = Playbook.model_validate(
        {"id": "p", "initial_stage": "a", "stages": [{"id": "a", "tools": ["ping"]}]}
    )
    for playbook in (None, book):
        seen.clear()
        llm = ScriptedLLM([[ToolCall("c1", "ping", {})], "pong it is."])
        handler = build_handler(llm, registry, playbook, hooks=Recorder())
        async for _ in handler.run_turn("ping"):
            pass
        assert {"turn", "llm", "tool"} <= set(seen), (playbook, seen)
        assert ("stage" in seen) is (playbook is not None)
