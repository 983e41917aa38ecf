"""`llmrtc serve playbooks/weather.yaml --port 0` on the real default path: no API key, the
offline model and the offline speech engines, as the README's first command runs it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import anyio
import pytest

from tests._requirements import require

require("rtc")

from llmrtc.testing import RTCTestClient

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.requires("local_model"),
    pytest.mark.requires("voice_model"),
]

ROOT = Path(__file__).resolve().parents[2]
LISTENING = "llmrtc serve: listening on "
DEAD_API = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there
START_TIMEOUT = 900.0  # the first run joins and verifies ~1.2 GB of model parts


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=10) as response:
        return int(response.status)


async def test_serve_weather_on_the_offline_stack_prints_the_url_and_answers() -> None:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LLMRTC_SPEECH", "LLMRTC_MODEL")
    }
    text = await _serve_and_answer(["--log-level", "info"], environment)
    # The offline model keeps prompt prefixes: the first stage's prompt was read at start.
    assert "first prompt warmed in" in text, text


async def test_llm_offline_wins_over_an_api_in_the_environment() -> None:
    # An API that cannot answer: were it used (for the model or, through LLMRTC_SPEECH left
    # unset, for speech), no answer would come.
    environment = {**os.environ, "OPENAI_API_KEY": "sk-unused", "OPENAI_BASE_URL": DEAD_API}
    environment.pop("LLMRTC_SPEECH", None)
    environment.pop("LLMRTC_MODEL", None)
    await _serve_and_answer(["--llm", "offline"], environment)


async def _serve_and_answer(options: list[str], environment: dict[str, str]) -> str:
    command = [sys.executable, "-m", "llmrtc.cli", "serve", "playbooks/weather.yaml"]
    command += ["--port", "0", *options]
    process = await anyio.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment, cwd=ROOT
    )
    stderr = bytearray()
    try:
        async with anyio.create_task_group() as group:

            async def drain() -> None:
                assert process.stderr is not None
                async for chunk in process.stderr:
                    stderr.extend(chunk)

            group.start_soon(drain)
            assert process.stdout is not None
            line = b""
            with anyio.fail_after(START_TIMEOUT):
                while not line.endswith(b"\n"):
                    chunk = await process.stdout.receive(1)
                    line += chunk
            text = line.decode().strip()
            assert text.startswith(LISTENING) and text.endswith("(open it in Chromium)"), text
            url = text[len(LISTENING) :].split(" ")[0]
            assert await anyio.to_thread.run_sync(_get, url) == 200
            async with RTCTestClient(url, timeout=60) as client:
                await client.send_text("What is the weather in Tokyo?")
                # The model answers (a busy 2-core machine may take its time over the rest).
                await client.wait_for("assistant_text", timeout=300)
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(120):
                assert await process.wait() == 0
            group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                process.kill()
            await process.aclose()  # its pipes and transport too, while the loop still runs
    text = stderr.decode(errors="replace")
    assert "Traceback" not in text, text
    # Before the URL line (the command writes them first): how long the start takes, then a
    # line per stage of preparing the model and the speech engines (a bar on a terminal).
    assert "llmrtc serve: opening the model and the speech engines" in text, text
    assert "about" in text.splitlines()[0], text
    for stage in ("warming up", "speech: loading model"):
        assert f"llmrtc: {stage}..." in text, text
    # The model's load holds the GIL: its line says what to expect, then how long it took.
    assert re.search(r"llmrtc: loading model \(about \d+ s\)\.\.\.", text), text
    assert re.search(r"llmrtc: loading model took \d+ s", text), text
    return text
