"""`llmrtc serve` with no live session ends within seconds of SIGTERM, with status 0 and
"stopped", even when a thread pool's idle worker is alive: the real command in a subprocess,
on the fake engines and on the real offline speech engines after a spoken turn (whose turn
detector keeps such a worker). It used to wait for that worker until the backstop: 35 s, 1."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests._requirements import require

require("rtc")

from llmrtc.testing import FakeTTS, RTCTestClient, ScriptedOpenAIServer, text_reply

from .test_serve import WEATHER, serve, write_script

pytestmark = pytest.mark.anyio

# Generous for a loaded 2-core machine, and far below the default grace (30 s) plus the
# backstop's margin, which is how long the stop took.
STOPS_WITHIN = 15.0

# A tools file that leaves what the speech stack's turn detector leaves: a ThreadPoolExecutor
# whose worker ran a job and now waits for the next one (a thread that is not a daemon).
IDLE_POOL_TOOLS = '''
from concurrent.futures import ThreadPoolExecutor
from llmrtc import tool

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="test-pool")
_pool.submit(int).result()


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"
'''


async def test_an_idle_thread_pool_does_not_hold_the_stop(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(IDLE_POOL_TOOLS)
    script = write_script(tmp_path / "s.json", [[{"call_id": "c1", "name": "ping"}], "Pong."])
    async with serve(str(tools), "--port", "0", "--fake-engines", script) as run:
        assert run.url is not None
        async with RTCTestClient(run.url, tts=FakeTTS()) as client:
            await client.send_text("Ping")
            await client.wait_for("turn_completed", timeout=20)
        started = time.monotonic()
        run.signal(signal.SIGTERM)
        code = await run.wait(timeout=STOPS_WITHIN)
    assert code == 0, run.stderr
    assert "llmrtc serve: stopped" in run.stderr, run.stderr
    assert "still not stopped" not in run.stderr, run.stderr
    assert time.monotonic() - started < STOPS_WITHIN


@pytest.mark.requires("voice_model", "turn_model", "espeak")
async def test_sigterm_after_a_spoken_turn_on_the_offline_speech_stops_at_once() -> None:
    # The offline speech engines (Silero, Whisper, Smart Turn, piper) as `serve` opens them; the
    # model is a scripted OpenAI-compatible server, so the test does not load the 1.5B model.
    async with ScriptedOpenAIServer([text_reply("It is sunny in Tokyo.")]) as api:
        env = {
            "OPENAI_BASE_URL": api.base_url,
            "OPENAI_API_KEY": "test-key",
            "LLMRTC_SPEECH": "offline",
        }
        async with serve(WEATHER, "--port", "0", "--llm", "openai", env=env) as run:
            assert run.url is not None
            async with RTCTestClient(run.url, timeout=60) as client:
                await client.say("What is the weather in Tokyo?")
                completed = await client.wait_for("turn_completed", timeout=120)
                assert completed["text"] == "It is sunny in Tokyo."
            # Hung up: no live session.
            started = time.monotonic()
            run.signal(signal.SIGTERM)
            code = await run.wait(timeout=STOPS_WITHIN)
    assert code == 0, run.stderr
    assert "0 live session(s)" in run.stderr, run.stderr
    assert "llmrtc serve: stopped" in run.stderr, run.stderr
    assert time.monotonic() - started < STOPS_WITHIN
