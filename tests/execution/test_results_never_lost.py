"""Edge cases found in review: each would have lost a result, misreported a status, or leaked."""

from __future__ import annotations

import functools
import json
import math
import threading
import time
from typing import Any, Literal

import anyio
import pytest
from pydantic import BaseModel, field_validator

from llmrtc import (
    AbortController,
    ToolCall,
    ToolCallResult,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolRegistry,
    define_tool,
    tool,
    validate_tool_arguments,
)

pytestmark = pytest.mark.anyio


async def test_any_exception_while_building_arguments_is_invalid_arguments() -> None:
    class Picky(BaseModel):
        key: str

        @field_validator("key")
        @classmethod
        def known(cls, value: str) -> str:
            return {"a": "alpha"}[value]  # KeyError for anything else

    picky = define_tool(ToolDefinition("picky", parameters=Picky), lambda args, ctx: args.key)
    ok = define_tool(ToolDefinition("ok"), lambda args, ctx: "fine")
    executor = ToolExecutor(ToolRegistry([picky, ok]))
    results = await executor.execute(
        [
            ToolCall("1", "ok"),
            ToolCall("2", "picky", {"key": "zzz"}),
            ToolCall("3", "picky", "[" * 100_000),
            ToolCall("4", "picky", {"key": "a"}),
        ]
    )
    assert [r.status for r in results] == ["ok", "invalid_arguments", "invalid_arguments", "ok"]
    assert "internal error" in (results[1].error or "") and "KeyError" not in (
        results[1].error or ""
    )
    assert "not valid JSON" in (results[2].error or "")
    assert results[3].result == "alpha"


async def test_union_members_get_their_own_defaults() -> None:
    class Cat(BaseModel):
        kind: Literal["cat"]
        sound: str = "meow"

    class Dog(BaseModel):
        kind: Literal["dog"]
        sound: str = "woof"

    @tool
    def speak(pet: Cat | Dog) -> str:
        """Speak."""
        return f"{pet.kind} says {pet.sound}"

    result = await ToolExecutor(ToolRegistry([speak])).execute_single(
        ToolCall("1", "speak", {"pet": {"kind": "dog"}})
    )
    assert result.result == "dog says woof"

    raw = ToolDefinition(
        "raw",
        parameters={
            "type": "object",
            "properties": {
                "pet": {
                    "oneOf": [
                        {
                            "type": "object",
                            "properties": {"kind": {"const": "cat"}, "lives": {"default": 9}},
                            "additionalProperties": False,
                        },
                        {
                            "type": "object",
                            "properties": {"kind": {"const": "dog"}},
                            "additionalProperties": False,
                        },
                    ]
                }
            },
        },
    )
    assert validate_tool_arguments(raw, {"pet": {"kind": "dog"}}).valid  # no cat default forced


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_abandoned_threads_do_not_starve_later_sync_calls() -> None:
    release = threading.Event()

    def hang(args: dict[str, Any], ctx: ToolContext) -> None:
        release.wait(5)

    hang_tool = define_tool(ToolDefinition("hang", timeout=0.05), hang)
    quick = define_tool(ToolDefinition("quick", timeout=2), lambda args, ctx: "quick")
    executor = ToolExecutor(ToolRegistry([hang_tool, quick]), max_concurrency=2)
    try:
        hung = await executor.execute([ToolCall("1", "hang"), ToolCall("2", "hang")])
        assert [r.status for r in hung] == ["timeout", "timeout"]
        after = await executor.execute_single(ToolCall("3", "quick"))
        assert after.status == "ok", after.error  # two threads abandoned, two still free
    finally:
        release.set()


async def test_live_worker_threads_are_bounded_with_a_clear_error() -> None:
    release = threading.Event()

    def hang(args: dict[str, Any], ctx: ToolContext) -> None:
        release.wait(5)

    executor = ToolExecutor(
        ToolRegistry([define_tool(ToolDefinition("hang", timeout=0.05), hang)]),
        max_concurrency=1,
    )
    try:
        statuses = [(await executor.execute_single(ToolCall(str(i), "hang"))) for i in range(3)]
    finally:
        release.set()
    assert [r.status for r in statuses] == ["timeout", "timeout", "error"]
    assert "worker threads for sync tools are busy" in (statuses[2].error or "")


async def test_caller_cancellation_sets_the_signal_a_sync_handler_polls() -> None:
    outcome: list[str] = []

    def cooperative(args: dict[str, Any], ctx: ToolContext) -> None:
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            if ctx.abort_signal.aborted:
                outcome.append(f"stopped: {ctx.abort_signal.reason}")
                return
            time.sleep(0.005)
        outcome.append("ran to completion")

    executor = ToolExecutor(ToolRegistry([define_tool(ToolDefinition("coop"), cooperative)]))
    with anyio.move_on_after(0.1):
        await executor.execute([ToolCall("1", "coop")])
    with anyio.fail_after(3):
        while not outcome:
            await anyio.sleep(0.01)
    assert outcome == ["stopped: execution cancelled"]


@pytest.mark.parametrize("parallel", [False, True])
async def test_a_timed_out_handler_sees_its_signal_set_in_its_finally(parallel: bool) -> None:
    seen: list[tuple[bool, object]] = []

    async def slow(args: dict[str, Any], ctx: ToolContext) -> None:
        try:
            await anyio.sleep(5)
        finally:
            seen.append((ctx.abort_signal.aborted, ctx.abort_signal.reason))

    executor = ToolExecutor(ToolRegistry([define_tool(ToolDefinition("slow"), slow)]), timeout=0.05)
    calls = [ToolCall(str(i), "slow") for i in range(2 if parallel else 1)]
    results = await executor.execute(calls)
    assert {r.status for r in results} == {"timeout"}
    assert seen == [(True, "timeout")] * len(calls)


@pytest.mark.parametrize("parallel", [False, True])
async def test_cleanup_that_raises_during_a_timeout_is_still_a_timeout(parallel: bool) -> None:
    async def messy(args: dict[str, Any], ctx: ToolContext) -> None:
        try:
            await anyio.sleep(5)
        finally:
            raise RuntimeError("connection closed while cleaning up")

    executor = ToolExecutor(
        ToolRegistry([define_tool(ToolDefinition("messy"), messy)]), timeout=0.05
    )
    calls = [ToolCall(str(i), "messy") for i in range(2 if parallel else 1)]
    assert {r.status for r in await executor.execute(calls)} == {"timeout"}

    controller = AbortController()
    slow_executor = ToolExecutor(ToolRegistry([define_tool(ToolDefinition("messy"), messy)]))
    async with anyio.create_task_group() as group:
        group.start_soon(_abort_soon, controller)
        results = await slow_executor.execute(calls, abort_signal=controller.signal)
    assert {r.status for r in results} == {"aborted"}


async def _abort_soon(controller: AbortController) -> None:
    await anyio.sleep(0.05)
    controller.abort("barge-in")


async def test_abort_during_an_async_start_hook_means_the_handler_never_runs() -> None:
    ran: list[str] = []

    async def handler(args: dict[str, Any], ctx: ToolContext) -> None:
        ran.append("side effect")

    async def slow_start(call: ToolCall, ctx: ToolContext) -> None:
        await anyio.sleep(0.3)

    executor = ToolExecutor(
        ToolRegistry([define_tool(ToolDefinition("act"), handler)]), on_tool_start=slow_start
    )
    controller = AbortController()
    started = time.monotonic()
    async with anyio.create_task_group() as group:
        group.start_soon(_abort_soon, controller)
        result = await executor.execute_single(ToolCall("1", "act"), abort_signal=controller.signal)
    assert result.status == "aborted"
    assert ran == []
    assert time.monotonic() - started < 0.25  # the start hook did not delay the abort


async def test_wrapped_async_functions_and_coroutine_returning_handlers_are_awaited() -> None:
    def logged(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    @tool
    @logged
    async def double(x: int) -> int:
        """Double."""
        await anyio.sleep(0)
        return x * 2

    async def later(args: dict[str, Any]) -> str:
        return "awaited"

    lazy = define_tool(ToolDefinition("lazy"), lambda args, ctx: later(args))
    results = await ToolExecutor(ToolRegistry([double, lazy])).execute(
        [ToolCall("1", "double", {"x": 4}), ToolCall("2", "lazy")]
    )
    assert [r.result for r in results] == [8, "awaited"]


def test_to_content_is_strict_json_and_never_raises() -> None:
    circular: list[Any] = []
    circular.append(circular)
    for value in (math.nan, math.inf, {"x": -math.inf}, circular, b"\xff\xfe"):
        content = ToolCallResult("c", "t", "ok", value).to_content()
        json.loads(content, parse_constant=lambda name: pytest.fail(f"non-strict {name}"))
    assert ToolCallResult("c", "t", "ok", math.nan).to_content() == "null"


def test_long_values_are_not_echoed_back_in_full() -> None:
    definition = ToolDefinition(
        "note", parameters={"type": "object", "properties": {"text": {"maxLength": 10}}}
    )
    result = validate_tool_arguments(definition, {"text": "A" * 100_000})
    assert not result.valid
    assert len(result.errors[0]) < 200
    assert result.errors[0].startswith("text: 'AAAA")


def test_methods_are_refused_inside_the_class_but_bound_methods_work() -> None:
    with pytest.raises(ValueError, match=r"tool\(instance\.method\)"):

        class Service:
            @tool
            def lookup(self, key: str) -> str:
                """Look up."""
                return key

    class Store:
        def __init__(self) -> None:
            self.data = {"a": 1}

        def get(self, key: str) -> int:
            """Get a value.

            Args:
                key: The key.
            """
            return self.data[key]

    store_tool = tool(Store().get)
    schema = store_tool.definition.parameters
    assert isinstance(schema, dict)
    assert list(schema["properties"]) == ["key"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(model_config: int) -> None: ...", "reserved by pydantic"),
        ("def f(_private: int) -> None: ...", "cannot build an argument schema"),
    ],
)
def test_parameter_names_pydantic_cannot_take_are_clear_errors(source: str, message: str) -> None:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    with pytest.raises(ValueError, match=message):
        tool(namespace["f"])


def test_one_executor_cannot_run_in_two_event_loops_at_once() -> None:
    gate = threading.Event()

    async def wait_for_gate(args: dict[str, Any], ctx: ToolContext) -> None:
        await anyio.to_thread.run_sync(gate.wait, 5)

    executor = ToolExecutor(ToolRegistry([define_tool(ToolDefinition("w"), wait_for_gate)]))
    errors: list[BaseException] = []

    def first_loop() -> None:
        anyio.run(executor.execute_single, ToolCall("1", "w"))

    thread = threading.Thread(target=first_loop)
    thread.start()
    try:
        time.sleep(0.2)
        try:
            anyio.run(executor.execute_single, ToolCall("2", "w"))
        except RuntimeError as exc:
            errors.append(exc)
    finally:
        gate.set()
        thread.join(5)
    assert errors and "another event loop thread" in str(errors[0])


async def test_bool_timeout_is_rejected() -> None:
    with pytest.raises(ValueError, match="timeout"):
        ToolExecutor(ToolRegistry(), timeout=True)


async def test_abort_message_without_a_reason_is_clean() -> None:
    controller = AbortController()
    controller.abort()
    result = await ToolExecutor(ToolRegistry()).execute_single(
        ToolCall("1", "x"), abort_signal=controller.signal
    )
    assert result.error == "tool call 'x' aborted"


async def test_a_handler_that_returns_because_its_signal_was_set_is_not_ok() -> None:
    def cooperative(args: dict[str, Any], ctx: ToolContext) -> str:
        while not ctx.abort_signal.aborted:
            time.sleep(0.002)
        return "partial"

    executor = ToolExecutor(
        ToolRegistry([define_tool(ToolDefinition("coop", timeout=0.05), cooperative)])
    )
    for _ in range(5):  # the thread often returns before the loop processes the deadline
        result = await executor.execute_single(ToolCall("1", "coop"))
        assert result.status == "timeout" and result.result is None
    patient = ToolExecutor(ToolRegistry([define_tool(ToolDefinition("coop"), cooperative)]))
    controller = AbortController()
    threading.Timer(0.05, controller.abort, args=("barge-in",)).start()
    result = await patient.execute_single(ToolCall("2", "coop"), abort_signal=controller.signal)
    assert result.status == "aborted" and result.result is None


async def test_sync_handlers_never_borrow_from_anyios_shared_thread_pool() -> None:
    borrowed: list[float] = []

    def blocking(args: dict[str, Any], ctx: ToolContext) -> str:
        time.sleep(0.05)
        return "done"

    shared = anyio.to_thread.current_default_thread_limiter()
    executor = ToolExecutor(ToolRegistry([define_tool(ToolDefinition("b"), blocking)]))
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            for _ in range(5):
                borrowed.append(shared.borrowed_tokens)
                await anyio.sleep(0.01)

        group.start_soon(watch)
        results = await executor.execute([ToolCall(str(i), "b") for i in range(3)])
    assert [r.status for r in results] == ["ok"] * 3
    assert set(borrowed) == {0}


async def test_validators_are_compiled_once_per_tool(monkeypatch: Any) -> None:
    import jsonschema

    from llmrtc.tools import definition as tool_definition

    definition = ToolDefinition(
        "v", parameters={"type": "object", "properties": {"n": {"type": "integer"}}}
    )
    validator = definition._validator  # type: ignore[attr-defined]
    executor = ToolExecutor(ToolRegistry([define_tool(definition, lambda a, c: a["n"])]))
    compiled: list[str] = []
    monkeypatch.setattr(
        jsonschema.Draft202012Validator,
        "check_schema",
        classmethod(lambda cls, schema, **kw: compiled.append("meta-check")),
    )
    # Where a definition compiles its schema: a call must never get there again.
    monkeypatch.setattr(
        tool_definition, "compile_validator", lambda schema: compiled.append("compile")
    )
    for n in range(5):
        assert (await executor.execute_single(ToolCall(str(n), "v", {"n": n}))).result == n
    bad = await executor.execute_single(ToolCall("x", "v", {"n": "nope"}))
    assert bad.status == "invalid_arguments"  # still validated, with the same validator
    assert compiled == []
    assert definition._validator is validator  # type: ignore[attr-defined]
