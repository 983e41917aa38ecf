"""Approving tool calls on the web client, in a real headless Chromium against a server with
`ServerConfig(approvals="client")`: a call that needs approval shows its row with the masked
arguments and Approve / Deny; a click disables both and answers; the row then shows the
call's final status (`ok` after Approve, `denied`, muted, after Deny)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests._requirements import require

pytestmark = pytest.mark.requires("browser")

CARD = "4111111111111111"
ROWS = """return [...document.querySelectorAll('[data-testid="tool-calls"] li')].map((li) => ({
  callId: li.dataset.callId,
  status: li.dataset.status,
  statusText: li.querySelector('.tool-status').textContent,
  arguments: li.querySelector('.tool-arguments')?.textContent ?? null,
  buttons: [...li.querySelectorAll('button')].map((b) => ({
    testid: b.dataset.testid, disabled: b.disabled})),
  color: getComputedStyle(li.querySelector('.tool-status')).color,
  duration: li.querySelector('.tool-duration').textContent}));"""


@pytest.fixture
def serve_approvals(portal: Any) -> Iterator[Callable[[list[Any]], Any]]:
    """`serve_approvals(script)`: an `RTCServer` on fake speech whose sessions' clients approve
    (`approvals="client"`), each session a `TurnRunner` on `ScriptedLLM(script)` with the
    `refund` tool (needs approval; `card` is sensitive; it takes 1.5 s)."""
    require("rtc")
    import anyio

    from llmrtc import ToolExecutor, ToolRegistry, TurnRunner, approve_in_context, tool
    from llmrtc.rtc.config import ServerConfig
    from llmrtc.rtc.server import RTCServer
    from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
    from llmrtc.voice.speech import Speech

    @tool(needs_approval=True, sensitive_fields=("card",), timeout=20.0)
    async def refund(order_id: str, card: str) -> dict[str, Any]:
        """Refund an order.

        Args:
            order_id: The order.
            card: The card to refund to.
        """
        await anyio.sleep(1.5)  # long enough to see the answered row running
        return {"refunded": order_id}

    tts = FakeTTS(seconds_per_char=0.01)
    speech = Speech(vad=FakeVAD(), stt=FakeSTT([], tts=tts), tts=tts)
    with ExitStack() as stack:

        def start(script: list[Any]) -> Any:
            def agent() -> TurnRunner:
                executor = ToolExecutor(ToolRegistry([refund]), approver=approve_in_context)
                return TurnRunner(ScriptedLLM(list(script)), executor, system_prompt="Be brief.")

            config = ServerConfig(host="127.0.0.1", port=0, shutdown_grace=2.0, approvals="client")
            server = RTCServer(agent, speech=speech, config=config)
            stack.enter_context(portal.wrap_async_context_manager(server))
            return server

        yield start


def test_approve_one_call_and_deny_another_on_the_timeline(
    serve_approvals: Callable[[list[Any]], Any], open_page: Callable[..., Any]
) -> None:
    from llmrtc.tools import ToolCall

    script = [
        [ToolCall("c1", "refund", {"order_id": "A1", "card": CARD})],
        "Refunded order A1.",
        [ToolCall("c2", "refund", {"order_id": "A2", "card": CARD})],
        "I did not refund order A2.",
    ]
    server = serve_approvals(script)
    page = open_page(server.url)
    page.connect()

    def row(call_id: str) -> dict[str, Any] | None:
        return next((r for r in page.js(ROWS) if r["callId"] == call_id), None)

    page.type_text("Refund order A1 please.")
    asking = page.wait(
        "the approval buttons of c1", lambda: (r := row("c1")) and r["buttons"] and r
    )
    assert asking["status"] == "approval", asking
    assert asking["arguments"] == "order_id: A1, card: ***", asking
    assert asking["buttons"] == [
        {"testid": "approve", "disabled": False},
        {"testid": "deny", "disabled": False},
    ]
    page.element("approve").click()
    answered = row("c1")
    assert answered is not None
    if answered["buttons"]:  # not finished yet (the tool takes 1.5 s): both are disabled
        assert all(b["disabled"] for b in answered["buttons"]), answered
    done = page.wait("c1's final status", lambda: (r := row("c1")) and r["status"] == "ok" and r)
    assert done["statusText"] == "ok" and not done["buttons"], done
    number, unit = done["duration"].split()  # the server's measure of the 1.5 s tool
    assert unit == "s" and float(number) >= 1.4, done
    page.wait("the first answer", lambda: "Refunded order A1" in page.text("assistant"))

    page.type_text("Now refund order A2.")
    page.wait("the approval buttons of c2", lambda: (r := row("c2")) and r["buttons"])
    page.element("deny").click()
    # The click shows "denied" at once; the server's `tool_call_finished` then puts the final
    # row in place (no buttons): wait for that one.
    denied = page.wait(
        "c2's final status",
        lambda: (r := row("c2")) and r["status"] == "denied" and not r["buttons"] and r,
    )
    assert denied["statusText"] == "denied" and not denied["buttons"], denied
    assert denied["duration"] == "did not run", denied
    # Denied is muted, not an error: it has the colour of an aborted call, not of a failure.
    muted = page.js(
        "const s = document.createElement('span'); s.style.color = 'var(--muted)';"
        "document.body.append(s); const c = getComputedStyle(s).color; s.remove(); return c;"
    )
    assert denied["color"] == muted, denied
    page.wait("the second answer", lambda: "did not refund" in page.text("assistant"))

    events = page.state()["events"]
    finished = [(e["call_id"], e["status"]) for e in events if e["type"] == "tool_call_finished"]
    assert finished == [("c1", "ok"), ("c2", "denied")]
    assert CARD not in page.text("tool-calls")
    assert [r["status"] for r in page.js(ROWS)] == ["ok", "denied"]


def test_duplicate_is_muted_and_unavailable_is_bad_on_the_timeline(
    portal: Any, open_page: Callable[..., Any]
) -> None:
    # The other two statuses of side-effect policies, as the page draws them: a repeated
    # booking refused (`on_duplicate="reject"`) and a tool paused by its circuit breaker.
    require("rtc")
    import uuid

    from llmrtc import CircuitBreaker, ToolExecutor, ToolRegistry, TurnRunner, tool
    from llmrtc.rtc.config import ServerConfig
    from llmrtc.rtc.server import RTCServer
    from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
    from llmrtc.tools import ToolCall
    from llmrtc.voice.speech import Speech

    @tool(on_duplicate="reject")
    async def book(restaurant: str) -> dict[str, Any]:
        """Book a table.

        Args:
            restaurant: Where.
        """
        return {"booked": restaurant}

    @tool(on_duplicate="reuse")
    async def reserve(room: str) -> dict[str, Any]:
        """Reserve a room.

        Args:
            room: Which.
        """
        return {"reserved": room}

    @tool(breaker=CircuitBreaker(failures=1, reset_after=300.0))
    async def lookup(city: str) -> str:
        """Always fails.

        Args:
            city: The city.
        """
        raise RuntimeError("the service is down")

    script = [
        [ToolCall("c1", "book", {"restaurant": "Nopa"})],
        "Booked.",
        [ToolCall("c2", "book", {"restaurant": "Nopa"})],
        "Already booked.",
        [ToolCall("c3", "lookup", {"city": "Oslo"})],
        "It failed.",
        [ToolCall("c4", "lookup", {"city": "Oslo"})],
        "It is unavailable.",
        [ToolCall("c5", "reserve", {"room": "blue"})],
        "Reserved.",
        [ToolCall("c6", "reserve", {"room": "blue"})],
        "Still reserved.",
    ]

    def agent() -> TurnRunner:
        # Duplicates are per session: the runner passes its session id to the executor.
        executor = ToolExecutor(ToolRegistry([book, lookup, reserve]))
        return TurnRunner(
            ScriptedLLM(list(script)), executor, system_prompt="x", session_id=uuid.uuid4().hex
        )

    tts = FakeTTS(seconds_per_char=0.01)
    speech = Speech(vad=FakeVAD(), stt=FakeSTT([], tts=tts), tts=tts)
    server = RTCServer(
        agent, speech=speech, config=ServerConfig(host="127.0.0.1", port=0, shutdown_grace=2.0)
    )
    with portal.wrap_async_context_manager(server):
        page = open_page(server.url)
        page.connect()
        for n, (text, answer) in enumerate(
            [
                ("Book Nopa", "Booked."),
                ("Book Nopa again", "Already booked."),
                ("Weather in Oslo?", "It failed."),
                ("And now?", "It is unavailable."),
                ("Reserve the blue room", "Reserved."),
                ("Reserve the blue room again", "Still reserved."),
            ]
        ):
            page.type_text(text)
            page.wait(
                f"answer {n + 1}",
                lambda n=n, answer=answer: (
                    len(page.js(ROWS)) == n + 1 and answer in page.text("assistant")
                ),
            )
        rows = page.js(ROWS)
        assert [(r["callId"], r["status"]) for r in rows] == [
            ("c1", "ok"),
            ("c2", "duplicate"),
            ("c3", "error"),
            ("c4", "unavailable"),
            ("c5", "ok"),
            ("c6", "ok"),
        ], rows
        assert rows[1]["duration"] == rows[3]["duration"] == "did not run", rows
        # A reused result did not run either: the row names the call whose result it is.
        assert rows[5]["duration"] == "reused c5" and rows[4]["duration"] != "reused c5", rows
        # duplicate is muted like denied; unavailable is bad like error.
        colours = {r["status"]: r["color"] for r in rows}
        muted = page.js(
            "const s = document.createElement('span'); s.style.color = 'var(--muted)';"
            "document.body.append(s); const c = getComputedStyle(s).color; s.remove(); return c;"
        )
        assert colours["duplicate"] == muted, colours
        assert colours["unavailable"] == colours["error"] != muted, colours


def test_hanging_up_shows_a_call_waiting_for_approval_as_denied(
    serve_approvals: Callable[[list[Any]], Any], open_page: Callable[..., Any]
) -> None:
    # The server denies what still waits when the session ends; the page says so too.
    from llmrtc.tools import ToolCall

    server = serve_approvals([[ToolCall("c1", "refund", {"order_id": "A1", "card": CARD})], "."])
    page = open_page(server.url)
    page.connect()
    page.type_text("Refund order A1 please.")
    page.wait("the approval buttons", lambda: page.js(ROWS)[0]["buttons"])
    page.element("hangup").click()
    row = page.wait(
        "the call to show as denied", lambda: (r := page.js(ROWS)[0])["status"] == "denied" and r
    )
    assert not row["buttons"] and row["duration"] in (
        "not approved: the connection closed",  # the page closed first
        "did not run",  # the server's `tool_call_finished` came first
    ), row
