"""PlaybookOrchestrator as a ResumableHandler: a conversation with tool calls and a stage
transition, snapshot -> JSON -> restore on a new orchestrator from the same factory -> the
next turn runs in the right stage (prompt, tools, transitions, the tools' view of the
playbook) with the history; no initial stage announced again; bad states refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llmrtc import ToolCall, ToolContext, ToolRegistry, tool
from llmrtc.agent import ResumableHandler, TurnCompleted, TurnRunner
from llmrtc.llm import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from llmrtc.playbook import Playbook, PlaybookEngine, PlaybookOrchestrator, StageChanged
from llmrtc.telemetry.events import StageEnterEvent, TransitionEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import ScriptedLLM

pytestmark = pytest.mark.anyio

seen_stages: list[str] = []


@tool
async def lookup_customer(email: str, ctx: ToolContext) -> dict[str, Any]:
    """Find a customer by email.

    Args:
        email: The account email.
    """
    ctx.metadata["playbook"].update_context(customer="C-1")
    seen_stages.append(ctx.metadata["playbook"].stage_id)
    return {"customer": "C-1", "name": "Ada"}


@tool
async def refund(order: str, ctx: ToolContext) -> dict[str, Any]:
    """Refund an order.

    Args:
        order: The order number.
    """
    seen_stages.append(ctx.metadata["playbook"].stage_id)
    return {"refunded": order}


PLAYBOOK = Playbook.model_validate(
    {
        "id": "shop",
        "version": "2",
        "initial_stage": "identify",
        "global_system_prompt": "You work for a shop.",
        "stages": [
            {
                "id": "identify",
                "description": "Find the account",
                "system_prompt": "Find the caller's account.",
                "tools": ["lookup_customer"],
            },
            {
                "id": "billing",
                "description": "Charges and refunds",
                "system_prompt": "Refund double charges.",
                "tools": ["refund"],
            },
            {"id": "done", "system_prompt": "Say goodbye.", "terminal": True},
        ],
        "transitions": [
            {
                "id": "to-billing",
                "from_stage": "identify",
                "condition": {"type": "llm_decision", "description": "a billing problem"},
                "action": {"target_stage": "billing", "transition_message": "Note: billing."},
            },
            {
                "id": "refunded",
                "from_stage": "billing",
                "condition": {"type": "tool_call", "tool_name": "refund"},
                "action": {"target_stage": "done"},
            },
        ],
    }
)


class StageLog(Hooks):
    def __init__(self) -> None:
        self.entered: list[str] = []
        self.transitions: list[str] = []

    def on_stage_enter(self, event: StageEnterEvent) -> None:
        self.entered.append(event.stage_id)

    def on_transition(self, event: TransitionEvent) -> None:
        self.transitions.append(event.transition_id)


def factory(llm: ScriptedLLM, hooks: Hooks | None = None) -> PlaybookOrchestrator:
    return PlaybookOrchestrator(PLAYBOOK, llm, ToolRegistry([lookup_customer, refund]), hooks=hooks)


async def run(handler: PlaybookOrchestrator, text: str) -> list[Any]:
    events = [event async for event in handler.run_turn(text)]
    assert isinstance(events[-1], TurnCompleted)
    return events


def stage_moves(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.from_stage, e.to_stage) for e in events if isinstance(e, StageChanged)]


async def test_a_restored_orchestrator_goes_on_in_the_stage_with_the_history() -> None:
    seen_stages.clear()
    first = factory(
        ScriptedLLM(
            [
                [ToolCall("c1", "lookup_customer", {"email": "ada@example.com"})],
                [ToolCall("c2", "playbook_transition", {"target_stage": "billing"})],
                "Found you, Ada. Which order?",
            ]
        )
    )
    assert isinstance(first, ResumableHandler)
    events = await run(first, "I was charged twice, ada@example.com")
    assert stage_moves(events) == [("identify", "billing")]
    state = json.loads(json.dumps(first.snapshot()))
    assert state["playbook"]["current_stage"] == "billing"
    assert state["playbook"]["context"] == {"customer": "C-1"}

    hooks = StageLog()
    llm = ScriptedLLM([[ToolCall("c3", "refund", {"order": "A1"})], "Refunded. Goodbye!"])
    second = factory(llm, hooks)
    second.restore(state)
    assert second.engine.current_stage.id == "billing"
    assert second.snapshot() == state  # nothing changed by restoring
    events = await run(second, "Order A1 please")

    request = llm.requests[0]
    system = request.messages[0]
    assert isinstance(system, SystemMessage) and "Refund double charges." in system.content
    assert [t.name for t in request.tools] == ["refund"]
    sent = request.messages[1:]
    assert sent[0] == UserMessage("I was charged twice, ada@example.com")
    assert [type(m) for m in sent] == [
        UserMessage,
        AssistantMessage,  # lookup_customer
        ToolMessage,
        AssistantMessage,  # playbook_transition
        ToolMessage,
        SystemMessage,  # the transition message
        AssistantMessage,
        UserMessage,
    ]
    assert sent[5] == SystemMessage("Note: billing.")
    assert sent[-1] == UserMessage("Order A1 please")
    # the tool saw the restored engine (the new stage), and its transition fired
    assert seen_stages == ["identify", "billing"]
    assert stage_moves(events) == [("billing", "done")]
    assert second.conversation_ended
    assert second.engine.context["customer"] == "C-1"
    assert [t["transition_id"] for t in second.engine.transitions] == ["to-billing", "refunded"]
    # the initial stage was not announced again: only the stage entered now
    assert hooks.entered == ["done"] and hooks.transitions == ["refunded"]
    llm.assert_consumed()


async def test_the_stage_timer_and_turn_count_come_back() -> None:
    first = factory(ScriptedLLM(["Hello."]))
    await run(first, "Hi")
    state = json.loads(json.dumps(first.snapshot()))
    assert state["playbook"]["turns_in_stage"] == 1
    second = factory(ScriptedLLM([]))
    second.restore(state)
    assert second.engine.turns_in_stage == 1
    assert second.history.messages == (UserMessage("Hi"), AssistantMessage("Hello."))


def state_of(**playbook: Any) -> dict[str, Any]:
    snapshot = factory(ScriptedLLM([])).snapshot()
    snapshot["playbook"].update(playbook)
    return snapshot


BROKEN = [
    (lambda: state_of(playbook_id="support"), "of playbook 'support', not 'shop'"),
    (lambda: state_of(current_stage="nowhere"), "no stage 'nowhere'"),
    (lambda: state_of(turns_in_stage="many"), "cannot be restored"),
    (lambda: {"history": {"messages": []}, "playbook": None}, "no playbook snapshot"),
    (lambda: {"history": None}, "no playbook snapshot"),
    (lambda: {**state_of(), "history": {"messages": [1]}}, "malformed message"),
    (lambda: [], "must be a mapping"),
]


@pytest.mark.parametrize(("make", "message"), BROKEN)
async def test_a_bad_state_is_refused_and_the_orchestrator_stays_fresh(
    make: Any, message: str
) -> None:
    broken = make()
    hooks = StageLog()
    orchestrator = factory(ScriptedLLM(["Hello."]), hooks)
    with pytest.raises(ValueError, match="handler state") as caught:
        orchestrator.restore(broken)
    assert message in str(caught.value)
    assert orchestrator.engine.current_stage.id == "identify"
    await run(orchestrator, "Hi")
    assert hooks.entered == ["identify"]  # a fresh session announces its first stage


async def test_a_plain_runner_state_does_not_fit_an_orchestrator_nor_the_reverse() -> None:
    orchestrator = factory(ScriptedLLM([]))
    runner = TurnRunner(ScriptedLLM([]), orchestrator.executor, system_prompt="Hi")
    with pytest.raises(ValueError, match="no playbook snapshot"):
        orchestrator.restore(runner.snapshot())
    with pytest.raises(ValueError, match="playbook 'shop'"):
        runner.restore(orchestrator.snapshot())


async def test_restore_after_a_turn_is_a_programming_error() -> None:
    orchestrator = factory(ScriptedLLM(["Hello."]))
    saved = orchestrator.snapshot()
    await run(orchestrator, "Hi")
    with pytest.raises(RuntimeError, match="before the first turn"):
        orchestrator.restore(saved)


def test_engine_built_without_entering_enters_once_later() -> None:
    entered: list[str] = []
    book = _entry_book(entered)
    engine = PlaybookEngine(book, enter=False)
    assert entered == [] and not engine.entered
    assert engine.enter() == ()
    assert entered == ["a"] and engine.entered
    with pytest.raises(RuntimeError, match="already entered"):
        engine.enter()
    assert entered == ["a"]
    # a snapshot saved before entry restores to an engine that still has to enter
    early = PlaybookEngine.restore(book, PlaybookEngine(book, enter=False).snapshot())
    assert not early.entered


async def test_restored_factory_orchestrator_never_runs_the_initial_on_enter() -> None:
    entered: list[str] = []
    book = _entry_book(entered)
    first = PlaybookOrchestrator(book, ScriptedLLM(["Hello.", "Again."]), ToolRegistry())
    assert entered == []  # construction has no side effect
    async for _ in first.run_turn("hi"):
        pass
    assert entered == ["a"]  # a fresh session enters exactly once, at its first turn
    async for _ in first.run_turn("again"):
        pass
    assert entered == ["a"]
    saved = first.snapshot()
    entered.clear()
    resumed = PlaybookOrchestrator(book, ScriptedLLM(["Back."]), ToolRegistry())
    resumed.restore(saved)
    async for _ in resumed.run_turn("still there?"):
        pass
    assert entered == []


def _entry_book(entered: list[str]) -> Playbook:
    return Playbook.model_validate(
        {
            "id": "entry",
            "initial_stage": "a",
            "stages": [
                {"id": "a", "system_prompt": "A", "on_enter": lambda e: entered.append(e.stage_id)},
                {"id": "b", "system_prompt": "B", "terminal": True},
            ],
            "transitions": [],
        }
    )
