"""Benchmark: does the served agent use its tools, and say what they returned?

Run:  .venv/bin/python benchmarks/tool_use.py [--rows default,text-free,composed,native]

One `LocalModelServer` (the offline 1.5B) answers every row in turn. Each question is one
real session, built as `llmrtc serve` builds it: the model through `local_provider` (what
`open_llm` uses), the bot through `llmrtc.cli.bot.load_bot` + `build_handler`:

- 34 ordinary questions to `playbooks/weather.yaml` (a `PlaybookOrchestrator` with its
  `weather_tools.py`): weather in many phrasings, misheard city names the tool still finds
  ("Tokio"), cities it has no data for (it raises a `ToolError` "No weather data for ...",
  which the agent must pass on instead of inventing weather), small talk, thanks,
  what-can-you-do, and weather questions without a city (the agent must ask, not guess);
- the 12 shop questions of `benchmarks/composed.py` with its four tools, as a `TurnRunner`
  with that benchmark's system prompt (`build_handler` without a playbook).

Rows differ only in how the model is asked for tools: `default` is the offline default as
shipped (`LOCAL_TOOL_CALL_FORMAT`, `LLAMA_CPP_PROFILE`); `text-free` is the `text` format
without the grammar, with no tools after tool results (the offline default before issue 19:
the baseline); `composed` and `native` are those tool-call formats with the same profile.

A question is right when its tool decision is right (the expected tool, or none), its answer
states the tool's result (the temperature or the conditions; for an order its status; for
an unknown city no weather at all), and the answer never names a function or shows JSON (those
violations are also counted on their own). Time per answer is the whole turn; the one-tool
turns (a known city) are also shown with the prompt tokens the server processed per request
(`Usage.processed_input_tokens`: input tokens minus the ones its prompt cache held). It is a
measurement, not a test: it exits 0 unless it crashes.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from llmrtc import TextDelta, ToolCallFinished, ToolCallStarted, ToolRegistry, tool
from llmrtc.cli.bot import build_handler, load_bot
from llmrtc.llm.local import LocalModelServer, local_provider
from llmrtc.llm.openai_provider import OpenAIProvider
from llmrtc.telemetry.events import LLMEndEvent
from llmrtc.telemetry.hooks import Hooks

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "playbooks"))
from composed import QUESTIONS as SHOP_QUESTIONS  # noqa: E402
from composed import SYSTEM as SHOP_SYSTEM  # noqa: E402
from weather_tools import find_city  # noqa: E402
from weather_tools import lookupWeather as weather_tool  # noqa: E402

PLAYBOOK = str(ROOT / "playbooks" / "weather.yaml")
"""The served playbook (`--playbook` measures a variant of it)."""

Kind = Literal["known", "unknown", "none", "shop"]

# (question, kind, the city the tool should find for "known")
WEATHER_QUESTIONS: list[tuple[str, Kind, str | None]] = [
    ("What's the weather in Tokyo?", "known", "tokyo"),
    ("Is it raining in Oslo?", "known", "oslo"),
    ("How warm is it in Lima right now?", "known", "lima"),
    ("weather berlin", "known", "berlin"),
    ("Do I need an umbrella in London today?", "known", "london"),
    ("Tell me the temperature in Rome in fahrenheit.", "known", "rome"),
    ("What's it like outside in Paris?", "known", "paris"),
    ("Is it sunny in Sydney?", "known", "sydney"),
    ("Could you check the weather for New York, please?", "known", "new york"),
    ("How hot is it in Cairo?", "known", "cairo"),
    ("Should I wear a coat in Oslo?", "known", "oslo"),
    ("Hi! What's the weather like in Tokyo today?", "known", "tokyo"),
    ("What's the weather in Tokio?", "known", "tokyo"),
    ("Is it cold in Osloh?", "known", "oslo"),
    ("weather in londen", "known", "london"),
    ("What's the weather in Oswald?", "unknown", None),
    ("How's the weather in Madrid?", "unknown", None),
    ("Is it raining in Reykjavik?", "unknown", None),
    ("What's the temperature in Springfield?", "unknown", None),
    ("Hi there!", "none", None),
    ("Hello, how are you?", "none", None),
    ("Thanks, that's all I needed.", "none", None),
    ("Thank you!", "none", None),
    ("What can you do?", "none", None),
    ("Who are you?", "none", None),
    ("Tell me a short joke about cats.", "none", None),
    ("What is 2 plus 2?", "none", None),
    ("What's the capital of France?", "none", None),
    ("Can you hear me?", "none", None),
    ("Good morning!", "none", None),
    ("What's your name?", "none", None),
    ("Do you know any good restaurants?", "none", None),
    ("Is it going to rain?", "none", None),
    ("What's the weather?", "none", None),
]

# Whole conversations, each one session, scored turn by turn: a small model that answered
# one message in plain words tends to answer every later one in plain words and invent the
# weather. The first two were used while choosing `route_tools`; the third was written after.
CONVERSATIONS: list[list[tuple[str, Kind, str | None]]] = [
    [
        ("Hello?", "none", None),
        ("How warm is it in Oslo right now?", "known", "oslo"),
        ("Is it cold in Berlin?", "known", "berlin"),
        ("Thanks. And what about Lima?", "known", "lima"),
        ("hw abot tokio?", "known", "tokyo"),
        ("what can you do for me", "none", None),
        ("and paris?", "known", "paris"),
        ("Do I need an umbrella in London?", "known", "london"),
    ],
    [
        ("Hi there!", "none", None),
        ("What's 2 plus 2?", "none", None),
        ("Tell me a short joke about cats.", "none", None),
        ("What's the weather in Madrid?", "unknown", None),
        ("Is it sunny in Sydney?", "known", "sydney"),
        ("Thank you!", "none", None),
        ("What's the weather?", "none", None),
        ("Who are you?", "none", None),
    ],
    [
        ("Good evening!", "none", None),
        ("What's the weather like in Rome?", "known", "rome"),
        ("And in Cairo?", "known", "cairo"),
        ("Is it windy in Sydney at the moment?", "known", "sydney"),
        ("Cool, thanks.", "none", None),
        ("How about Reykjavik?", "unknown", None),
        ("What is your name?", "none", None),
        ("is it hot in new york today", "known", "new york"),
    ],
]

_TEMPERATURE = re.compile(r"-?\d+\s*(°|degrees?|celsius|fahrenheit|[CF]\b)", re.IGNORECASE)
_CLAIM = re.compile(
    r"\b(it'?s|it is|currently|will be|expect|there is|there's)\b[^.?!]{0,30}\b"
    r"(sunny|rain\w*|cloudy|overcast|windy|drizzl\w*|snow\w*|clear|mild|warm|cold|hot)\b",
    re.IGNORECASE,
)
_TOOL_NAMES = ("lookupWeather", "setTimer", "lookupOrder", "transferToHuman", "playbook_transition")


def invents_weather(text: str) -> bool:
    """A temperature, or a claim about the conditions."""
    return bool(_TEMPERATURE.search(text) or _CLAIM.search(text))


def shows_json(text: str) -> bool:
    return any(mark in text for mark in ("{", "}", "`", '"name"', '"arguments"'))


def names_function(text: str) -> bool:
    lowered = text.lower()
    return any(n.lower() in lowered for n in _TOOL_NAMES) or " function" in lowered


@tool
async def setTimer(minutes: float) -> dict[str, object]:
    """Start a countdown timer.

    Args:
        minutes: Length of the timer in minutes.
    """
    return {"status": "started", "minutes": minutes}


@tool
async def lookupOrder(order_id: str) -> dict[str, object]:
    """Look up the status of a customer order by its order number.

    Args:
        order_id: The order number.
    """
    return {"order_id": order_id, "status": "shipped", "arrives": "Tuesday"}


@tool
async def transferToHuman(reason: str) -> dict[str, object]:
    """Transfer the caller to a human agent.

    Args:
        reason: Why the caller wants a human.
    """
    return {"status": "transferring", "wait_minutes": 2}


class _Requests(Hooks):
    """Collects every model request's usage of one turn."""

    def __init__(self) -> None:
        self.ends: list[LLMEndEvent] = []

    def on_llm_end(self, event: LLMEndEvent) -> None:
        self.ends.append(event)


@dataclass
class Outcome:
    question: str
    kind: Kind
    expected: str | None
    called: list[str]
    results: list[Any]
    text: str
    seconds: float
    processed: list[int] = field(default_factory=list)
    """Prompt tokens processed per model request of the turn."""
    decision_ok: bool = False
    answer_ok: bool = False

    @property
    def json_shown(self) -> bool:
        return shows_json(self.text)

    @property
    def function_named(self) -> bool:
        return names_function(self.text)

    @property
    def right(self) -> bool:
        return (
            self.decision_ok and self.answer_ok and not self.json_shown and not self.function_named
        )


def score(outcome: Outcome, city: str | None) -> None:
    text, called = outcome.text, outcome.called
    if not text.strip():
        return
    if outcome.expected is None:
        outcome.decision_ok = not called
        outcome.answer_ok = not invents_weather(text)
        return
    outcome.decision_ok = bool(called) and called[0] == outcome.expected
    first = outcome.results[0] if outcome.results else None
    if outcome.kind == "unknown":
        outcome.answer_ok = not invents_weather(text)
    elif outcome.expected == "lookupWeather":
        data = first.result if first is not None and first.success else None
        if isinstance(data, dict):
            found = find_city(str(data.get("city", "")))
            outcome.decision_ok = outcome.decision_ok and (city is None or found == city)
            # The conditions' stem: "rainy" is stated by "raining", "sunny" by "sun".
            stem = str(data["conditions"]).lower()[:4]
            outcome.answer_ok = str(data["temperature"]) in text or stem in text.lower()
    elif outcome.expected == "lookupOrder":
        outcome.answer_ok = "shipped" in text.lower() or "tuesday" in text.lower()
    else:
        outcome.answer_ok = True


async def ask(
    llm: OpenAIProvider, question: str, kind: Kind, expected: str | None, playbook: str = PLAYBOOK
) -> Outcome:
    """One question in a session of its own."""
    requests = _Requests()
    if kind == "shop":
        registry = ToolRegistry([weather_tool, setTimer, lookupOrder, transferToHuman])
        handler = build_handler(llm, registry, None, system_prompt=SHOP_SYSTEM, hooks=requests)
    else:
        bot = load_bot(playbook, None)
        handler = build_handler(
            llm, bot.registry, bot.playbook, toolkits=bot.toolkits, hooks=requests
        )
    return await _turn(handler, requests, question, kind, expected)


async def converse(
    llm: OpenAIProvider, turns: list[tuple[str, Kind, str | None]], playbook: str
) -> list[Outcome]:
    """One conversation, every turn in the same session (scored as `ask`'s)."""
    requests = _Requests()
    bot = load_bot(playbook, None)
    handler = build_handler(llm, bot.registry, bot.playbook, toolkits=bot.toolkits, hooks=requests)
    outcomes = []
    for question, kind, city in turns:
        expected = "lookupWeather" if kind in ("known", "unknown") else None
        requests.ends.clear()
        outcome = await _turn(handler, requests, question, kind, expected)
        score(outcome, city)
        outcomes.append(outcome)
    return outcomes


async def _turn(
    handler: Any, requests: _Requests, question: str, kind: Kind, expected: str | None
) -> Outcome:
    started = time.perf_counter()
    text = ""
    called: list[str] = []
    results: list[Any] = []
    async for event in handler.run_turn(question):
        if isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, ToolCallStarted):
            called.append(event.call.name)
        elif isinstance(event, ToolCallFinished):
            results.append(event.result)
    seconds = time.perf_counter() - started
    processed = [(e.input_tokens or 0) - (e.cached_input_tokens or 0) for e in requests.ends]
    return Outcome(question, kind, expected, called, results, text, seconds, processed)


def rows_for(server: LocalModelServer, names: list[str]) -> list[tuple[str, OpenAIProvider]]:
    rows = []
    for name in names:
        if name == "default":
            llm = local_provider(server)
            name = (
                f"default ({llm.tool_call_format}{'+grammar' if llm.compat.grammar else ''}"
                f"{'+routing' if llm.compat.route_tools else ''})"
            )
        elif name == "text-grammar":
            llm = local_provider(server, tool_call_format="text")
            llm.compat = dataclasses.replace(llm.compat, grammar=True, route_tools=False)
        elif name == "text-free":
            llm = local_provider(server, tool_call_format="text")
            llm.compat = dataclasses.replace(
                llm.compat, grammar=False, route_tools=False, omit_tools_after_tool_results=True
            )
        elif name in ("composed", "native", "text", "auto"):
            llm = local_provider(server, tool_call_format=name)  # type: ignore[arg-type]
        else:
            raise SystemExit(f"unknown row {name!r}")
        rows.append((name, llm))
    return rows


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _per_request(turns: list[Outcome]) -> str:
    """Median prompt tokens processed by each request of these turns (1st/2nd/...)."""
    if not turns:
        return "-"
    longest = max(len(o.processed) for o in turns)
    columns = [[o.processed[i] for o in turns if len(o.processed) > i] for i in range(longest)]
    return "/".join(str(int(statistics.median(c))) for c in columns)


def _show(o: Outcome) -> str:
    mark = "ok " if o.right else "BAD"
    flags = ("J" if o.json_shown else "") + ("F" if o.function_named else "")
    got = ",".join(o.called) or "-"
    return (
        f"    {mark}{flags:<2} {o.seconds:5.2f}s {o.processed!s:<12} {o.question[:40]:<40} "
        f"[{got}] {o.text.strip()[:70]!r}"
    )


async def run(names: list[str], limit: int | None, playbook: str, conversations: bool) -> None:
    import os

    print(f"load: {os.getloadavg()}; playbook {playbook}")
    questions: list[tuple[str, Kind, str | None, str | None]] = [
        (q, k, "lookupWeather" if k in ("known", "unknown") else None, c)
        for q, k, c in WEATHER_QUESTIONS
    ] + [(q, "shop", e, None) for q, e in SHOP_QUESTIONS]
    if limit:  # every k-th question: a smaller set that still has every kind
        questions = questions[:: max(1, len(questions) // limit)][:limit]
    async with LocalModelServer("1.5b") as server:
        table = []
        for name, llm in rows_for(server, names):
            await ask(llm, "Hi!", "none", None, playbook)  # warm-up: the prompt into the cache
            print(f"-- {name}", flush=True)
            outcomes = []
            for question, kind, expected, city in questions:
                outcome = await ask(llm, question, kind, expected, playbook)
                score(outcome, city)
                outcomes.append(outcome)
                print(_show(outcome), flush=True)
            if conversations:
                print(f"-- {name}: conversations", flush=True)
                for turns in CONVERSATIONS:
                    for outcome in await converse(llm, turns, playbook):
                        outcome.question = "(conv) " + outcome.question
                        outcomes.append(outcome)
                        print(_show(outcome), flush=True)
            table.append((name, outcomes))
    print(f"\nload: {os.getloadavg()}")
    print(
        f"{'row':<24} {'right':>7} {'decision':>9} {'answer':>7} {'json':>5} {'fn':>4} "
        f"{'s/answer':>9} {'1-tool s':>9} {'1-tool tok/req':>15} {'in conv.':>9}"
    )
    for name, outcomes in table:
        n = len(outcomes)
        one_tool = [o for o in outcomes if o.kind == "known" and o.called == ["lookupWeather"]]
        conv = [o for o in outcomes if o.question.startswith("(conv)")]
        print(
            f"{name:<24} {sum(o.right for o in outcomes):>3}/{n:<3} "
            f"{sum(o.decision_ok for o in outcomes):>5}/{n:<3} "
            f"{sum(o.answer_ok for o in outcomes):>3}/{n:<3} "
            f"{sum(o.json_shown for o in outcomes):>5} "
            f"{sum(o.function_named for o in outcomes):>4} "
            f"{statistics.median(o.seconds for o in outcomes):>8.2f}s "
            f"{_median([o.seconds for o in one_tool]):>8.2f}s {_per_request(one_tool):>15} "
            f"{sum(o.right for o in conv):>4}/{len(conv):<4}"
        )
    print(
        "(right: decision, answer and no violation; json / fn: answers showing JSON / naming a "
        "function; s/answer: median turn; 1-tool: median over known-city turns with one call, "
        "prompt tokens processed per request: the call, then the answer; in conv.: right among the "
        "turns of the conversations, included in right)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", default="default,text-free,composed,native")
    parser.add_argument("--limit", type=int, default=None, help="N questions, spread over the set")
    parser.add_argument("--playbook", default=PLAYBOOK, help="a variant of weather.yaml")
    parser.add_argument(
        "--no-conversations", action="store_true", help="single questions only, no sessions"
    )
    options = parser.parse_args()
    rows = [r.strip() for r in options.rows.split(",") if r.strip()]
    anyio.run(run, rows, options.limit, options.playbook, not options.no_conversations)


if __name__ == "__main__":
    main()
