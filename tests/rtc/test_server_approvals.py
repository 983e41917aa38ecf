"""Approval of tool calls by the session's client (`ServerConfig(approvals="client")`): the call
goes out as `approval_requested` with its sensitive arguments masked, runs only after that
session's client says yes (`approve`), is `denied` (the reason reaching the model) on a no or
when the session ends; another session's client cannot answer it (`unknown_approval`), and a
server whose application approves refuses `approve` (`unexpected_message`)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolContext, ToolExecutor, ToolRegistry, approve_in_context, tool
from llmrtc.abort import AbortController
from llmrtc.agent import TurnRunner
from llmrtc.execution.approval import Approval
from llmrtc.rtc._approvals import SESSION_ENDED, ClientApprovals
from llmrtc.rtc.messages import ApprovalRequestedMessage, ApproveMessage, ServerMessage
from llmrtc.rtc.protocol import ProtocolError
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import ScriptedLLM
from llmrtc.tools.context import ToolContext as Context

pytestmark = pytest.mark.anyio

CARD = "4111111111111111"


def context(call_id: str = "c1", *, signal: Any = None, sensitive: tuple[str, ...] = ()) -> Context:
    return Context(
        call_id=call_id,
        abort_signal=signal if signal is not None else AbortController().signal,
        sensitive_fields=sensitive,
    )


# ClientApprovals, called as the executor calls an approver -----------------------------------


async def test_a_request_is_sent_masked_and_the_answer_returned() -> None:
    sent: list[ServerMessage] = []
    approvals = ClientApprovals(sent.append, session_id="s1")
    call = ToolCall(
        "c1",
        "refund",
        {"order_id": "A17", "card": CARD, "note": f"card {CARD} was charged", "amount": 20.0},
    )
    async with anyio.create_task_group() as group:
        answers: list[Approval] = []

        async def ask() -> None:
            answers.append(await approvals(call, context(sensitive=("card",))))

        group.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        assert sent == [
            ApprovalRequestedMessage(
                call_id="c1",
                name="refund",
                arguments={
                    "order_id": "A17",
                    "card": "***",
                    "note": "card *** was charged",
                    "amount": 20.0,
                },
            )
        ]
        assert approvals.waiting == 1
        approvals.answer(ApproveMessage(call_id="c1", approved=False, reason="Wrong card"))
    assert answers == [Approval(False, "Wrong card")]
    assert approvals.waiting == 0


async def test_an_unknown_or_answered_call_is_unknown_approval() -> None:
    approvals = ClientApprovals(lambda m: None, session_id="s1")
    with pytest.raises(ProtocolError) as caught:
        approvals.answer(ApproveMessage(call_id="nope", approved=True))
    assert caught.value.code == "unknown_approval"
    assert "'nope'" in caught.value.message and "answered already" in caught.value.message
    async with anyio.create_task_group() as group:
        group.start_soon(approvals, ToolCall("c1", "refund", {}), context())
        await anyio.wait_all_tasks_blocked()
        approvals.answer(ApproveMessage(call_id="c1", approved=True))
    with pytest.raises(ProtocolError) as again:
        approvals.answer(ApproveMessage(call_id="c1", approved=True))
    assert again.value.code == "unknown_approval"


async def test_an_abort_stops_the_wait_and_the_call_is_no_longer_waiting() -> None:
    approvals = ClientApprovals(lambda m: None, session_id="s1")
    controller = AbortController()
    answers: list[Approval] = []

    async def ask() -> None:
        answers.append(
            await approvals(ToolCall("c1", "refund", {}), context(signal=controller.signal))
        )

    async with anyio.create_task_group() as group:
        group.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        controller.abort("barge_in")
    assert answers and answers[0].approved is False
    assert approvals.waiting == 0
    with pytest.raises(ProtocolError, match="unknown_approval"):
        approvals.answer(ApproveMessage(call_id="c1", approved=True))


async def test_a_cancelled_wait_forgets_its_request() -> None:
    # The executor's approval_timeout cancels the approver's wait.
    approvals = ClientApprovals(lambda m: None, session_id="s1")
    with anyio.move_on_after(0.05):
        await approvals(ToolCall("c1", "refund", {}), context())
    assert approvals.waiting == 0


async def test_the_session_ending_denies_what_waits_and_a_resume_gets_later_requests() -> None:
    old: list[ServerMessage] = []
    approvals = ClientApprovals(old.append, session_id="s1")
    answers: dict[str, Approval] = {}

    async def ask(call_id: str) -> None:
        answers[call_id] = await approvals(ToolCall(call_id, "refund", {"n": 1}), context(call_id))

    async with anyio.create_task_group() as group:
        group.start_soon(ask, "c1")
        await anyio.wait_all_tasks_blocked()
        approvals.deny_all()
        await anyio.wait_all_tasks_blocked()
        assert answers["c1"] == Approval(False, SESSION_ENDED)
        # A call that outlives the connection asks while none is attached: it waits...
        group.start_soon(ask, "c2")
        await anyio.wait_all_tasks_blocked()
        assert [m.call_id for m in old] == ["c1"]  # type: ignore[union-attr]
        # ...and the resumed connection is sent it, and answers it.
        new: list[ServerMessage] = []
        approvals.send_to(new.append)
        assert [(m.type, m.call_id) for m in new] == [("approval_requested", "c2")]  # type: ignore[union-attr]
        approvals.answer(ApproveMessage(call_id="c2", approved=True))
    assert answers["c2"] == Approval(True, None)


async def test_two_waiting_requests_with_one_call_id_are_answered_oldest_first() -> None:
    # Scripted and small models reuse call ids (`call_1`).
    approvals = ClientApprovals(lambda m: None, session_id="s1")
    answers: list[tuple[int, bool]] = []

    async def ask(n: int) -> None:
        answer = await approvals(ToolCall("call_1", "refund", {"n": n}), context("call_1"))
        answers.append((n, answer.approved))

    async with anyio.create_task_group() as group:
        group.start_soon(ask, 1)
        await anyio.wait_all_tasks_blocked()
        group.start_soon(ask, 2)
        await anyio.wait_all_tasks_blocked()
        approvals.answer(ApproveMessage(call_id="call_1", approved=False))
        await anyio.wait_all_tasks_blocked()
        approvals.answer(ApproveMessage(call_id="call_1", approved=True))
    assert answers == [(1, False), (2, True)]


def test_the_server_config_checks_approvals() -> None:
    from llmrtc.rtc.config import ServerConfig

    assert ServerConfig().approvals == "app"
    assert ServerConfig(approvals="client").approvals == "client"
    with pytest.raises(ValueError, match=r"approvals must be 'app' .* or 'client' .* 'user'"):
        ServerConfig(approvals="user")  # type: ignore[arg-type]


# Over real peer connections ------------------------------------------------------------------


@tool(needs_approval=True, sensitive_fields=("card",), timeout=10.0)
async def refund(order_id: str, card: str, ctx: ToolContext) -> dict[str, Any]:
    """Refund an order.

    Args:
        order_id: The order.
        card: The card to refund to.
    """
    RAN.append(order_id)
    return {"refunded": order_id}


RAN: list[str] = []


class _Ends(Hooks):
    def __init__(self) -> None:
        self.ends: list[ToolEndEvent] = []

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.ends.append(event)


def _refund_call(call_id: str, order_id: str) -> ToolCall:
    return ToolCall(call_id, "refund", {"order_id": order_id, "card": CARD})


def _server(script: list[Any], *, approvals: str = "client", ends: _Ends | None = None) -> Any:
    from llmrtc.rtc import RTCServer

    from .conftest import config, fake_speech

    llms: list[ScriptedLLM] = []

    def make() -> TurnRunner:
        llm = ScriptedLLM(list(script))
        llms.append(llm)
        executor = ToolExecutor(ToolRegistry([refund]), approver=approve_in_context, hooks=ends)
        return TurnRunner(llm, executor, system_prompt="Be brief.")

    server = RTCServer(make, speech=fake_speech(), config=config(approvals=approvals))
    server.llms = llms  # type: ignore[attr-defined]
    return server


async def test_the_client_approves_one_call_and_denies_another_with_a_reason() -> None:
    from .conftest import raw_client

    RAN.clear()
    script = [
        [_refund_call("c1", "A1")],
        "Refunded.",
        [_refund_call("c2", "A2")],
        "It was not refunded.",
    ]
    server = _server(script)
    async with server, raw_client(server.url) as client:
        await client.connect()
        await client.send({"type": "text", "text": "Refund order A1"})
        asked = await client.wait_for("approval_requested", call_id="c1")
        assert asked == {
            "type": "approval_requested",
            "call_id": "c1",
            "name": "refund",
            "arguments": {"order_id": "A1", "card": "***"},
        }
        assert RAN == []  # nothing runs before the yes
        await client.send({"type": "approve", "call_id": "c1", "approved": True})
        done = await client.wait_for("tool_call_finished", call_id="c1")
        assert done["status"] == "ok" and RAN == ["A1"]
        await client.wait_for("turn_completed")

        await client.send({"type": "text", "text": "Refund order A2"})
        await client.wait_for("approval_requested", call_id="c2")
        await client.send(
            {"type": "approve", "call_id": "c2", "approved": False, "reason": "Not that card"}
        )
        denied = await client.wait_for("tool_call_finished", call_id="c2")
        assert denied["status"] == "denied" and denied["duration_ms"] == 0, denied
        await client.wait_for("turn_completed", count=2)
        assert RAN == ["A1"]
        # The model was told why.
        last = server.llms[0].requests[-1]
        assert "Not that card" in str(last.messages[-1])
        # Answered already: a second answer is refused, and the session goes on.
        await client.send({"type": "approve", "call_id": "c2", "approved": True})
        error = await client.wait_for("error", code="unknown_approval")
        assert "'c2'" in error["message"]
        await client.send({"type": "ping", "id": "still"})
        await client.wait_for("pong", id="still")
    assert CARD not in str(client.events)


async def test_only_the_sessions_own_client_can_answer() -> None:
    from .conftest import raw_client

    RAN.clear()
    script = [[_refund_call("c1", "A1")], "Refunded."]
    server = _server(script)
    async with server, raw_client(server.url) as alice, raw_client(server.url) as mallory:
        await alice.connect()
        await mallory.connect()
        await alice.send({"type": "text", "text": "Refund order A1"})
        await alice.wait_for("approval_requested", call_id="c1")
        await mallory.send({"type": "approve", "call_id": "c1", "approved": True})
        error = await mallory.wait_for("error", code="unknown_approval")
        assert "this session's approval" in error["message"]
        await anyio.sleep(0.2)
        assert RAN == [] and not alice.of_type("tool_call_finished")
        assert not mallory.of_type("approval_requested")
        await alice.send({"type": "approve", "call_id": "c1", "approved": True})
        done = await alice.wait_for("tool_call_finished", call_id="c1")
        assert done["status"] == "ok" and RAN == ["A1"]


async def test_the_session_ending_denies_a_waiting_call() -> None:
    from .conftest import raw_client, settled

    RAN.clear()
    ends = _Ends()
    script = [[_refund_call("c1", "A1")], "Never mind."]
    server = _server(script, ends=ends)
    async with server:
        async with raw_client(server.url) as client:
            await client.connect()
            await client.send({"type": "text", "text": "Refund order A1"})
            await client.wait_for("approval_requested", call_id="c1")
            await client.send({"type": "end"})
            finished = await client.wait_for("tool_call_finished", call_id="c1")
            await client.wait_closed()
        await settled(server)
    assert finished["status"] == "denied", finished
    assert [(e.call_id, e.status) for e in ends.ends] == [("c1", "denied")]
    assert RAN == []


async def test_an_interrupt_while_waiting_aborts_the_call_and_a_late_answer_is_refused() -> None:
    from .conftest import raw_client

    RAN.clear()
    script = [[_refund_call("c1", "A1")], "Never mind.", "Hello again."]
    server = _server(script)
    async with server, raw_client(server.url) as client:
        await client.connect()
        await client.send({"type": "text", "text": "Refund order A1"})
        await client.wait_for("approval_requested", call_id="c1")
        await client.send({"type": "interrupt"})
        finished = await client.wait_for("tool_call_finished", call_id="c1")
        assert finished["status"] == "aborted", finished
        await client.send({"type": "approve", "call_id": "c1", "approved": True})
        await client.wait_for("error", code="unknown_approval")
        assert RAN == []


async def test_an_app_approving_server_refuses_approve_and_goes_on() -> None:
    from .conftest import raw_client

    server = _server(["Hello."], approvals="app")
    async with server, raw_client(server.url) as client:
        await client.connect()
        await client.send({"type": "approve", "call_id": "c1", "approved": True})
        error = await client.wait_for("error", code="unexpected_message")
        assert "approvals='app'" in error["message"]
        await client.send({"type": "text", "text": "Hi"})
        completed = await client.wait_for("turn_completed")
        assert completed["text"] == "Hello."


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ({"type": "approve", "approved": True}, "call_id: missing"),
        ({"type": "approve", "call_id": "c1", "approved": "yes"}, "approved: "),
        ({"type": "approve", "call_id": "c1", "approved": False, "reason": "x" * 201}, "200"),
    ],
    ids=["no call_id", "approved not a bool", "reason too long"],
)
async def test_a_bad_approve_gets_a_precise_error(message: dict[str, Any], fragment: str) -> None:
    from .conftest import raw_client

    server = _server([])
    async with server, raw_client(server.url) as client:
        await client.connect()
        await client.send(message)
        error = await client.wait_for("error", code="invalid_message")
        assert "'approve'" in error["message"] and fragment in error["message"], error


async def test_a_resume_in_this_process_is_asked_what_waits_for_approval() -> None:
    # A call that outlives its connection (as a background call may) and asks for approval
    # while no connection is attached is asked of the client that resumes the session.
    from .conftest import raw_client, settled

    server = _server([])
    async with server:
        async with raw_client(server.url) as first:
            session = await first.connect()
            approvals = next(iter(server._sessions)).approvals
            assert isinstance(approvals, ClientApprovals)
        await settled(server)  # vanished: resumable
        answers: list[Approval] = []

        async def ask() -> None:
            call = ToolCall("late", "refund", {"order_id": "A9", "card": CARD})
            answers.append(await approvals(call, context("late", sensitive=("card",))))

        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            await anyio.wait_all_tasks_blocked()
            credentials = (session["session_id"], session["resume_token"])
            async with raw_client(server.url) as again:
                assert (await again.connect(resume=credentials))["resumed"] is True
                asked = await again.wait_for("approval_requested", call_id="late")
                assert asked["arguments"] == {"order_id": "A9", "card": "***"}
                await again.send({"type": "approve", "call_id": "late", "approved": True})
    assert answers == [Approval(True, None)]
    assert not first.of_type("approval_requested")


# `llmrtc serve --approvals` ------------------------------------------------------------------

REFUND_TOOLS = '''
from llmrtc import tool


@tool(needs_approval=True, sensitive_fields=("card",))
def refund(order_id: str, card: str) -> dict:
    """Refund an order.

    Args:
        order_id: The order.
        card: The card to refund to.
    """
    return {"refunded": order_id}
'''


@pytest.mark.parametrize("approvals", ["client", None])
async def test_llmrtc_serve_asks_the_page_with_approvals_client(
    approvals: str | None, tmp_path: Any
) -> None:
    import signal

    from tests.cli.test_serve import serve, write_script

    from .conftest import raw_client

    tools = tmp_path / "tools.py"
    tools.write_text(REFUND_TOOLS)
    call = {"call_id": "c1", "name": "refund", "arguments": {"order_id": "A1", "card": CARD}}
    script = write_script(tmp_path / "s.json", [[call], "Done."])
    options = ["--approvals", approvals] if approvals is not None else []
    async with serve(str(tools), "--port", "0", *options, "--fake-engines", script) as run:
        assert run.url is not None
        async with raw_client(run.url) as client:
            await client.connect()
            await client.send({"type": "text", "text": "Refund order A1"})
            if approvals == "client":
                asked = await client.wait_for("approval_requested", call_id="c1")
                assert asked["arguments"] == {"order_id": "A1", "card": "***"}
                await client.send({"type": "approve", "call_id": "c1", "approved": True})
                finished = await client.wait_for("tool_call_finished", call_id="c1")
                assert finished["status"] == "ok", finished
            else:
                # By default the application approves, and a tools file has no approver of
                # its own: the call is denied, never run, and nobody is asked.
                finished = await client.wait_for("tool_call_finished", call_id="c1")
                assert finished["status"] == "denied", finished
                assert not client.of_type("approval_requested")
            await client.send({"type": "end"})
        run.signal(signal.SIGTERM)
        assert await run.wait() == 0


def test_the_workers_of_llmrtc_serve_get_the_approvals_option(tmp_path: Any) -> None:
    from llmrtc.cli import build_parser
    from llmrtc.cli.supervisor import worker_command

    args = build_parser().parse_args(["serve", "tools.py", "--approvals", "client"])
    command = worker_command(args, 8080, tmp_path / "store.db")
    assert command[command.index("--approvals") + 1] == "client"
    assert build_parser().parse_args(["serve", "tools.py"]).approvals == "app"


async def test_rtc_test_client_approves_and_denies_with_a_reason() -> None:
    # The shipped test client's `approve`, as a user testing their own bot would call it.
    from llmrtc.testing import FakeTTS, RTCTestClient

    RAN.clear()
    script = [
        [_refund_call("c1", "A1"), _refund_call("c2", "A2")],
        "One refunded, one not.",
    ]
    server = _server(script)
    async with server, RTCTestClient(server.url, tts=FakeTTS()) as client:
        await client.send_text("Refund orders A1 and A2")
        await client.wait_for("approval_requested", call_id="c1")
        await client.wait_for("approval_requested", call_id="c2")
        await client.approve("c1")
        await client.approve("c2", approved=False, reason="Wrong card")
        await client.wait_for("turn_completed")
        finished = {
            e["call_id"]: e["status"] for e in client.events if e["type"] == "tool_call_finished"
        }
        assert finished == {"c1": "ok", "c2": "denied"} and RAN == ["A1"]
        assert "Wrong card" in str(server.llms[0].requests[-1].messages)
