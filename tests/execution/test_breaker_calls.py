"""`ToolDefinition.breaker` through the executor: N consecutive failed calls open it, calls
then end `unavailable` at once without running, one half-open trial after `reset_after`
decides; state changes reach `on_breaker_change`; `breaker_state` reads it."""

from __future__ import annotations

import json

import anyio
import pytest

from llmrtc import CircuitBreaker, RetryPolicy, ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.abort import AbortController
from llmrtc.telemetry.events import BreakerChangeEvent, ToolEndEvent
from llmrtc.testing import RecordingHooks

pytestmark = pytest.mark.anyio


class Backend:
    def __init__(self) -> None:
        self.up = False
        self.runs = 0
        self.hang = False


def crm_tool(backend: Backend, **options: object) -> object:
    @tool(breaker=CircuitBreaker(failures=2, reset_after=0.1), **options)  # type: ignore[arg-type]
    async def crm_lookup(customer: str) -> str:
        """Look a customer up."""
        backend.runs += 1
        if backend.hang:
            await anyio.sleep(10)
        if not backend.up:
            raise ConnectionError("crm down")
        return f"customer {customer}"

    return crm_lookup


def lookup(call_id: str) -> ToolCall:
    return ToolCall(call_id, "crm_lookup", {"customer": "ada"})


async def test_it_opens_refuses_then_one_trial_closes_it() -> None:
    backend = Backend()
    hooks = RecordingHooks()
    executor = ToolExecutor(ToolRegistry([crm_tool(backend)]), hooks=hooks)
    assert executor.breaker_state("crm_lookup") == "closed"
    for index in range(2):
        [failed] = await executor.execute([lookup(f"f{index}")], session_id="s")
        assert failed.status == "error"
    assert executor.breaker_state("crm_lookup") == "open"
    [refused] = await executor.execute([lookup("r1")])
    assert refused.status == "unavailable" and refused.attempts == 0 and backend.runs == 2
    content = json.loads(refused.to_content())
    assert content["status"] == "unavailable" and "temporarily unavailable" in content["error"]
    await anyio.sleep(0.12)
    assert executor.breaker_state("crm_lookup") == "half_open"
    backend.up = True
    [trial] = await executor.execute([lookup("t1")])
    assert trial.status == "ok" and executor.breaker_state("crm_lookup") == "closed"
    changes = [(e.old_state, e.new_state, e.call_id) for e in hooks.of(BreakerChangeEvent)]
    assert changes == [
        ("closed", "open", "f1"),
        ("open", "half_open", "t1"),
        ("half_open", "closed", "t1"),
    ]
    assert hooks.of(BreakerChangeEvent)[0].failures == 2
    assert hooks.of(BreakerChangeEvent)[0].reset_after == 0.1
    assert hooks.of(ToolEndEvent, call_id="r1")[0].status == "unavailable"


async def test_a_failed_trial_opens_it_again_and_only_one_trial_runs() -> None:
    backend = Backend()
    executor = ToolExecutor(ToolRegistry([crm_tool(backend, timeout=0.05)]))
    for index in range(2):
        await executor.execute([lookup(f"f{index}")])
    await anyio.sleep(0.12)
    backend.hang = True
    results = await executor.execute([lookup("t1"), lookup("t2"), lookup("t3")])
    # t1 is the one trial (it times out); the others are refused while it runs.
    assert [r.status for r in results] == ["timeout", "unavailable", "unavailable"]
    assert backend.runs == 3 and executor.breaker_state("crm_lookup") == "open"


async def test_invalid_arguments_and_aborts_do_not_count() -> None:
    backend = Backend()
    executor = ToolExecutor(ToolRegistry([crm_tool(backend)]))
    await executor.execute([lookup("f1")])
    for index in range(3):
        [bad] = await executor.execute([ToolCall(f"i{index}", "crm_lookup", {"customer": 3})])
        assert bad.status == "invalid_arguments"
    backend.hang = True
    controller = AbortController()

    async def abort() -> None:
        await anyio.sleep(0.02)
        controller.abort("barge-in")

    async with anyio.create_task_group() as group:
        group.start_soon(abort)
        [aborted] = await executor.execute([lookup("a1")], abort_signal=controller.signal)
    assert aborted.status == "aborted"
    assert executor.breaker_state("crm_lookup") == "closed"  # still one failure counted


async def test_timeouts_count_and_retries_make_one_call() -> None:
    backend = Backend()
    executor = ToolExecutor(
        ToolRegistry([crm_tool(backend, retry=RetryPolicy(max_retries=2, base_delay=0.0))])
    )
    [first] = await executor.execute([lookup("f1")])
    assert first.attempts == 3 and executor.breaker_state("crm_lookup") == "closed"
    backend.hang = True
    timed = ToolExecutor(ToolRegistry([crm_tool(backend, timeout=0.03)]))
    for index in range(2):
        [result] = await timed.execute([lookup(f"t{index}")])
        assert result.status == "timeout"
    assert timed.breaker_state("crm_lookup") == "open"


async def test_an_aborted_trial_frees_the_trial_for_the_next_call() -> None:
    backend = Backend()
    executor = ToolExecutor(ToolRegistry([crm_tool(backend)]))
    for index in range(2):
        await executor.execute([lookup(f"f{index}")])
    await anyio.sleep(0.12)
    backend.hang = True
    controller = AbortController()

    async def abort() -> None:
        await anyio.sleep(0.02)
        controller.abort("barge-in")

    async with anyio.create_task_group() as group:
        group.start_soon(abort)
        [trial] = await executor.execute([lookup("t1")], abort_signal=controller.signal)
    assert trial.status == "aborted" and executor.breaker_state("crm_lookup") == "half_open"
    backend.hang, backend.up = False, True
    [next_trial] = await executor.execute([lookup("t2")])
    assert next_trial.status == "ok" and executor.breaker_state("crm_lookup") == "closed"


async def test_breakers_are_per_tool_and_per_executor() -> None:
    backend = Backend()
    crm = crm_tool(backend)
    one, two = ToolExecutor(ToolRegistry([crm])), ToolExecutor(ToolRegistry([crm]))
    for index in range(2):
        await one.execute([lookup(f"f{index}")])
    assert one.breaker_state("crm_lookup") == "open"
    assert two.breaker_state("crm_lookup") == "closed"
    assert one.breaker_state("no_such_tool") == "closed"


async def test_a_late_failure_of_an_older_call_does_not_undo_a_successful_trial() -> None:
    # Review: A (admitted while closed) runs long; B fails and opens the breaker; C is the
    # trial and succeeds; A then fails. The breaker must stay closed after C.
    gate = {"A": anyio.Event()}

    @tool(breaker=CircuitBreaker(failures=1, reset_after=0.05))
    async def crm(key: str) -> str:
        """CRM."""
        if key == "A":
            await gate["A"].wait()
            raise ConnectionError("late")
        if key == "B":
            raise ConnectionError("down")
        return key

    executor = ToolExecutor(ToolRegistry([crm]))
    results: dict[str, str] = {}

    async def run(key: str) -> None:
        [result] = await executor.execute([ToolCall(key, "crm", {"key": key})])
        results[key] = result.status

    async with anyio.create_task_group() as group:
        group.start_soon(run, "A")
        await anyio.sleep(0.01)
        await run("B")
        assert executor.breaker_state("crm") == "open"
        await anyio.sleep(0.06)
        await run("C")
        assert executor.breaker_state("crm") == "closed"
        gate["A"].set()
    assert results == {"A": "error", "B": "error", "C": "ok"}
    assert executor.breaker_state("crm") == "closed"


async def test_calls_that_time_out_waiting_for_a_resource_do_not_open_the_breaker() -> None:
    # Review: they never reached the backend; only calls that ran say something about it.
    @tool(resources=("crm",), breaker=CircuitBreaker(failures=2, reset_after=60), timeout=0.05)
    async def crm_read(key: str) -> str:
        """Read."""
        return key

    @tool(resources=("crm",))
    async def crm_sync() -> str:
        """Holds the CRM a while."""
        await anyio.sleep(0.3)
        return "synced"

    executor = ToolExecutor(ToolRegistry([crm_read, crm_sync]), resource_limits={"crm": 1})
    results = await executor.execute(
        [
            ToolCall("s", "crm_sync", {}),
            ToolCall("r1", "crm_read", {"key": "1"}),
            ToolCall("r2", "crm_read", {"key": "2"}),
        ]
    )
    assert [r.status for r in results] == ["ok", "timeout", "timeout"]
    assert executor.breaker_state("crm_read") == "closed"
