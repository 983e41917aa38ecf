"""The web client's tool-call timeline in a real headless Chromium: running calls count their
time up, and error, timeout and aborted calls show as such (a small two-stage playbook whose
tools fail, time out and run until stopped)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmrtc.tools import ToolCall

pytestmark = [pytest.mark.requires("browser"), pytest.mark.requires("voice_model")]

STATUS_PLAYBOOK = """
id: tool-statuses
name: Tool statuses
description: Tools that fail, time out and run long, for the tool-call timeline.
version: "1"
initial_stage: work
tools_file: status_tools.py
global_system_prompt: You test tools.
stages:
  - id: work
    name: Work
    description: Calls the tools.
    system_prompt: Use the tools.
    tools: [brokenLookup, slowLookup, longLookup]
  - id: done
    name: Done
    description: The caller is done.
    system_prompt: Say goodbye.
    terminal: true
transitions:
  - id: caller-done
    from_stage: work
    condition: {type: keyword, keywords: [bye]}
    action: {target_stage: done}
"""

STATUS_TOOLS = '''
import anyio

from llmrtc import tool


@tool
async def brokenLookup(city: str) -> str:
    """Always fails.

    Args:
        city: City name.
    """
    raise RuntimeError("the weather service is down")


@tool(timeout=0.5)
async def slowLookup(city: str) -> str:
    """Never answers in time.

    Args:
        city: City name.
    """
    await anyio.sleep(30)
    return "late"


@tool(timeout=120.0)
async def longLookup(city: str) -> str:
    """Runs until it is stopped.

    Args:
        city: City name.
    """
    await anyio.sleep(120)
    return "late"
'''


def test_the_tool_timeline_shows_running_error_timeout_and_aborted_calls(
    serve: Callable[..., Any],
    open_page: Callable[..., Any],
    tmp_path: Path,
) -> None:
    (tmp_path / "statuses.yaml").write_text(STATUS_PLAYBOOK)
    (tmp_path / "status_tools.py").write_text(STATUS_TOOLS)
    oslo = '{"city": "Oslo"}'
    script = [
        [ToolCall("call_1", "brokenLookup", oslo), ToolCall("call_2", "slowLookup", oslo)],
        "Sorry, the weather service is not answering.",
        [ToolCall("call_3", "longLookup", oslo)],
        "Spare answer.",
    ]
    server = serve(script, playbook_path=tmp_path / "statuses.yaml")
    page = open_page(server.url)
    page.connect()
    assert page.text("stage") == "work"

    page.type_text("What is the weather in Oslo?")
    page.wait("the apology", lambda: "not answering" in page.text("assistant"))
    statuses = {t["name"]: t["status"] for t in page.tool_items()}
    assert statuses == {"brokenLookup": "error", "slowLookup": "timeout"}, statuses
    slow = next(t for t in page.tool_items() if t["name"] == "slowLookup")
    number, unit = slow["duration"].split()  # "412.3 ms", or "1.02 s" on a loaded machine
    assert unit in ("ms", "s") and float(number) * (1000 if unit == "s" else 1) >= 400, slow

    # A call still running shows as running; Interrupt stops it and it shows as aborted.
    page.type_text("Try again please.")
    page.wait(
        "the long call to be running",
        lambda: any(
            t["name"] == "longLookup" and t["status"] == "running" for t in page.tool_items()
        ),
    )
    assert "RUNNING" in page.text("tool-calls").upper()
    page.wait(  # its time so far, counting up
        "the running call's elapsed time",
        lambda: any(t["duration"].endswith("so far") for t in page.tool_items()),
    )
    page.element("interrupt").click()
    page.wait(
        "the long call to be aborted",
        lambda: any(
            t["name"] == "longLookup" and t["status"] == "aborted" for t in page.tool_items()
        ),
    )
    assert len(page.tool_items()) == 3
