"""Benchmark: tool decisions and latency of the offline model per tool-call format.

Run:  .venv/bin/python benchmarks/composed.py [--formats text,auto,composed] [--small]

One `LocalModelServer` (1.5B unless --small) serves every format in turn, through the real
`OpenAIProvider` with the offline profile (`LLAMA_CPP_PROFILE`, temperature 0), so the only
difference between rows is `tool_call_format`:

- `text`     the tools in the system prompt in Qwen's own wording, calls parsed from the text
             (the offline default before this benchmark);
- `auto`     the API's `tools` field (llama.cpp parses calls with the template override), calls
             written as text still recognised;
- `composed` seed 002's `{calls, output}` schema (either calls or an answer) as
             `response_format`: llama.cpp constrains decoding to it.

The question set is the shop set the local profile was tuned on (TOOL_HINT's numbers): four
tools (lookupWeather, setTimer, lookupOrder, transferToHuman), 12 questions, 8 needing one
tool and 4 needing none. A decision is correct when the response calls exactly the expected
tool (with arguments valid for its schema) or, for the other four, calls nothing and says
something. Latency: first event (text delta or call) and whole response, per question, after
one unmeasured warm-up request per format (the prompt prefix then sits in the KV cache, as in a
live session). It is a measurement, not a test: it exits 0 unless it crashes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

import anyio

from llmrtc.llm import LLMRequest, SystemMessage, UserMessage
from llmrtc.llm.local import LLAMA_CPP_PROFILE, LOCAL_RETRY, LocalModelServer
from llmrtc.llm.openai_provider import OpenAIProvider, ToolCallFormat
from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.types import LLMDone, LLMTextDelta, LLMToolCall
from llmrtc.tools import ToolDefinition, validate_tool_arguments


def _tool(name: str, description: str, parameter: str, kind: str = "string") -> ToolDefinition:
    return ToolDefinition(
        name=name,
        description=description,
        parameters={
            "type": "object",
            "properties": {parameter: {"type": kind}},
            "required": [parameter],
        },
    )


TOOLS = [
    _tool("lookupWeather", "Look up the current weather for a city", "city"),
    _tool("setTimer", "Start a countdown timer", "minutes", "number"),
    _tool("lookupOrder", "Look up the status of a customer order by its order number", "order_id"),
    _tool("transferToHuman", "Transfer the caller to a human agent", "reason"),
]
SYSTEM = "You are a friendly voice assistant for an online shop. Keep answers short."
QUESTIONS: list[tuple[str, str | None]] = [
    ("What's the weather in Tokyo?", "lookupWeather"),
    ("Is it raining in Oslo?", "lookupWeather"),
    ("Set a timer for 10 minutes.", "setTimer"),
    ("Can you start a five minute countdown for my tea?", "setTimer"),
    ("Where is my order 4412?", "lookupOrder"),
    ("What's the status of order A1234?", "lookupOrder"),
    ("I want to talk to a real person.", "transferToHuman"),
    ("This is not working, connect me with a human agent please.", "transferToHuman"),
    ("What is 2 plus 2?", None),
    ("Hello, how are you today?", None),
    ("What is the capital of France?", None),
    ("Thanks, that's all I needed.", None),
]


@dataclass
class Outcome:
    question: str
    expected: str | None
    called: list[str]
    text: str
    first_s: float
    total_s: float
    valid_arguments: bool

    @property
    def correct(self) -> bool:
        if self.expected is None:
            return not self.called and bool(self.text.strip())
        return self.called == [self.expected] and self.valid_arguments


def provider_for(server: LocalModelServer, fmt: ToolCallFormat) -> OpenAIProvider:
    assert server.base_url is not None
    return OpenAIProvider(
        server.model,
        base_url=server.base_url,
        api_key=server.api_key,
        tool_call_format=fmt,
        settings=ModelSettings(temperature=0.0, max_tokens=120),
        retry=LOCAL_RETRY,
        compat=LLAMA_CPP_PROFILE,
        provider_name="llmrtc.local",
    )


async def ask(llm: OpenAIProvider, question: str, expected: str | None) -> Outcome:
    request = LLMRequest([SystemMessage(SYSTEM), UserMessage(question)], tools=TOOLS)
    by_name = {t.name: t for t in TOOLS}
    started = time.perf_counter()
    first = float("nan")
    text = ""
    called: list[str] = []
    valid = True
    async for event in llm.stream(request):
        if isinstance(event, LLMTextDelta | LLMToolCall) and first != first:
            first = time.perf_counter() - started
        if isinstance(event, LLMTextDelta):
            text += event.text
        elif isinstance(event, LLMToolCall):
            called.append(event.call.name)
            tool = by_name.get(event.call.name)
            valid = valid and tool is not None
            if tool is not None:
                valid = valid and validate_tool_arguments(tool, event.call.arguments).valid
        elif isinstance(event, LLMDone):
            break
    total = time.perf_counter() - started
    return Outcome(question, expected, called, text, first, total, valid)


def _show(outcome: Outcome) -> str:
    got = ",".join(outcome.called) or f"text {outcome.text.strip()[:40]!r}"
    mark = "ok " if outcome.correct else "BAD"
    return f"    {mark} {outcome.total_s:5.2f}s  {outcome.question[:44]:<44} -> {got}" + (
        "" if outcome.valid_arguments else " (invalid arguments)"
    )


async def run(size: str, formats: list[ToolCallFormat]) -> None:
    server = LocalModelServer(size, n_ctx=4096)
    t0 = time.perf_counter()
    await anyio.to_thread.run_sync(server.start)
    print(f"== {server.model}: loaded in {time.perf_counter() - t0:.1f} s, {len(QUESTIONS)} q")
    rows: list[tuple[str, list[Outcome]]] = []
    try:
        for fmt in formats:
            llm = provider_for(server, fmt)
            await ask(llm, "Hi!", None)  # warm-up: this format's prompt prefix into the cache
            print(f"-- {fmt}", flush=True)
            outcomes = []
            for question, expected in QUESTIONS:
                outcomes.append(await ask(llm, question, expected))
                print(_show(outcomes[-1]), flush=True)
            rows.append((fmt, outcomes))
    finally:
        await anyio.to_thread.run_sync(server.stop)
    base = statistics.median(o.total_s for o in rows[0][1])
    print()
    print(
        f"{'format':<10} {'correct':>8} {'tool q':>7} {'no-tool q':>9} {'first ev':>9} "
        f"{'total':>7} {'vs ' + rows[0][0]:>9}"
    )
    for fmt, outcomes in rows:
        tool_ok = sum(o.correct for o in outcomes if o.expected)
        plain_ok = sum(o.correct for o in outcomes if not o.expected)
        first = statistics.median(o.first_s for o in outcomes)
        total = statistics.median(o.total_s for o in outcomes)
        print(
            f"{fmt:<10} {tool_ok + plain_ok:>5}/{len(outcomes):<2} {tool_ok:>5}/8 "
            f"{plain_ok:>7}/4 {first:>8.2f}s {total:>6.2f}s {total / base:>8.2f}x"
        )
    print("(first ev / total: medians over the questions; the ratio is of the total medians)")
    print(json.dumps({fmt: sum(o.correct for o in outcomes) for fmt, outcomes in rows}))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--formats", default="text,auto,composed")
    parser.add_argument("--small", action="store_true", help="the 0.5B model")
    options = parser.parse_args()
    formats: list[Any] = [f.strip() for f in options.formats.split(",") if f.strip()]
    anyio.run(run, "0.5b" if options.small else "1.5b", formats)


if __name__ == "__main__":
    main()
