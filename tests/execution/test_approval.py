"""`needs_approval` with `ToolExecutor(approver=..., approval_timeout=...)`: the handler runs
only once the approver says yes; a no (with its reason), no answer in time, a raising approver
or a missing one end the call `denied`; an abort while waiting ends it `aborted`."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.abort import AbortController
from llmrtc.execution import Approval, approvals, approve_in_context
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import RecordingHooks
from llmrtc.tools.context import ToolContext

pytestmark = pytest.mark.anyio

RAN: list[dict[str, Any]] = []


@tool(needs_approval=True, sensitive_fields=("card",))
async def refund(order_id: str, amount: float, card: str = "none") -> str:
    """Refund an order."""
    RAN.append({"order_id": order_id, "amount": amount})
    return f"refunded {amount}"


@tool(needs_approval=lambda call: call.arguments["amount"] > 100)
async def transfer(amount: float) -> str:
    """Move money."""
    RAN.append({"amount": amount})
    return "moved"


def refund_call(call_id: str = "c1", amount: float = 20) -> ToolCall:
    return ToolCall(call_id, "refund", json.dumps({"order_id": "A1", "amount": amount}))


@pytest.fixture(autouse=True)
def _clear() -> None:
    RAN.clear()


async def test_approved_calls_run_and_the_approver_sees_parsed_arguments() -> None:
    seen: list[tuple[ToolCall, ToolContext]] = []

    async def approver(call: ToolCall, ctx: ToolContext) -> Approval:
        seen.append((call, ctx))
        return Approval(True)

    hooks = RecordingHooks()
    executor = ToolExecutor(ToolRegistry([refund]), approver=approver, hooks=hooks)
    [result] = await executor.execute([refund_call()], session_id="s1", turn_id="t1")
    assert result.status == "ok" and RAN == [{"order_id": "A1", "amount": 20.0}]
    call, ctx = seen[0]
    # Parsed and default-filled, as a plain dict (the model sent a JSON string without card).
    assert call.arguments == {"order_id": "A1", "amount": 20.0, "card": "none"}
    assert ctx.call_id == "c1" and ctx.session_id == "s1" and ctx.turn_id == "t1"
    assert tuple(ctx.sensitive_fields) == ("card",) and not ctx.abort_signal.aborted
    assert hooks.of(ToolEndEvent)[0].approval == "approved"


async def test_a_denial_reaches_the_model_with_its_reason() -> None:
    async def approver(call: ToolCall, ctx: ToolContext) -> Approval:
        return Approval(False, "the customer changed their mind")

    hooks = RecordingHooks()
    executor = ToolExecutor(ToolRegistry([refund]), approver=approver, hooks=hooks)
    [result] = await executor.execute([refund_call()])
    assert result.status == "denied" and RAN == [] and result.attempts == 0
    content = json.loads(result.to_content())
    assert content == {
        "error": "the call of 'refund' was not approved, so it did not run (the customer "
        "changed their mind). Tell the user it was not done; do not call it again unless they "
        "ask",
        "status": "denied",
    }
    end = hooks.of(ToolEndEvent)[0]
    assert end.approval == "denied" and not end.started


async def test_a_bool_answer_works_and_an_unspeakable_reason_is_left_out() -> None:
    answers = iter([True, False, Approval(False, "line one\nline two"), "yes"])

    async def approver(call: ToolCall, ctx: ToolContext) -> Any:
        return next(answers)

    executor = ToolExecutor(ToolRegistry([refund]), approver=approver)
    results = await executor.execute(
        [refund_call("a"), refund_call("b", 21), refund_call("c", 22), refund_call("d", 23)]
    )
    assert [r.status for r in results] == ["ok", "denied", "denied", "denied"]
    assert results[2].error == (
        "the call of 'refund' was not approved, so it did not run. Tell the user it was not "
        "done; do not call it again unless they ask"
    )


async def test_no_answer_in_time_is_a_denial_and_the_approver_is_told() -> None:
    signals: list[Any] = []

    async def approver(call: ToolCall, ctx: ToolContext) -> bool:
        signals.append(ctx.abort_signal)
        await anyio.sleep(10)
        return True

    executor = ToolExecutor(ToolRegistry([refund]), approver=approver, approval_timeout=0.05)
    [result] = await executor.execute([refund_call()])
    assert result.status == "denied" and "no approval in time" in (result.error or "")
    assert signals[0].aborted and RAN == []


async def test_the_approval_wait_does_not_eat_the_tool_timeout() -> None:
    async def approver(call: ToolCall, ctx: ToolContext) -> bool:
        await anyio.sleep(0.15)
        return True

    executor = ToolExecutor(ToolRegistry([refund]), approver=approver, timeout=0.1)
    [result] = await executor.execute([refund_call()])
    assert result.status == "ok"


async def test_an_abort_while_waiting_ends_aborted() -> None:
    async def approver(call: ToolCall, ctx: ToolContext) -> bool:
        await anyio.sleep(10)
        return True

    executor = ToolExecutor(ToolRegistry([refund]), approver=approver, approval_timeout=None)
    controller = AbortController()

    async def abort() -> None:
        await anyio.sleep(0.03)
        controller.abort("barge-in")

    async with anyio.create_task_group() as group:
        group.start_soon(abort)
        [result] = await executor.execute([refund_call()], abort_signal=controller.signal)
    assert result.status == "aborted" and RAN == []


async def test_a_raising_approver_denies(caplog: pytest.LogCaptureFixture) -> None:
    async def approver(call: ToolCall, ctx: ToolContext) -> bool:
        raise RuntimeError("approval service password=hunter2 unreachable")

    executor = ToolExecutor(ToolRegistry([refund]), approver=approver)
    with caplog.at_level(logging.ERROR):
        [result] = await executor.execute([refund_call()])
    assert result.status == "denied" and result.error is not None
    assert "(approval failed)" in result.error and "hunter2" not in result.error
    assert "the approver raised" in caplog.text


async def test_a_per_call_predicate_decides_which_calls_need_approval() -> None:
    asked: list[float] = []

    async def approver(call: ToolCall, ctx: ToolContext) -> bool:
        asked.append(call.arguments["amount"])  # type: ignore[index]
        return False

    executor = ToolExecutor(ToolRegistry([transfer]), approver=approver)
    small, large = await executor.execute(
        [ToolCall("s", "transfer", {"amount": 5}), ToolCall("l", "transfer", {"amount": 500})]
    )
    assert small.status == "ok" and large.status == "denied" and asked == [500.0]


async def test_a_raising_predicate_denies() -> None:
    @tool(needs_approval=lambda call: call.arguments["missing"])
    async def pay(amount: float) -> str:
        """Pay."""
        return "paid"

    executor = ToolExecutor(ToolRegistry([pay]), approver=approve_in_context)
    [result] = await executor.execute([ToolCall("c", "pay", {"amount": 1})])
    assert result.status == "denied" and result.error is not None
    assert "(approval failed)" in result.error


async def test_a_tool_needing_approval_without_an_approver_is_refused_at_build() -> None:
    with pytest.raises(
        ValueError, match="'refund' needs approval but the executor has no approver"
    ):
        ToolExecutor(ToolRegistry([refund]))


async def test_a_tool_registered_later_without_an_approver_is_denied() -> None:
    registry = ToolRegistry()
    executor = ToolExecutor(registry)
    registry.register(refund)
    [result] = await executor.execute([refund_call()])
    assert result.status == "denied" and RAN == []
    assert "(no approver is configured)" in (result.error or "")


async def test_approve_in_context_asks_the_enclosing_block_or_denies() -> None:
    async def yes(call: ToolCall, ctx: ToolContext) -> bool:
        return True

    executor = ToolExecutor(ToolRegistry([refund]), approver=approve_in_context)
    [outside] = await executor.execute([refund_call("a")])
    with approvals(yes):
        [inside] = await executor.execute([refund_call("b")])
    assert outside.status == "denied" and "no one is there to approve it" in (outside.error or "")
    assert inside.status == "ok"


async def test_an_approver_that_stops_at_the_abort_leaves_the_call_aborted_not_denied() -> None:
    # Regression: an approver waiting on ctx.abort_signal returns a "no" as the batch aborts;
    # the call was cut by the abort, so it is `aborted`, as with any other approver.
    async def approver(call: ToolCall, ctx: ToolContext) -> Approval:
        with ctx.abort_signal.cancel_scope():
            await anyio.sleep(10)
        return Approval(False, "stopped")

    executor = ToolExecutor(ToolRegistry([refund]), approver=approver)
    controller = AbortController()

    async def abort() -> None:
        await anyio.sleep(0.03)
        controller.abort("barge-in")

    async with anyio.create_task_group() as group:
        group.start_soon(abort)
        [result] = await executor.execute([refund_call()], abort_signal=controller.signal)
    assert result.status == "aborted" and RAN == []


async def test_a_plain_function_may_approve() -> None:
    def rule(call: ToolCall, ctx: ToolContext) -> Approval:
        return Approval(call.arguments["amount"] < 50, "over the limit")  # type: ignore[index]

    executor = ToolExecutor(ToolRegistry([refund]), approver=rule)
    small, large = await executor.execute([refund_call("a", 20), refund_call("b", 80)])
    assert small.status == "ok" and large.status == "denied"
    assert "(over the limit)" in (large.error or "")
