"""PlaybookOrchestrator with ScriptedLLM: stage prompts/tools/config per request, when transitions
fire (and how many model requests that costs), playbook_transition, timers, hooks, resuming, and
scripted conversations through the shipped playbooks."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from llmrtc import (
    AbortController,
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolRegistry,
    define_tool,
    tool,
)
from llmrtc.agent import ConversationHistory, TextDelta, ToolCallFinished, TurnCompleted
from llmrtc.llm import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.types import LLMRequest
from llmrtc.playbook import (
    Playbook,
    PlaybookEngine,
    PlaybookError,
    PlaybookOrchestrator,
    StageChanged,
    StageHookEvent,
    load_playbook,
    load_playbook_tools,
)
from llmrtc.telemetry.events import (
    ErrorEvent,
    StageEnterEvent,
    StageExitEvent,
    ToolEndEvent,
    TransitionEvent,
    TurnStartEvent,
)
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import ScriptedLLM, ScriptedResponse
from llmrtc.testing.scripted import check_chat_messages

pytestmark = pytest.mark.anyio

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"

# Tools of the hand-made playbooks ---------------------------------------------------------

log: list[str] = []


@tool
async def note(text: str, ctx: ToolContext) -> dict[str, Any]:
    """Take a note.

    Args:
        text: What to note.
    """
    await anyio.sleep(0.01)
    log.append(f"note {text}")
    return {"noted": text, "session": ctx.session_id}


@tool
async def finish(ok: bool = True) -> str:
    """Finish the task (fails when ok is false).

    Args:
        ok: Whether it works.
    """
    if not ok:
        raise RuntimeError("could not finish")
    log.append("finish")
    return "finished"


@tool
async def slow(seconds: float) -> str:
    """Sleep a while (no own timeout, no own policy).

    Args:
        seconds: How long.
    """
    log.append("slow start")
    await anyio.sleep(seconds)
    log.append("slow end")
    return "slept"


@tool
async def count(n: int) -> str:
    """Echo a number.

    Args:
        n: A number.
    """
    return f"got {n!r}"


async def _echo(args: dict[str, Any], ctx: ToolContext) -> str:
    return f"got {args['n']!r}"


echo = define_tool(
    ToolDefinition(
        "echo",
        "Echo an integer (a plain JSON Schema: only checked when validation is on).",
        {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    ),
    _echo,
)

REGISTRY = ToolRegistry([note, finish, slow, count, echo])


def call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, arguments)


def transition_call(call_id: str, target: str, reason: str | None = None) -> ToolCall:
    arguments = {"target_stage": target} | ({"reason": reason} if reason else {})
    return ToolCall(call_id, "playbook_transition", arguments)


def book(**fields: Any) -> Playbook:
    data: dict[str, Any] = {"id": "p", "initial_stage": "a", "transitions": []}
    data.update(fields)
    return Playbook.model_validate(data)


def move(
    transition_id: str, from_stage: str, target: str, condition: dict[str, Any], **action: Any
) -> dict[str, Any]:
    return {
        "id": transition_id,
        "from_stage": from_stage,
        "condition": condition,
        "action": {"target_stage": target, **action},
    }


async def run(
    orchestrator: PlaybookOrchestrator, text: str | None = "hi", **options: Any
) -> list[Any]:
    if text is None:
        return [e async for e in orchestrator.run_timeout_turn(**options)]
    return [e async for e in orchestrator.run_turn(text, **options)]


def kinds(events: list[Any]) -> list[str]:
    """Event kinds, with runs of TextDelta collapsed."""
    out: list[str] = []
    for event in events:
        name = type(event).__name__
        if not (out and out[-1] == name == "TextDelta"):
            out.append(name)
    return out


def completed(events: list[Any]) -> TurnCompleted:
    assert [type(e) for e in events].count(TurnCompleted) == 1
    assert isinstance(events[-1], TurnCompleted)
    return events[-1]


def changes(events: list[Any]) -> list[tuple[str, str, str, str | None]]:
    return [
        (e.from_stage, e.to_stage, e.transition_id, e.reason)
        for e in events
        if isinstance(e, StageChanged)
    ]


def prompt(request: LLMRequest) -> str:
    first = request.messages[0]
    assert isinstance(first, SystemMessage)
    return first.content


def offered(request: LLMRequest) -> list[str]:
    return [t.name for t in request.tools]


def results(events: list[Any]) -> dict[str, Any]:
    return {e.result.call_id: e.result for e in events if isinstance(e, ToolCallFinished)}


class Recorder(Hooks):
    def __init__(self) -> None:
        self.events: list[Any] = []

    def on_stage_enter(self, event: StageEnterEvent) -> None:
        self.events.append(event)

    def on_stage_exit(self, event: StageExitEvent) -> None:
        self.events.append(event)

    def on_transition(self, event: TransitionEvent) -> None:
        self.events.append(event)

    def on_error(self, event: ErrorEvent) -> None:
        self.events.append(event)

    def on_turn_start(self, event: TurnStartEvent) -> None:
        self.events.append(event)

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.events.append(event)

    def of(self, cls: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


LEAVING = "Note for the agent: the caller is leaving. Say a short goodbye."


def support() -> tuple[Playbook, ToolRegistry]:
    playbook = load_playbook(PLAYBOOKS / "support.yaml")
    return playbook, load_playbook_tools(playbook)


# The shipped playbooks ---------------------------------------------------------------------


async def test_support_conversation_greeting_identify_billing_refund_wrap_up() -> None:
    playbook, registry = support()
    llm = ScriptedLLM(
        [
            "Hello! How can I help?",
            [call("c1", "lookup_customer", email="ada@example.com")],
            "Thanks Ada, I found your account.",
            ScriptedResponse(
                text="Let me check.",
                tool_calls=[
                    call("c2", "lookup_order", order_id="A1001"),
                    call("c3", "issue_refund", order_id="A1001", amount=42.0, reason="double"),
                ],
            ),
            "I refunded 42. Goodbye!",
            "You're welcome! Call us again any time.",
        ]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, registry)
    engine = orchestrator.engine

    # Greeting: one request; max_turns moves to identify after the answer, with no extra request.
    events = await run(orchestrator, "Hi there")
    assert kinds(events) == ["TextDelta", "StageChanged", "TurnCompleted"]
    assert changes(events) == [("greeting", "identify", "greeting-to-identify", None)]
    assert completed(events).text == "Hello! How can I help?"
    assert len(llm.requests) == 1
    greeting = llm.requests[0]
    assert prompt(greeting).startswith("You are a support agent for an online shop")
    assert prompt(greeting).endswith(
        "Greet the caller and ask how you can help. Do not solve anything yet."
    )
    assert offered(greeting) == [] and greeting.tool_choice == "auto"
    assert greeting.settings.temperature == 0.2  # the playbook default

    # Identify: the tool sets the intent billing; the intent transition fires after the answer.
    events = await run(orchestrator, "It's ada@example.com")
    assert kinds(events) == [
        "ToolCallStarted",
        "ToolCallFinished",
        "TextDelta",
        "StageChanged",
        "TurnCompleted",
    ]
    assert changes(events) == [("identify", "billing", "known-billing-issue", None)]
    assert not any(e.conversation_ended for e in events if isinstance(e, StageChanged))
    assert len(llm.requests) == 3
    # What the model (and so the caller) gets from the lookup: no internal IDs or plan codes.
    looked_up = next(m for m in llm.requests[2].messages if isinstance(m, ToolMessage))
    assert json.loads(looked_up.content) == {
        "found": True,
        "first_name": "Ada",
        "open_issue": "billing",
    }
    assert offered(llm.requests[1]) == ["lookup_customer", "playbook_transition"]
    assert "lookup_customer" in prompt(llm.requests[2])
    assert dict(engine.context) == {"customer_id": "C-1", "routed_by": "intent"}

    # Billing: the refund fires the tool_call transition; one phase-2 request in wrap_up.
    events = await run(orchestrator, "I was charged twice for A1001")
    assert kinds(events) == [
        "TextDelta",
        "ToolCallStarted",
        "ToolCallStarted",
        "ToolCallFinished",
        "ToolCallFinished",
        "StageChanged",  # after the whole batch
        "TextDelta",
        "TurnCompleted",
    ]
    assert changes(events) == [("billing", "wrap_up", "refunded", None)]
    done = completed(events)
    assert done.text == "Let me check. I refunded 42. Goodbye!"  # both phases
    assert [r.status for r in done.tool_results] == ["ok", "ok"]
    assert len(llm.requests) == 5
    billing, wrap_up = llm.requests[3], llm.requests[4]
    assert offered(billing) == ["lookup_order", "issue_refund"]
    assert billing.settings.temperature == 0.0  # the stage's own config
    assert "Refund a double charge" in prompt(billing)
    assert wrap_up.tool_choice == "none" and wrap_up.settings.temperature == 0.2
    assert "Summarise what was done in one sentence and say goodbye." in prompt(wrap_up)
    assert wrap_up.messages[-1] == SystemMessage(
        "Note for the agent: the refund went through. Confirm it to the caller in one sentence."
    )
    assert engine.completed and engine.current_stage.id == "wrap_up"
    assert [t["transition_id"] for t in engine.transitions] == [
        "greeting-to-identify",
        "known-billing-issue",
        "refunded",
    ]
    assert [e.conversation_ended for e in events if isinstance(e, StageChanged)] == [True]
    assert orchestrator.conversation_ended and orchestrator.next_deadline() is None

    # After the end: the terminal stage still answers, politely, and nothing moves any more.
    events = await run(orchestrator, "Thanks!")
    assert kinds(events) == ["TextDelta", "TurnCompleted"]
    assert offered(llm.requests[5]) == [] and "call again" in prompt(llm.requests[5])
    assert orchestrator.conversation_ended
    llm.assert_consumed()
    check_chat_messages(orchestrator.history.for_request("sys"))


def test_support_transition_messages_are_notes_for_the_agent_only() -> None:
    playbook, _ = support()
    messages = [t.action.transition_message for t in playbook.transitions]
    assert all(m is None or m.startswith("Note for the agent:") for m in messages)
    assert "never repeat them" in playbook.global_system_prompt
    assert "never say it to the caller" in playbook.global_system_prompt


async def test_support_goodbye_from_the_first_stage_clears_the_history() -> None:
    playbook, registry = support()
    llm = ScriptedLLM(["Sorry to see you go.", "We are done here, goodbye."])
    orchestrator = PlaybookOrchestrator(playbook, llm, registry)
    events = await run(orchestrator, "Never mind, goodbye")
    # the "*" keyword transition (priority 10) beats greeting's max_turns
    assert changes(events) == [("greeting", "wrap_up", "caller-leaves", None)]
    assert kinds(events)[-2:] == ["StageChanged", "TurnCompleted"]
    assert completed(events).text == "Sorry to see you go."
    # Cleared after the answer: the answered turn stays whole (so the next request does not
    # show an unanswered "goodbye"), then the transition message.
    assert orchestrator.history.messages == (
        UserMessage("Never mind, goodbye"),
        AssistantMessage("Sorry to see you go."),
        SystemMessage(LEAVING),
    )
    events = await run(orchestrator, "Wait, one more thing")
    assert changes(events) == []
    assert llm.requests[1].messages[1:] == [
        UserMessage("Never mind, goodbye"),
        AssistantMessage("Sorry to see you go."),
        SystemMessage(LEAVING),
        UserMessage("Wait, one more thing"),
    ]
    assert "say goodbye" in prompt(llm.requests[1])


async def test_support_goodbye_from_a_later_stage_beats_its_intent() -> None:
    playbook, registry = support()
    llm = ScriptedLLM(
        [
            "Hello!",
            [call("c1", "lookup_customer", email="ada@example.com")],
            "Found you. Bye then!",
        ]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, registry)
    await run(orchestrator, "Hi")
    events = await run(orchestrator, "ada@example.com, but I have to go, bye")
    assert changes(events) == [("identify", "wrap_up", "caller-leaves", None)]
    history = orchestrator.history.messages
    assert history[0] == UserMessage("ada@example.com, but I have to go, bye")
    assert [type(m).__name__ for m in history] == [
        "UserMessage",  # the answered turn, whole: its call, the call's result, the answer
        "AssistantMessage",
        "ToolMessage",
        "AssistantMessage",
        "SystemMessage",
    ]
    assert history[-1] == SystemMessage(LEAVING)


async def test_support_timeout_turn_from_greeting() -> None:
    playbook, registry = support()
    llm = ScriptedLLM(["Are you still there? What is your account email?"])
    orchestrator = PlaybookOrchestrator(playbook, llm, registry)
    before = time.monotonic()
    deadline = orchestrator.next_deadline()
    assert deadline is not None and before < deadline <= time.monotonic() + 20
    events = await run(orchestrator, None)
    assert isinstance(events[0], StageChanged)
    assert changes(events) == [("greeting", "identify", "greeting-silence", "timeout")]
    assert kinds(events) == ["StageChanged", "TextDelta", "TurnCompleted"]
    request = llm.requests[0]
    assert "lookup_customer" in prompt(request)
    assert request.messages[1:] == [
        SystemMessage(
            "Note for the agent: the caller has been silent. Ask, in your own words, for "
            "their account email."
        )
    ]
    assert not any(isinstance(m, UserMessage) for m in orchestrator.history.messages)
    assert orchestrator.next_deadline() is None  # identify has no timer
    assert await run(orchestrator, None) == []  # no deadline: the timeout turn is a no-op


async def test_weather_question_then_bye_then_more_turns_in_the_terminal_stage() -> None:
    playbook = load_playbook(PLAYBOOKS / "weather.yaml")
    registry = load_playbook_tools(playbook)
    llm = ScriptedLLM(
        [
            [call("w1", "lookupWeather", city="Tokyo")],
            "It's sunny and 21 degrees in Tokyo.",
            "Goodbye, have a nice day!",
            "Take care!",
        ]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, registry)
    events = await run(orchestrator, "What's the weather in Tokyo?")
    assert changes(events) == []
    assert results(events)["w1"].result["conditions"] == "sunny"
    assert offered(llm.requests[0]) == ["lookupWeather"]
    events = await run(orchestrator, "Thanks, bye!")
    assert changes(events) == [("chat", "goodbye", "caller-done", None)]
    assert kinds(events) == ["TextDelta", "StageChanged", "TurnCompleted"]
    assert [e.conversation_ended for e in events if isinstance(e, StageChanged)] == [True]
    assert orchestrator.conversation_ended
    assert orchestrator.engine.completed
    events = await run(orchestrator, "Oh, and bye again")
    assert changes(events) == []
    assert completed(events).text == "Take care!"
    assert "Say a short, warm goodbye." in prompt(llm.requests[3])
    # The caller may still ask about the weather: the tool stays, so it is looked up, not
    # guessed (by hand, "wat the wether in sydny??" after "that's all" got invented weather).
    assert offered(llm.requests[3]) == ["lookupWeather"]
    assert orchestrator.engine.current_stage.id == "goodbye"
    assert orchestrator.engine.turns_in_stage == 1
    assert orchestrator.next_deadline() is None
    llm.assert_consumed()


# playbook_transition ------------------------------------------------------------------------


def decisions() -> Playbook:
    return book(
        stages=[
            {"id": "a", "description": "Start here", "tools": ["note"]},
            {"id": "b", "name": "Stage B", "tools": ["finish"], "system_prompt": "In B."},
            {"id": "c", "terminal": True, "system_prompt": "In C."},
        ],
        transitions=[
            move("a-b", "a", "b", {"type": "llm_decision", "description": "the user wants B"}),
            move("b-a", "b", "a", {"type": "llm_decision"}),
            move("any-c", "*", "c", {"type": "llm_decision", "description": "all done"}),
            move("kw", "a", "b", {"type": "keyword", "keywords": ["jump"]}),
        ],
    )


async def test_transition_tool_offers_exactly_the_legal_targets_per_stage() -> None:
    llm = ScriptedLLM(
        [
            [transition_call("t1", "b", reason="user asked for B")],
            "Now in B.",
            "Still B.",
            [transition_call("t2", "c")],
            "Done.",
            "Anything else?",
        ]
    )
    orchestrator = PlaybookOrchestrator(decisions(), llm, REGISTRY)
    events = await run(orchestrator, "take me to B")
    assert changes(events) == [("a", "b", "a-b", "user asked for B")]
    first = llm.requests[0]
    tool = first.tools[-1]
    assert offered(first) == ["note", "playbook_transition"]
    schema = tool.parameters["properties"]["target_stage"]
    assert schema["enum"] == ["b", "c"]
    assert "$ref" not in json.dumps(tool.parameters)
    assert "- b: Stage B. Use when: the user wants B" in tool.description
    assert "- c: c. Use when: all done" in tool.description
    # regenerated for the new stage (and the phase-2 answer is made in it)
    assert offered(llm.requests[1]) == ["finish", "playbook_transition"]
    assert llm.requests[1].tool_choice == "none"
    await run(orchestrator, "stay")
    enum = llm.requests[2].tools[-1].parameters["properties"]["target_stage"]["enum"]
    assert enum == ["a", "c"]
    assert "- a: Start here." in llm.requests[2].tools[-1].description
    await run(orchestrator, "finish up")
    assert orchestrator.engine.completed
    await run(orchestrator, "hello?")
    assert offered(llm.requests[5]) == []  # nothing to decide in a terminal stage


async def test_transition_tool_is_not_offered_without_llm_decision_transitions() -> None:
    playbook = book(
        stages=[{"id": "a", "tools": ["note"]}, {"id": "b", "terminal": True}],
        transitions=[move("kw", "a", "b", {"type": "keyword", "keywords": ["done"]})],
    )
    llm = ScriptedLLM([[transition_call("t1", "b")], "ok"])
    orchestrator = PlaybookOrchestrator(playbook, llm, REGISTRY)
    events = await run(orchestrator, "go")
    assert offered(llm.requests[0]) == ["note"]
    assert results(events)["t1"].status == "not_found"
    assert orchestrator.engine.current_stage.id == "a"


async def test_an_illegal_target_is_refused_listing_the_legal_ones() -> None:
    llm = ScriptedLLM([[transition_call("t1", "a")], "Staying here."])
    orchestrator = PlaybookOrchestrator(decisions(), llm, REGISTRY)
    events = await run(orchestrator, "go to a")
    result = results(events)["t1"]
    assert result.status == "invalid_arguments"
    assert "'b'" in result.error and "'c'" in result.error
    assert changes(events) == []
    assert orchestrator.engine.current_stage.id == "a"
    assert llm.requests[1].tool_choice == "auto"  # no transition: an ordinary next round


async def test_an_illegal_target_is_refused_even_without_argument_validation() -> None:
    llm = ScriptedLLM([[transition_call("t1", "nowhere")], "Staying here."])
    orchestrator = PlaybookOrchestrator(decisions(), llm, REGISTRY, validate_arguments=False)
    events = await run(orchestrator, "go")
    result = results(events)["t1"]
    assert result.status == "error"
    assert "'nowhere'" in result.error and "['b', 'c']" in result.error
    assert changes(events) == [] and orchestrator.engine.current_stage.id == "a"


async def test_a_second_transition_in_the_same_turn_is_an_error() -> None:
    playbook = book(
        stages=[
            {"id": "a", "tools": ["note"]},
            {"id": "b", "two_phase": False},
            {"id": "c", "terminal": True},
        ],
        transitions=[
            move("a-b", "a", "b", {"type": "llm_decision"}),
            move("a-c", "a", "c", {"type": "llm_decision"}),
            move("b-c", "b", "c", {"type": "llm_decision"}),
        ],
    )
    llm = ScriptedLLM(
        [
            [transition_call("t1", "b"), transition_call("t2", "c")],  # two in one response
            [transition_call("t3", "c")],  # and again in the next round
            "Still in B.",
        ]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, REGISTRY)
    events = await run(orchestrator, "go")
    found = results(events)
    assert found["t1"].status == "ok"
    assert found["t2"].status == "error" and "only one transition per turn" in found["t2"].error
    assert found["t3"].status == "error" and "only one transition per turn" in found["t3"].error
    assert changes(events) == [("a", "b", "a-b", None)]
    assert orchestrator.engine.current_stage.id == "b"


async def test_a_transition_in_the_same_response_as_two_other_calls() -> None:
    playbook, registry = support()
    llm = ScriptedLLM(
        [
            "Hello!",
            [
                call("c1", "lookup_customer", email="ada@example.com"),
                transition_call("t1", "technical", reason="the app crashes"),
                call("c2", "lookup_customer", email="bob@example.com"),
            ],
            "Let's fix that crash.",
        ]
    )
    hooks = Recorder()
    orchestrator = PlaybookOrchestrator(playbook, llm, registry, hooks=hooks)
    await run(orchestrator, "Hi")
    events = await run(orchestrator, "my app crashes, I'm ada@example.com")
    found = results(events)
    assert {key: r.status for key, r in found.items()} == {"c1": "ok", "t1": "ok", "c2": "ok"}
    names = [type(e).__name__ for e in events]
    assert names.index("StageChanged") > max(
        i for i, name in enumerate(names) if name == "ToolCallFinished"
    )
    # the model's choice wins; the intent lookup_customer set cannot move the turn again
    assert changes(events) == [("identify", "technical", "to-technical", "the app crashes")]
    assert [e.reason for e in hooks.of(TransitionEvent)][-1] == "the app crashes"
    assert len(llm.requests) == 3
    phase_two = llm.requests[2]
    assert phase_two.tool_choice == "none"
    assert "technical problem" in prompt(phase_two)
    assert [m.call_id for m in phase_two.messages if isinstance(m, ToolMessage)] == [
        "c1",
        "t1",
        "c2",
    ]
    assert orchestrator.engine.current_stage.id == "technical"
    assert completed(events).text == "Let's fix that crash."


async def test_without_two_phase_the_loop_continues_in_the_new_stage() -> None:
    playbook = book(
        stages=[
            {"id": "a", "tools": ["note"]},
            {"id": "b", "tools": ["finish"], "system_prompt": "In B.", "two_phase": False},
            {"id": "c", "terminal": True},
        ],
        transitions=[
            move("a-b", "a", "b", {"type": "llm_decision"}),
            move("b-c", "b", "c", {"type": "keyword", "keywords": ["never"]}),
        ],
    )
    llm = ScriptedLLM([[transition_call("t1", "b")], [call("f1", "finish")], "Finished in B."])
    orchestrator = PlaybookOrchestrator(playbook, llm, REGISTRY)
    events = await run(orchestrator, "go")
    assert len(llm.requests) == 3
    second = llm.requests[1]
    assert second.tool_choice == "auto" and offered(second) == ["finish"]
    assert prompt(second) == "In B."
    assert results(events)["f1"].status == "ok"
    assert completed(events).text == "Finished in B."


# Stage configuration ------------------------------------------------------------------------


async def test_only_global_and_stage_tools_are_offered_and_executable() -> None:
    playbook, registry = support()
    llm = ScriptedLLM(
        [[call("c1", "lookup_customer", email="x@y.z"), call("c2", "lookup_custmer")], "Hello!"]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, registry)
    events = await run(orchestrator, "Hi")
    refused = results(events)["c1"]
    assert refused.status == "not_found"
    assert refused.error == (
        "tool 'lookup_customer' is not available in stage 'greeting'; tools available: none."
    )
    assert "unknown tool 'lookup_custmer'" in results(events)["c2"].error

    both = book(
        global_tools=["note"],
        stages=[{"id": "a", "tools": ["count"], "terminal": True}],
    )
    llm = ScriptedLLM([[call("s1", "slow", seconds=0)], "ok"])
    orchestrator = PlaybookOrchestrator(both, llm, REGISTRY)
    events = await run(orchestrator, "go")
    assert offered(llm.requests[0]) == ["note", "count"]
    assert "tools available: note, count." in results(events)["s1"].error


async def test_a_tool_of_another_stage_never_runs() -> None:
    two = book(
        stages=[{"id": "a", "tools": ["note"]}, {"id": "b", "tools": ["finish"], "terminal": True}],
        transitions=[move("go", "a", "b", {"type": "llm_decision"})],
    )
    llm = ScriptedLLM(
        [
            [call("c1", "finish"), transition_call("t1", "b")],
            "Moved.",
            [call("c2", "note", text="late")],
            "Done.",
        ]
    )
    orchestrator = PlaybookOrchestrator(two, llm, REGISTRY)
    log.clear()
    events = await run(orchestrator, "go")
    assert log == []  # finish belongs to stage b: refused in a, even in the moving batch
    assert results(events)["c1"].error == (
        "tool 'finish' is not available in stage 'a'; tools available: note, playbook_transition."
    )
    events = await run(orchestrator, "more")
    assert log == [] and results(events)["c2"].status == "not_found"
    assert "not available in stage 'b'" in results(events)["c2"].error
    assert orchestrator.executor.registry is REGISTRY  # no registry swapping per stage


async def test_the_registry_given_is_never_modified_and_must_not_define_the_tool() -> None:
    registry = ToolRegistry([note, finish, slow, count])
    llm = ScriptedLLM([[transition_call("t1", "b")], "In B."])
    orchestrator = PlaybookOrchestrator(decisions(), llm, registry)
    await run(orchestrator, "go")
    assert orchestrator.engine.current_stage.id == "b"
    assert registry.names() == ["note", "finish", "slow", "count"]
    assert not registry.has("playbook_transition")

    @tool(name="playbook_transition")
    async def impostor() -> str:
        """Not the real one."""
        return "x"

    with pytest.raises(ValueError, match="built in"):
        PlaybookOrchestrator(decisions(), llm, ToolRegistry([note, finish, impostor]))


async def test_the_orchestrator_refuses_invalid_playbooks_and_foreign_engines() -> None:
    llm = ScriptedLLM([])
    with pytest.raises(PlaybookError, match=r"stages\[0\]\.tools\[0\].*'ghost'"):
        PlaybookOrchestrator(
            book(stages=[{"id": "a", "tools": ["ghost"], "terminal": True}]), llm, REGISTRY
        )
    other = PlaybookEngine(book(id="other", stages=[{"id": "a", "terminal": True}]))
    with pytest.raises(ValueError, match="'other'"):
        PlaybookOrchestrator(decisions(), llm, REGISTRY, engine=other)


async def test_llm_config_merges_field_by_field_and_tool_choice_follows_the_stage() -> None:
    playbook = book(
        default_llm_config={"model": "base", "temperature": 0.5, "max_tokens": 100, "top_p": 0.9},
        global_system_prompt="  Global.  ",
        stages=[
            {
                "id": "a",
                "system_prompt": "Stage A.",
                "tools": ["note", "count"],
                "tool_choice": "required",
                "llm_config": {"model": "stage-model", "temperature": 0.1},
            },
            {
                "id": "b",
                "tools": ["note", "count"],
                "tool_choice": {"name": "count"},
                "llm_config": {"max_tokens": 7, "top_p": 0.5},
            },
            {"id": "c", "terminal": True, "tools": ["note"], "tool_choice": "none"},
        ],
        transitions=[
            move("a-b", "a", "b", {"type": "max_turns", "count": 1}),
            move("b-c", "b", "c", {"type": "max_turns", "count": 1}),
        ],
    )
    llm = ScriptedLLM(
        [
            [call("n1", "note", text="x")],
            "A done.",
            [call("k1", "count", n=1)],
            "B done.",
            "C.",
        ]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, REGISTRY)
    for text in ("one", "two", "three"):
        await run(orchestrator, text)
    a1, a2, b1, b2, c1 = llm.requests
    assert prompt(a1) == "Global.\n\nStage A."
    assert a1.settings == ModelSettings("stage-model", 0.1, 100, 0.9)
    assert a1.tool_choice == "required" and a2.tool_choice == "auto"  # forcing: first round
    assert b1.settings == ModelSettings("base", 0.5, 7, 0.5)
    assert b1.tool_choice == {"name": "count"} and b2.tool_choice == "auto"
    assert prompt(b1) == "Global."
    assert c1.settings == ModelSettings("base", 0.5, 100, 0.9)
    assert c1.tool_choice == "none" and offered(c1) == ["note"]


async def test_no_llm_config_leaves_the_provider_defaults() -> None:
    playbook = book(stages=[{"id": "a", "terminal": True}])
    llm = ScriptedLLM(["hi"])
    await run(PlaybookOrchestrator(playbook, llm, REGISTRY), "hi")
    request = llm.requests[0]
    assert (
        request.settings.model,
        request.settings.temperature,
        request.settings.max_tokens,
        request.settings.top_p,
    ) == (
        None,
        None,
        None,
        None,
    )
    assert prompt(request) == ""


# When transitions fire ------------------------------------------------------------------------


def tool_call_playbook(**stage_b: Any) -> Playbook:
    return book(
        stages=[
            {"id": "a", "tools": ["finish", "note"]},
            {"id": "b", "system_prompt": "In B.", "terminal": True, **stage_b},
        ],
        transitions=[
            move(
                "done",
                "a",
                "b",
                {"type": "tool_call", "tool_name": "finish", "arguments": {"ok": True}},
                transition_message="Finished.",
                clear_history=True,
                data={"finished": True},
            ),
        ],
    )


async def test_a_failed_tool_call_does_not_move_on() -> None:
    llm = ScriptedLLM(
        [[call("f1", "finish", ok=False)], [call("f2", "finish", ok=True)], "Done now."]
    )
    orchestrator = PlaybookOrchestrator(tool_call_playbook(), llm, REGISTRY)
    events = await run(orchestrator, "finish it")
    assert results(events)["f1"].status == "error"
    assert llm.requests[1].tool_choice == "auto" and prompt(llm.requests[1]) == ""
    assert changes(events) == [("a", "b", "done", None)]
    assert llm.requests[2].tool_choice == "none" and prompt(llm.requests[2]) == "In B."
    assert orchestrator.engine.context["finished"] is True


async def test_clear_history_mid_turn_keeps_the_user_message_and_transition_message() -> None:
    llm = ScriptedLLM(["Earlier answer.", [call("f1", "finish", ok=True)], "All finished."])
    orchestrator = PlaybookOrchestrator(tool_call_playbook(), llm, REGISTRY)
    await run(orchestrator, "earlier question")
    events = await run(orchestrator, "please finish")
    assert changes(events) == [("a", "b", "done", None)]
    assert llm.requests[2].messages == [
        SystemMessage("In B."),
        UserMessage("please finish"),
        SystemMessage("Finished."),
    ]
    assert orchestrator.history.messages == (
        UserMessage("please finish"),
        SystemMessage("Finished."),
        AssistantMessage("All finished."),
    )


async def test_at_most_one_transition_per_turn() -> None:
    playbook = book(
        stages=[{"id": "a", "tools": ["note"]}, {"id": "b"}, {"id": "c", "terminal": True}],
        transitions=[
            move("by-tool", "a", "b", {"type": "tool_call", "tool_name": "note"}),
            move("b-kw", "b", "c", {"type": "keyword", "keywords": ["now"]}),
            move("b-turns", "b", "c", {"type": "max_turns", "count": 1}),
        ],
    )
    llm = ScriptedLLM([[call("n1", "note", text="x")], "Moved.", "In B, now."])
    orchestrator = PlaybookOrchestrator(playbook, llm, REGISTRY)
    events = await run(orchestrator, "note it now")  # "now" would fire b-kw: not this turn
    assert changes(events) == [("a", "b", "by-tool", None)]
    assert orchestrator.engine.turns_in_stage == 1  # the turn still counts in the new stage
    events = await run(orchestrator, "again")
    assert changes(events) == [("b", "c", "b-turns", None)]


async def test_after_answer_conditions_cost_no_extra_request() -> None:
    seen: list[str] = []

    def long_answer(facts: Any) -> bool:
        seen.append(facts.assistant_text)
        return len(facts.assistant_text) > 20

    playbook = book(
        stages=[{"id": "a"}, {"id": "b", "terminal": True, "system_prompt": "In B."}],
        transitions=[
            move("rule", "a", "b", {"type": "custom", "evaluate": long_answer}),
            move("kw", "a", "b", {"type": "keyword", "keywords": ["tada"], "source": "assistant"}),
        ],
    )
    llm = ScriptedLLM(["Short.", "Tada, done.", "Fine."])
    orchestrator = PlaybookOrchestrator(playbook, llm, REGISTRY)
    events = await run(orchestrator, "one")
    assert changes(events) == [] and len(llm.requests) == 1
    events = await run(orchestrator, "two")
    assert changes(events) == [("a", "b", "kw", None)] and len(llm.requests) == 2
    assert kinds(events) == ["TextDelta", "StageChanged", "TurnCompleted"]
    assert seen == ["Short.", "Tada, done."]
    await run(orchestrator, "three")
    assert prompt(llm.requests[2]) == "In B."


async def test_an_aborted_answer_is_not_a_turn_answered() -> None:
    playbook, registry = support()
    llm = ScriptedLLM(
        [ScriptedResponse(text="Hello there, welcome to the shop", chunk_delay=0.05), "Hi!"]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, registry)
    controller = AbortController()
    events = []
    async for event in orchestrator.run_turn("Hi", abort_signal=controller.signal):
        events.append(event)
        if isinstance(event, TextDelta):
            controller.abort("barge-in")
    assert completed(events).stop_reason == "aborted"
    assert changes(events) == []
    assert orchestrator.engine.current_stage.id == "greeting"
    assert orchestrator.engine.turns_in_stage == 0
    events = await run(orchestrator, "Hello?")
    assert changes(events) == [("greeting", "identify", "greeting-to-identify", None)]


# Timers ----------------------------------------------------------------------------------------


def timer_playbook(seconds: float = 0.05) -> Playbook:
    return book(
        stages=[
            {"id": "a", "system_prompt": "Waiting."},
            {"id": "work", "tools": ["finish"], "system_prompt": "Working."},
            {"id": "end", "terminal": True},
        ],
        transitions=[
            move(
                "silence",
                "a",
                "work",
                {"type": "timeout", "seconds": seconds},
                transition_message="The user is silent.",
            ),
            move("a-end", "a", "end", {"type": "keyword", "keywords": ["stop"]}),
            move(
                "finished",
                "work",
                "end",
                {"type": "tool_call", "tool_name": "finish"},
                clear_history=True,
                transition_message="Work finished.",
            ),
        ],
    )


async def test_a_stage_timeout_fires_with_no_user_turn() -> None:
    llm = ScriptedLLM(["Hello.", [call("f1", "finish")], "I went ahead and finished."])
    hooks = Recorder()
    orchestrator = PlaybookOrchestrator(timer_playbook(), llm, REGISTRY, hooks=hooks)
    first = orchestrator.next_deadline()
    assert first is not None
    await run(orchestrator, "hello")
    deadline = orchestrator.next_deadline()
    assert deadline is not None and deadline >= first  # every turn restarts the timer
    assert deadline - time.monotonic() <= 0.05
    await anyio.sleep(max(0.0, deadline - time.monotonic()) + 0.01)
    assert time.monotonic() >= deadline
    events = await run(orchestrator, None)
    assert isinstance(events[0], StageChanged)
    # the timeout is the turn's one transition: the finish call cannot move it again
    assert changes(events) == [("a", "work", "silence", "timeout")]
    assert results(events)["f1"].status == "ok"
    assert llm.requests[1].messages[-1] == SystemMessage("The user is silent.")
    assert prompt(llm.requests[1]) == "Working." and offered(llm.requests[1]) == ["finish"]
    assert orchestrator.engine.current_stage.id == "work"
    assert orchestrator.engine.turns_in_stage == 1
    assert orchestrator.history.messages == (
        UserMessage("hello"),
        AssistantMessage("Hello."),
        SystemMessage("The user is silent."),
        AssistantMessage("", (call("f1", "finish"),)),
        ToolMessage("f1", '"finished"'),
        AssistantMessage("I went ahead and finished."),
    )
    starts = hooks.of(TurnStartEvent)
    assert starts[-1].user_text is None and starts[-1].stage_id == "work"
    assert [e.condition for e in hooks.of(TransitionEvent)] == ["timeout"]
    assert [e.reason for e in hooks.of(TransitionEvent)] == ["timeout"]
    assert orchestrator.next_deadline() is None  # work has no timer


async def test_a_timeout_turn_without_a_timeout_transition_yields_nothing() -> None:
    llm = ScriptedLLM(["Bye."])
    orchestrator = PlaybookOrchestrator(timer_playbook(), llm, REGISTRY)
    await run(orchestrator, "stop")
    assert orchestrator.engine.completed
    assert orchestrator.next_deadline() is None
    assert await run(orchestrator, None) == []
    llm.assert_consumed()


# Hooks -------------------------------------------------------------------------------------


async def test_stage_hooks_fire_in_order() -> None:
    hooks = Recorder()
    playbook, registry = support()
    llm = ScriptedLLM(["Hello!", "Your email?"])
    orchestrator = PlaybookOrchestrator(playbook, llm, registry, hooks=hooks, session_id="s-1")
    await run(orchestrator, "Hi")
    await run(orchestrator, "Hm")
    stage_events = [e for e in hooks.events if not isinstance(e, TurnStartEvent | ToolEndEvent)]
    assert stage_events == [
        StageEnterEvent(stage_id="greeting", session_id="s-1"),
        StageExitEvent(
            stage_id="greeting",
            to_stage="identify",
            session_id="s-1",
            turn_id=stage_events[1].turn_id,
        ),
        TransitionEvent(
            from_stage="greeting",
            to_stage="identify",
            transition_id="greeting-to-identify",
            session_id="s-1",
            turn_id=stage_events[1].turn_id,
            condition="max_turns",
        ),
        StageEnterEvent(
            stage_id="identify",
            from_stage="greeting",
            session_id="s-1",
            turn_id=stage_events[1].turn_id,
        ),
    ]
    assert isinstance(hooks.events[1], TurnStartEvent)  # the initial stage before the turn
    assert stage_events[1].turn_id == hooks.of(TurnStartEvent)[0].turn_id


async def test_raising_stage_callbacks_are_reported_and_never_lose_the_turn() -> None:
    def explode(event: StageHookEvent) -> None:
        raise RuntimeError(f"{event.stage_id} callback failed")

    playbook = book(
        stages=[
            {"id": "a", "on_enter": explode, "on_exit": explode},
            {"id": "b", "terminal": True, "on_enter": explode},
        ],
        transitions=[move("t", "a", "b", {"type": "max_turns", "count": 1})],
    )
    hooks = Recorder()
    llm = ScriptedLLM(["Still answering.", "In b."])
    orchestrator = PlaybookOrchestrator(playbook, llm, REGISTRY, hooks=hooks)
    assert hooks.of(ErrorEvent) == []  # reported when the session starts its first turn
    events = await run(orchestrator, "hi")
    assert completed(events).text == "Still answering."
    assert changes(events) == [("a", "b", "t", None)]
    errors = [(e.where, str(e.error), e.stage_id) for e in hooks.of(ErrorEvent)]
    assert errors == [
        ("stage.on_enter", "a callback failed", "a"),
        ("stage.on_exit", "a callback failed", "a"),
        ("stage.on_enter", "b callback failed", "b"),
    ]
    turn_id = hooks.of(TurnStartEvent)[0].turn_id
    assert [e.turn_id for e in hooks.of(ErrorEvent)] == [None, turn_id, turn_id]
    await run(orchestrator, "again")
    assert len(hooks.of(ErrorEvent)) == 3


# Options ------------------------------------------------------------------------------------


SERIAL = ["slow start", "slow end", "slow start", "slow end"]
OVERLAPPING = ["slow start", "slow start", "slow end", "slow end"]


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, OVERLAPPING),
        ({"default_policy": "sequential"}, SERIAL),
        ({"max_concurrency": 1}, SERIAL),
    ],
)
async def test_concurrency_options_reach_the_executor(
    options: dict[str, Any], expected: list[str]
) -> None:
    playbook = book(stages=[{"id": "a", "tools": ["slow"], "terminal": True}])
    log.clear()
    llm = ScriptedLLM(
        [[call("s1", "slow", seconds=0.05), call("s2", "slow", seconds=0.05)], "Done."]
    )
    events = await run(PlaybookOrchestrator(playbook, llm, REGISTRY, **options), "go")
    assert [r.status for r in completed(events).tool_results] == ["ok", "ok"]
    assert log == expected


async def test_timeout_validation_and_session_id_options_reach_the_tools() -> None:
    playbook = book(stages=[{"id": "a", "tools": ["slow", "echo", "note"], "terminal": True}])
    script: list[Any] = [
        [
            call("s1", "slow", seconds=5),
            call("k1", "echo", n="not a number"),
            call("n1", "note", text="x"),
        ],
        "Done.",
    ]
    hooks = Recorder()
    llm = ScriptedLLM(script)
    orchestrator = PlaybookOrchestrator(
        playbook,
        llm,
        REGISTRY,
        hooks=hooks,
        session_id="sess-9",
        timeout=0.2,
        validate_arguments=False,
    )
    started = time.monotonic()
    found = results(await run(orchestrator, "go"))
    assert time.monotonic() - started < 4  # the 5 s call was cut off by the executor timeout
    assert found["s1"].status == "timeout"
    assert found["k1"].status == "ok" and found["k1"].result == "got 'not a number'"
    assert found["n1"].result == {"noted": "x", "session": "sess-9"}
    assert sorted(e.call_id for e in hooks.of(ToolEndEvent)) == ["k1", "n1", "s1"]  # once each
    assert {e.session_id for e in hooks.of(ToolEndEvent)} == {"sess-9"}

    llm = ScriptedLLM([[call("k1", "echo", n="not a number")], "Done."])
    checked = results(await run(PlaybookOrchestrator(playbook, llm, REGISTRY)))
    assert checked["k1"].status == "invalid_arguments"  # the default validates arguments


async def test_max_tool_rounds_limits_the_tool_batches() -> None:
    playbook = book(stages=[{"id": "a", "tools": ["note"], "terminal": True}])
    llm = ScriptedLLM([[call("n1", "note", text="x")], "Out of rounds."])
    orchestrator = PlaybookOrchestrator(playbook, llm, REGISTRY, max_tool_rounds=1)
    events = await run(orchestrator, "go")
    assert llm.requests[1].tool_choice == "none"
    assert completed(events).stop_reason == "max_tool_rounds"


async def test_tools_reach_the_playbook_through_ctx_metadata() -> None:
    @tool
    async def classify(topic: str, ctx: ToolContext) -> str:
        """Classify the request.

        Args:
            topic: The topic.
        """
        control = ctx.metadata["playbook"]
        assert control.stage_id == "a"
        control.update_context(topic=topic)
        control.set_intent(topic, 0.95)
        return "classified"

    playbook = book(
        stages=[{"id": "a", "tools": ["classify"]}, {"id": "sales", "terminal": True}],
        transitions=[move("i", "a", "sales", {"type": "intent", "intent": "sales"})],
    )
    llm = ScriptedLLM([[call("c1", "classify", topic="sales")], "Let me get sales."])
    orchestrator = PlaybookOrchestrator(playbook, llm, ToolRegistry([classify]))
    events = await run(orchestrator, "I want to buy")
    assert kinds(events)[-2:] == ["StageChanged", "TurnCompleted"]
    assert changes(events) == [("a", "sales", "i", None)]
    assert orchestrator.engine.context["topic"] == "sales"


# Resuming ------------------------------------------------------------------------------------


async def test_resuming_from_a_snapshot_and_history_in_a_new_orchestrator() -> None:
    playbook, registry = support()
    llm = ScriptedLLM(
        ["Hello!", [call("c1", "lookup_customer", email="ada@example.com")], "Found you, Ada."]
    )
    first = PlaybookOrchestrator(playbook, llm, registry)
    await run(first, "Hi")
    await run(first, "ada@example.com")
    saved = json.loads(
        json.dumps({"engine": first.engine.snapshot(), "history": first.history.to_dict()})
    )
    assert saved["engine"]["current_stage"] == "billing"

    hooks = Recorder()
    llm2 = ScriptedLLM(
        [
            [call("c2", "issue_refund", order_id="A1001", amount=42.0, reason="double")],
            "Refunded, goodbye!",
        ]
    )
    engine = PlaybookEngine.restore(playbook, saved["engine"])
    second = PlaybookOrchestrator(
        playbook,
        llm2,
        registry,
        engine=engine,
        history=ConversationHistory.from_dict(saved["history"]),
        hooks=hooks,
    )
    assert second.engine is engine and engine.snapshot() == saved["engine"]
    events = await run(second, "Please refund order A1001")
    request = llm2.requests[0]
    assert offered(request) == ["lookup_order", "issue_refund"]
    assert request.messages[1:4] == [
        UserMessage("Hi"),
        AssistantMessage("Hello!"),
        UserMessage("ada@example.com"),
    ]
    assert request.messages[-1] == UserMessage("Please refund order A1001")
    assert changes(events) == [("billing", "wrap_up", "refunded", None)]
    assert engine.context["customer_id"] == "C-1"
    assert [t["transition_id"] for t in engine.transitions] == [
        "greeting-to-identify",
        "known-billing-issue",
        "refunded",
    ]
    # a restored session entered its stage long ago: no initial on_stage_enter again
    assert [e.stage_id for e in hooks.of(StageEnterEvent)] == ["wrap_up"]


async def test_warm_sends_the_first_stage_prompt_and_tools_without_starting_the_session() -> None:
    playbook = load_playbook(PLAYBOOKS / "weather.yaml")
    llm = ScriptedLLM(["x"])
    orchestrator = PlaybookOrchestrator(playbook, llm, load_playbook_tools(playbook))
    await orchestrator.warm()
    (request,) = llm.requests
    assert request.settings.max_tokens == 1
    assert "Use the lookupWeather tool" in prompt(request)
    assert offered(request) == ["lookupWeather"]
    # Nothing of a session happened: no history, the first stage not yet entered.
    assert len(orchestrator.history) == 0 and not orchestrator.engine.entered
