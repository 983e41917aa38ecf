"""Regressions from review 10: what reaches the client in `bad_candidate`, what counts as user
activity, resumes that drop or are refused, clients leaving before the answer."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

pytest.importorskip("aiortc", reason='the rtc floor needs aiortc: pip install "llmrtc[rtc]"')

from llmrtc.rtc import RTCServer
from llmrtc.testing import ScriptedLLM

from .conftest import config, fake_speech, raw_client

pytestmark = pytest.mark.anyio


def runners(llm: ScriptedLLM) -> Any:
    from llmrtc import ToolExecutor, ToolRegistry
    from llmrtc.agent import TurnRunner

    return lambda: TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="Be brief.")


async def test_bad_candidate_errors_never_carry_python_or_aiortc_text() -> None:
    async with (
        RTCServer(runners(ScriptedLLM([])), speech=fake_speech(), config=config()) as server,
        raw_client(server.url) as client,
    ):
        await client.connect()
        lines = [
            "candidate:1 1 udp 1 1.2.3.4 notaport typ host",
            "candidate:1 x udp y 1.2.3.4 5000 typ host",
            "candidate:1 1 udp 1 1.2.3.4 5000 typ host",
        ]
        sent = 0
        for line in lines:
            for mid, index in (("0", 0), ("zz", 7)):
                candidate = {"candidate": line, "sdpMid": mid, "sdpMLineIndex": index}
                await client.send({"type": "ice", "candidate": candidate})
                sent += 1
        await client.send({"type": "ping", "id": "after"})
        await client.wait_for("pong", id="after")
        errors = client.of_type("error")
        assert errors and all(e["code"] == "bad_candidate" for e in errors)
        for error in errors:
            assert "invalid literal" not in error["message"]
            assert "int()" not in error["message"]
        assert client.close_code is None


async def test_pings_alone_do_not_keep_a_session_alive() -> None:
    async with (
        RTCServer(
            runners(ScriptedLLM([])), speech=fake_speech(), config=config(idle_timeout=1.5)
        ) as server,
        raw_client(server.url) as client,
    ):
        await client.connect()
        with anyio.fail_after(15):
            for n in range(40):
                if client.close_code is not None:
                    break
                await client.send({"type": "ping", "id": str(n)})
                await anyio.sleep(0.25)
        assert client.of_type("error")[-1]["code"] == "idle_timeout"
