"""`llmrtc chat` as a user meets it: a real process, the real openai client against a scripted
server, Ctrl-C, failures that end only a turn, and nothing but the conversation on stdout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from anyio.abc import ByteReceiveStream, Process

from llmrtc.testing import (
    ErrorReply,
    ScriptedOpenAIServer,
    StreamReply,
    text_reply,
    tool_call_reply,
)

ROOT = Path(__file__).resolve().parents[2]
WEATHER_TOOLS = ROOT / "demos" / "text_agent.py"
WEATHER_PLAYBOOK = ROOT / "playbooks" / "weather.yaml"
CHAT = [sys.executable, "-m", "llmrtc.cli", "chat"]


def _env(server: ScriptedOpenAIServer, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }


async def _chat(
    server: ScriptedOpenAIServer, tmp_path: Path, stdin: str, *extra: str
) -> subprocess.CompletedProcess[bytes]:
    return await anyio.run_process(
        [*CHAT, *extra], input=stdin.encode(), env=_env(server, tmp_path), check=False
    )


async def _open_chat(server: ScriptedOpenAIServer, tmp_path: Path) -> Process:
    # Opened inside the server's block: its address is known only once it listens.
    return await anyio.open_process(CHAT, env=_env(server, tmp_path), stderr=subprocess.PIPE)


class _Reader:
    """Collects a stream's bytes so a test can wait for a piece of text to appear."""

    def __init__(self, stream: ByteReceiveStream) -> None:
        self.stream = stream
        self.text = ""

    async def until(self, needle: str, *, start: int = 0) -> None:
        with anyio.fail_after(60):
            while needle not in self.text[start:]:
                self.text += (await self.stream.receive()).decode()

    async def rest(self) -> str:
        with anyio.fail_after(60):
            try:
                while True:
                    self.text += (await self.stream.receive()).decode()
            except anyio.EndOfStream:
                return self.text


async def _send(process: Process, line: str) -> None:
    assert process.stdin is not None
    await process.stdin.send(line.encode())


def _slow_reply(words: Sequence[str]) -> StreamReply:
    reply = text_reply(" ".join(words), pieces=len(words))
    reply.delay = 0.3
    return reply


@pytest.mark.anyio
async def test_ctrl_c_stops_the_answer_and_the_next_question_is_answered(tmp_path: Path) -> None:
    slow = _slow_reply([f"word{i}" for i in range(60)])
    async with (
        ScriptedOpenAIServer([slow, text_reply("Second answer.")]) as server,
        await _open_chat(server, tmp_path) as process,
    ):
        assert process.stdout is not None and process.stderr is not None
        out = _Reader(process.stdout)
        await _send(process, "Tell me a long story\n")
        await out.until("word2")
        process.send_signal(signal.SIGINT)
        await out.until("[stopped]")
        await _send(process, "And now?\n")
        await out.until("Second answer.")
        assert process.stdin is not None
        await process.stdin.aclose()
        text = await out.rest()
        err = await _Reader(process.stderr).rest()
        assert await process.wait() == 0, err
    assert "word59" not in text  # the first answer really stopped
    assert "Traceback" not in err
    second = server.requests[1].body["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"].startswith("word0")  # the heard part of the answer is kept


@pytest.mark.anyio
async def test_ctrl_c_at_the_prompt_quits_with_a_newline(tmp_path: Path) -> None:
    async with (
        ScriptedOpenAIServer([text_reply("Hello there.")]) as server,
        await _open_chat(server, tmp_path) as process,
    ):
        assert process.stdout is not None and process.stderr is not None
        out = _Reader(process.stdout)
        await _send(process, "Hi\n")
        await out.until("Hello there.\n")
        process.send_signal(signal.SIGINT)
        text = await out.rest()
        err = await _Reader(process.stderr).rest()
        assert await process.wait() == 0, err
    assert text.endswith("Hello there.\n\n")
    assert "Traceback" not in err


@pytest.mark.anyio
async def test_a_model_failure_ends_only_that_turn(tmp_path: Path) -> None:
    replies = [ErrorReply(400, "the model produced output that does not match"), text_reply("Ok!")]
    async with ScriptedOpenAIServer(replies) as server:
        result = await _chat(server, tmp_path, "first\nsecond\n")
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, err
    assert "Traceback" not in err
    error_lines = [line for line in err.splitlines() if "[error:" in line]
    assert len(error_lines) == 1
    assert "does not match" in error_lines[0]
    assert "Ok!" in out


@pytest.mark.anyio
async def test_an_unreachable_api_is_one_line_naming_the_url_before_the_first_prompt() -> None:
    env = {**os.environ, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"}
    result = await anyio.run_process([*CHAT], input=b"Hi\n", env=env, check=False)
    err = result.stderr.decode()
    assert result.returncode == 1
    assert err.count("\n") == 1
    assert "http://127.0.0.1:9/v1" in err
    assert "OPENAI_BASE_URL" in err  # what to do about it


@pytest.mark.anyio
async def test_tool_lines_and_stage_changes_leave_no_empty_bot_line(tmp_path: Path) -> None:
    replies = [
        tool_call_reply([("c1", "lookupWeather", '{"city": "Oslo"}')]),
        text_reply("It is 4 degrees and rainy in Oslo."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        result = await _chat(server, tmp_path, "Weather in Oslo?\n", "--tools", str(WEATHER_TOOLS))
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert out.splitlines() == [
        '  -> lookupWeather({"city": "Oslo"})',
        out.splitlines()[1],
        "bot> It is 4 degrees and rainy in Oslo.",
    ]
    assert out.splitlines()[1].startswith("  <- lookupWeather ok ")


@pytest.mark.anyio
async def test_a_terminal_stage_says_the_conversation_ended_and_quits(tmp_path: Path) -> None:
    async with ScriptedOpenAIServer([text_reply("Goodbye, stay dry!")]) as server:
        result = await _chat(
            server, tmp_path, "Thanks, bye\nAre you still there?\n", str(WEATHER_PLAYBOOK)
        )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "[stage chat -> goodbye (caller-done)]" in out
    assert out.rstrip().endswith("[the conversation has ended]")
    assert len(server.requests) == 1  # the second line was not answered


@pytest.mark.anyio
async def test_library_warnings_go_to_the_log_file_not_the_conversation(tmp_path: Path) -> None:
    tools = tmp_path / "noisy_tools.py"
    tools.write_text(
        "import logging, warnings\n"
        "from llmrtc import tool\n"
        "warnings.warn('an old option', UserWarning, stacklevel=1)\n"
        "@tool\n"
        "def ping() -> str:\n"
        "    '''Answer pong.'''\n"
        "    logging.getLogger('llmrtc.tools.noise').warning('a library warning')\n"
        "    return 'pong'\n"
    )
    replies = [tool_call_reply([("c1", "ping", "{}")]), text_reply("pong!")]
    async with ScriptedOpenAIServer(replies) as server:
        result = await _chat(server, tmp_path, "ping\n", "--tools", str(tools))
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, err
    assert "a library warning" not in out + err
    assert "an old option" not in out + err
    log = (tmp_path / "cache" / "llmrtc" / "llmrtc.log").read_text()
    assert "a library warning" in log
    assert "an old option" in log
    replies = [tool_call_reply([("c1", "ping", "{}")]), text_reply("pong!")]
    async with ScriptedOpenAIServer(replies) as server:
        verbose = await _chat(server, tmp_path, "ping\n", "--tools", str(tools), "--verbose")
    assert "a library warning" in verbose.stderr.decode()
    assert "a library warning" not in verbose.stdout.decode()


BOOKING_TOOLS = '''
import anyio
from llmrtc import ToolContext, tool


@tool(background=True, timeout=30.0)
async def bookTable(restaurant: str, ctx: ToolContext) -> dict:
    """Book a table (takes a while).

    Args:
        restaurant: Where.
    """
    await anyio.sleep(1.0)
    return {"confirmed": True, "reference": "A12"}
'''


@pytest.mark.anyio
async def test_a_background_result_is_told_while_the_chat_waits_for_a_line(
    tmp_path: Path,
) -> None:
    tools = tmp_path / "booking.py"
    tools.write_text(BOOKING_TOOLS)
    replies = [
        tool_call_reply([("call_1", "bookTable", '{"restaurant": "Nopa"}')]),
        text_reply("I'm booking Nopa now."),
        text_reply("Your table at Nopa is booked, reference A12."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        env = _env(server, tmp_path)
        async with await anyio.open_process(
            [*CHAT, "--tools", str(tools)], env=env, stderr=subprocess.PIPE
        ) as process:
            assert process.stdout is not None and process.stderr is not None
            out = _Reader(process.stdout)
            await _send(process, "Book me a table at Nopa\n")
            await out.until("I'm booking Nopa now.")
            # No line typed: the booking lands and the agent says so by itself.
            await out.until("reference A12")
            assert process.stdin is not None
            await process.stdin.aclose()
            err = await _Reader(process.stderr).rest()
            await out.rest()
            assert await process.wait() == 0, err
    assert server.refused == [] and len(server.requests) == 3
    last = server.requests[2].body["messages"]
    assert last[-1]["role"] == "system" and "A12" in last[-1]["content"]
