"""A background tool call on the web client's timeline in a real headless Chromium: while it
runs, its row shows a spinner, the word "background" and its latest progress line (the turn
has answered meanwhile); when its final result arrives, the row shows that status like any
finished call, without spinner or progress. The spinner stands still under
prefers-reduced-motion. A hang-up shows a running background call as stopped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from llmrtc.tools import ToolCall

pytestmark = pytest.mark.requires("browser")

BOOKING_PLAYBOOK = """
id: booking
name: Booking
description: Books a table in the background.
version: "1"
initial_stage: book
tools_file: booking_tools.py
global_system_prompt: You book tables.
stages:
  - id: book
    name: Book
    description: Books the table.
    system_prompt: Use the tool.
    tools: [bookTable]
"""

BOOKING_TOOLS = '''
import anyio

from llmrtc import ToolContext, tool


@tool(background=True, timeout=60.0)
async def bookTable(restaurant: str, ctx: ToolContext) -> dict:
    """Book a table.

    Args:
        restaurant: Where.
    """
    await ctx.progress(f"Checking availability at {restaurant}")
    await anyio.sleep(2.0)
    await ctx.progress("Confirming the booking")
    await anyio.sleep(2.0)
    return {"confirmed": True, "reference": "A12"}
'''

ROW = """return [...document.querySelectorAll('[data-testid="tool-calls"] li')].map((li) => ({
  name: li.querySelector('.tool-name').textContent,
  status: li.dataset.status,
  statusText: li.querySelector('.tool-status').textContent,
  background: li.dataset.background || null,
  spinner: Boolean(li.querySelector('.tool-spinner')),
  spinning: li.querySelector('.tool-spinner')
    ? getComputedStyle(li.querySelector('.tool-spinner')).animationName : null,
  progress: li.querySelector('.tool-progress')?.textContent ?? null,
  text: li.textContent,
  duration: li.querySelector('.tool-duration').textContent}));"""


def test_a_background_call_shows_a_spinner_and_its_progress_until_its_final_status(
    serve_fake_speech: Callable[..., Any],
    open_page: Callable[..., Any],
    tmp_path: Path,
) -> None:
    (tmp_path / "booking.yaml").write_text(BOOKING_PLAYBOOK)
    (tmp_path / "booking_tools.py").write_text(BOOKING_TOOLS)
    script = [
        [ToolCall("call_1", "bookTable", '{"restaurant": "Nopa"}')],
        "I am booking it now.",
        # Spare answers for an update turn about the late result (not checked here).
        "Your table at Nopa is booked.",
        "Anything else?",
    ]
    server = serve_fake_speech(script, playbook_path=tmp_path / "booking.yaml")
    page = open_page(server.url)
    page.connect()

    def rows() -> list[dict[str, Any]]:
        return list(page.js(ROW))

    page.type_text("Book a table at Nopa please.")
    running = page.wait(
        "the background call to show its progress",
        lambda: next((r for r in rows() if r["status"] == "running" and r["progress"]), None),
    )
    assert running["name"] == "bookTable" and running["background"] == "true", running
    assert running["spinner"] and running["spinning"] == "spin", running
    assert "background" in running["text"] and "running" in running["statusText"], running
    assert running["progress"] in ("Checking availability at Nopa", "Confirming the booking")
    # The turn answered while the call runs on.
    page.wait("the turn's answer", lambda: "booking it now" in page.text("assistant"))
    assert rows()[0]["status"] == "running", rows()

    # A user who asks for less motion gets a spinner that stands still (the words stay).
    page.driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-reduced-motion", "value": "reduce"}]},
    )
    still = rows()[0]
    if still["status"] == "running":  # not finished in the meantime on a slow machine
        assert still["spinner"] and still["spinning"] == "none", still
    page.wait(
        "the second progress line",
        lambda: rows()[0]["progress"] == "Confirming the booking" or rows()[0]["status"] == "ok",
    )

    done = page.wait(
        "the final status", lambda: next((r for r in rows() if r["status"] == "ok"), None)
    )
    assert done["statusText"] == "ok" and not done["spinner"] and done["progress"] is None, done
    number, unit = done["duration"].split()  # about 4 s: the server's measure
    assert unit == "s" and float(number) >= 3.5, done
    assert len(rows()) == 1
    events = [e["type"] for e in page.state()["events"]]
    assert events.count("tool_call_finished") == 1
    assert events.index("turn_completed") < events.index("tool_call_finished"), events


def test_hanging_up_shows_a_running_background_call_as_stopped(
    serve_fake_speech: Callable[..., Any],
    open_page: Callable[..., Any],
    tmp_path: Path,
) -> None:
    # A hang-up ends the session for good: the server stops its background calls too.
    (tmp_path / "booking.yaml").write_text(BOOKING_PLAYBOOK)
    (tmp_path / "booking_tools.py").write_text(BOOKING_TOOLS)
    script = [[ToolCall("call_1", "bookTable", '{"restaurant": "Nopa"}')], "Booking it now."]
    server = serve_fake_speech(script, playbook_path=tmp_path / "booking.yaml")
    page = open_page(server.url)
    page.connect()
    page.type_text("Book a table at Nopa please.")
    page.wait("the background call to run", lambda: page.js(ROW)[0]["spinner"])
    page.element("hangup").click()
    row = page.wait(
        "the call to show as stopped",
        lambda: next((r for r in page.js(ROW) if r["status"] == "aborted"), None),
    )
    assert not row["spinner"] and row["progress"] is None, row
    assert row["duration"] == "stopped: the connection closed", row
