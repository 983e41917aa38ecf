"""Telemetry edge cases found in review: leaks, lost spans, masking bypasses, logging."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from typing import Any

import anyio
import pytest
from opentelemetry import metrics

from llmrtc import (
    CompositeHooks,
    Hooks,
    ToolCall,
    ToolContext,
    ToolEndEvent,
    ToolExecutor,
    ToolRegistry,
    tool,
)
from llmrtc.telemetry.events import (
    BargeInEvent,
    SessionEndEvent,
    SessionStartEvent,
    TTSEndEvent,
    TTSStartEvent,
    TurnStartEvent,
)
from llmrtc.testing import InMemoryTelemetry, abort_after

pytestmark = pytest.mark.anyio


@tool(timeout=0.2)
async def work(seconds: float = 0.0) -> str:
    """Work a while."""
    await anyio.sleep(seconds)
    return "done"


class SlowStart(Hooks):
    async def on_tool_start(self, event: Any) -> None:
        await anyio.sleep(0.3)


async def test_in_flight_returns_to_zero_when_an_announced_call_never_runs() -> None:
    telemetry = InMemoryTelemetry()
    executor = ToolExecutor(
        ToolRegistry([work]), hooks=CompositeHooks([telemetry.hooks, SlowStart()])
    )
    async with abort_after(0.05, "barge-in") as controller:
        results = await executor.execute(
            [ToolCall("a", "work"), ToolCall("b", "work")], abort_signal=controller.signal
        )
    assert [r.status for r in results] == ["aborted", "aborted"]
    assert all(r.duration_ms == 0 for r in results)  # they never ran
    assert {p.value for p in telemetry.points("llmrtc.tool.in_flight")} == {0}


async def test_start_hook_time_never_counts_against_a_shared_deadline() -> None:
    async def slow(call: ToolCall, ctx: ToolContext) -> None:
        await anyio.sleep(0.15)

    # A plain function returning a coroutine: not an `async def`, still awaited.
    executor = ToolExecutor(ToolRegistry([work]), on_tool_start=lambda c, x: slow(c, x))
    results = await executor.execute(
        [ToolCall("a", "work", {"seconds": 0.1}), ToolCall("b", "work", {"seconds": 0.1})]
    )
    assert [r.status for r in results] == ["ok", "ok"]  # 0.15 s hooks + 0.1 s work < 0.2 s each
    assert all(50 < r.duration_ms < 1000 for r in results)


async def test_end_hooks_of_parallel_calls_run_in_the_callers_task() -> None:
    tasks: list[int] = []

    class WhereAmI(Hooks):
        def on_tool_end(self, event: ToolEndEvent) -> None:
            tasks.append(anyio.get_current_task().id)

    executor = ToolExecutor(ToolRegistry([work]), hooks=WhereAmI())
    calls = [ToolCall(str(i), "work", {"seconds": 0.01 * i}) for i in range(4)]
    await executor.execute(calls)
    await executor.execute(calls, hooks=WhereAmI())  # per-batch hooks too (x2 calls each)
    assert set(tasks) == {anyio.get_current_task().id}
    assert len(tasks) == 12


async def test_execute_single_takes_per_batch_hooks() -> None:
    ended: list[str] = []

    class Record(Hooks):
        def on_tool_end(self, event: ToolEndEvent) -> None:
            ended.append(event.status)

    await ToolExecutor(ToolRegistry([work])).execute_single(ToolCall("a", "work"), hooks=Record())
    assert ended == ["ok"]


@tool(sensitive_fields=["card", "cvv"])
async def charge(card: str, cvv: str, amount: float) -> dict[str, Any]:
    """Charge a card."""
    return {card: "visa", "text": f"charged with cvv {cvv}", "amount": amount}


async def test_masking_holds_for_malformed_arguments_short_values_and_keys() -> None:
    telemetry = InMemoryTelemetry(capture_content=True)
    executor = ToolExecutor(ToolRegistry([charge]), hooks=telemetry.hooks)
    card = "5500005555555559"
    await executor.execute(
        [
            ToolCall("ok", "charge", {"card": card, "cvv": "987", "amount": 5}),
            ToolCall("bad", "charge", f'{{"card": "{card}", "cvv": "123", "amount": '),
            ToolCall("typed", "charge", {"card": card, "cvv": 123, "amount": 1}),
        ]
    )
    spans = {
        s.attributes["gen_ai.tool.call.id"]: s for s in telemetry.exporter.get_finished_spans()
    }  # type: ignore[index]
    everything = json.dumps(
        [[dict(s.attributes or {}), s.status.description] for s in spans.values()]
    )
    assert card not in everything
    assert "987" not in everything
    assert json.loads(str(spans["ok"].attributes["gen_ai.tool.call.result"])) == {  # type: ignore[index]
        "***": "visa",
        "text": "charged with cvv ***",
        "amount": 5,
    }
    assert '"cvv": "***"' in str(spans["bad"].attributes["gen_ai.tool.call.arguments"])  # type: ignore[index]
    assert "cvv: *** is not of type 'string'" in (spans["typed"].status.description or "")


async def test_error_type_is_the_fully_qualified_class_name() -> None:
    class PaymentDeclined(Exception):
        pass

    @tool
    async def pay() -> None:
        """Pay."""
        raise PaymentDeclined("no")

    telemetry = InMemoryTelemetry()
    await ToolExecutor(ToolRegistry([pay]), hooks=telemetry.hooks).execute([ToolCall("p", "pay")])
    (span,) = telemetry.exporter.get_finished_spans()
    assert span.attributes["error.type"] == f"{__name__}.{PaymentDeclined.__qualname__}"  # type: ignore[index]


async def test_hooks_sharing_a_meter_count_together_and_buckets_suit_seconds() -> None:
    telemetry = InMemoryTelemetry()
    second = telemetry.new_hooks()
    registry = ToolRegistry([work])
    await ToolExecutor(registry, hooks=telemetry.hooks).execute([ToolCall("a", "work")])
    await ToolExecutor(registry, hooks=second).execute(
        [ToolCall("b", "work"), ToolCall("c", "work")]
    )
    (calls,) = telemetry.points("llmrtc.tool.calls")
    assert calls.value == 3
    (duration,) = telemetry.points("llmrtc.tool.call.duration")
    assert duration.count == 3
    assert duration.explicit_bounds[0] < 0.01  # millisecond resolution, not the SDK's 0, 5, 10…


def test_session_end_closes_what_it_left_open_and_tts_chunks_overlap() -> None:
    telemetry = InMemoryTelemetry()
    hooks = telemetry.hooks
    hooks.on_session_start(SessionStartEvent(session_id="s"))
    hooks.on_turn_start(TurnStartEvent(turn_id="t", session_id="s"))
    hooks.on_tts_start(TTSStartEvent(session_id="s", turn_id="t"))
    hooks.on_tts_start(TTSStartEvent(session_id="s", turn_id="t"))
    hooks.on_tts_end(TTSEndEvent(session_id="s", turn_id="t"))
    hooks.on_session_end(SessionEndEvent(session_id="s"))
    spans = telemetry.exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == [
        "llmrtc.session",
        "llmrtc.tts",
        "llmrtc.tts",
        "llmrtc.turn",
    ]
    incomplete = [s.name for s in spans if (s.attributes or {}).get("llmrtc.incomplete")]
    assert sorted(incomplete) == ["llmrtc.tts", "llmrtc.turn"]
    assert hooks._spans == {} and hooks._tts == {}


async def test_composite_methods_fan_out_when_called_directly() -> None:
    seen: list[str] = []

    class Listener(Hooks):
        def on_barge_in(self, event: BargeInEvent) -> None:
            seen.append("barge-in")

    await CompositeHooks([Listener(), Listener()]).on_barge_in(BargeInEvent())  # type: ignore[misc]
    assert seen == ["barge-in", "barge-in"]


async def test_a_hook_that_raises_cancellation_changes_nothing(caplog: Any) -> None:
    class Confused(Hooks):
        async def on_tool_end(self, event: ToolEndEvent) -> None:
            raise anyio.get_cancelled_exc_class()()

    executor = ToolExecutor(ToolRegistry([work]), hooks=Confused())
    with caplog.at_level(logging.WARNING, logger="llmrtc"):
        result = await executor.execute_single(ToolCall("a", "work"))
    assert result.status == "ok"
    assert "raised a cancellation" in caplog.text


def test_nothing_global_is_installed() -> None:
    record_factory = logging.getLogRecordFactory()
    meter_provider = metrics.get_meter_provider()
    InMemoryTelemetry()
    assert logging.getLogRecordFactory() is record_factory
    assert metrics.get_meter_provider() is meter_provider


def test_llmrtc_warnings_still_reach_stderr_when_logging_is_not_configured() -> None:
    code = (
        "import logging, llmrtc\n"
        "logging.getLogger('llmrtc.some.module').warning('visible warning')\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "visible warning" in completed.stderr


@pytest.mark.usefixtures("log_correlation")
def test_ids_given_in_extra_are_kept(caplog: Any) -> None:
    with caplog.at_level(logging.INFO, logger="llmrtc"):
        logging.getLogger("llmrtc.tests").info("hello", extra={"session_id": "mine"})
    record = next(r for r in caplog.records if r.getMessage() == "hello")
    assert record.session_id == "mine"  # type: ignore[attr-defined]
    assert record.call_id is None  # type: ignore[attr-defined]
