"""Benchmark of a turn: what the turn loop costs around the executor, and real-model latency.

Run:  .venv/bin/python benchmarks/turn.py [--quick] [--local] [--small]

1. Framework overhead of one turn with one tool round (model answers with a tool call, the
   call runs, the model answers with text) using a zero-latency `ScriptedLLM`, beside the
   executor alone running the same call, interleaved round by round in one process so machine
   noise hits both alike. The difference is what `TurnRunner` adds: two model requests with
   history handling and event streaming. p50/p99 across rounds, in microseconds per turn.
2. With `--local`: the offline default model (Qwen2.5-Coder 1.5B, or 0.5B with `--small`)
   through the full path (`open_default_provider`-style provider + `TurnRunner`): time to the
   first text of a plain question, time to the tool call of a weather question (cold: first
   request after start; warm: after `runner.warm()`), and generation tokens/s.

It prints figures, never fails on them: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
from typing import Any

import anyio

from llmrtc import (
    TextDelta,
    ToolCall,
    ToolCallStarted,
    ToolExecutor,
    ToolRegistry,
    TurnCompleted,
    TurnRunner,
    tool,
)
from llmrtc.agent import ConversationHistory
from llmrtc.testing import ScriptedLLM


@tool
async def lookupWeather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name, e.g. Tokyo.
    """
    return {"city": city, "temperature_c": 21, "conditions": "sunny"}


REGISTRY = ToolRegistry([lookupWeather])
CALL = ToolCall("call_1", "lookupWeather", {"city": "Tokyo"})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def bench_overhead(rounds: int, turns_per_round: int) -> list[str]:
    executor = ToolExecutor(REGISTRY)

    async def turn_side() -> None:
        for _ in range(turns_per_round):
            llm = ScriptedLLM([[CALL], "It is 21 degrees and sunny in Tokyo."])
            runner = TurnRunner(llm, executor, system_prompt="You are a weather bot.")
            async for _event in runner.run_turn("What's the weather in Tokyo?"):
                pass

    async def executor_side() -> None:
        for _ in range(turns_per_round):
            await executor.execute([CALL])

    async def scripted_side() -> None:
        # The scripted model alone (two requests), so its own cost is not charged to the loop.
        from llmrtc.llm import LLMRequest, SystemMessage, UserMessage

        for _ in range(turns_per_round):
            llm = ScriptedLLM([[CALL], "It is 21 degrees and sunny in Tokyo."])
            request = LLMRequest([SystemMessage("s"), UserMessage("u")])
            await llm.complete(request)
            await llm.complete(request)

    sides = {"turn (TurnRunner)": turn_side, "executor alone": executor_side}
    sides["scripted model alone"] = scripted_side
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for cycle in range(rounds + 3):
        gc.collect()
        gc.disable()
        try:
            for name, run in sides.items():
                started = time.perf_counter_ns()
                await run()
                if cycle >= 3:
                    elapsed = time.perf_counter_ns() - started
                    samples[name].append(elapsed / 1000 / turns_per_round)
        finally:
            gc.enable()
    p50 = {name: percentile(values, 50) for name, values in samples.items()}
    lines = [
        "1) one turn with one tool round, zero-latency ScriptedLLM, vs the executor alone",
        f"   p50/p99 across {rounds} interleaved rounds of {turns_per_round} turns; us per turn",
    ]
    for name, values in samples.items():
        lines.append(f"   {name:<24}p50 {p50[name]:8.1f}   p99 {percentile(values, 99):8.1f}")
    added = p50["turn (TurnRunner)"] - p50["executor alone"] - p50["scripted model alone"]
    lines.append(
        f"   the turn loop adds {added:.1f} us per turn beyond the executor and the scripted model"
        " (2 requests, history, events)"
    )
    return lines


async def bench_local(size: str) -> list[str]:
    from llmrtc.llm.default import local_provider
    from llmrtc.llm.local import LocalModelServer

    lines = [f"2) offline model {size} through TurnRunner (temperature 0)"]
    started = time.perf_counter()
    async with LocalModelServer(size) as server:
        lines.append(
            f"   server start (load + 1-token warm-up): {time.perf_counter() - started:.2f} s"
        )
        llm = local_provider(server)
        executor = ToolExecutor(REGISTRY)

        async def measure(question: str, runner: TurnRunner) -> dict[str, float]:
            began = time.perf_counter()
            marks: dict[str, float] = {}
            async for event in runner.run_turn(question):
                now = time.perf_counter() - began
                if isinstance(event, TextDelta) and "first_text" not in marks:
                    marks["first_text"] = now
                elif isinstance(event, ToolCallStarted) and "tool_call" not in marks:
                    marks["tool_call"] = now
                elif isinstance(event, TurnCompleted):
                    marks["total"] = now
                    marks["output_tokens"] = event.usage.output_tokens
            return marks

        def runner() -> TurnRunner:
            return TurnRunner(
                llm,
                executor,
                system_prompt="You are a helpful voice assistant. Answer in one short sentence.",
                history=ConversationHistory(),
            )

        cold = await measure("What's the weather in Tokyo?", runner())
        warm_runner = runner()
        await warm_runner.warm()
        warm = await measure("What's the weather in Oslo?", warm_runner)
        nan = float("nan")
        lines.append(
            f"   weather question: tool call after {cold.get('tool_call', nan):.2f} s cold,"
            f" {warm.get('tool_call', nan):.2f} s warm; whole turn {warm['total']:.2f} s"
        )
        plain = await measure("Tell me one fun fact about octopuses.", runner())
        lines.append(
            f"   plain question: first text after {plain.get('first_text', nan):.2f} s,"
            f" {plain['output_tokens']:.0f} tokens in {plain['total']:.2f} s"
        )
        began = time.perf_counter()
        from llmrtc.llm import LLMRequest, ModelSettings, SystemMessage, UserMessage

        response = await llm.complete(
            LLMRequest(
                [SystemMessage("You write plainly."), UserMessage("Describe a forest in detail.")],
                settings=ModelSettings(max_tokens=120),
            )
        )
        seconds = time.perf_counter() - began
        tokens = response.usage.output_tokens
        lines.append(
            f"   generation: {tokens} tokens in {seconds:.2f} s = {tokens / seconds:.1f} tok/s"
        )
        lines.extend(await bench_crash_questions(server))
    return lines


CRASH_QUESTIONS = (
    "Is it raining in Oslo?",
    "Should I bring an umbrella in Oslo today?",
    "Is it sunny in Tokyo?",
    "Is it cold in Oslo?",
)


async def bench_crash_questions(server: Any) -> list[str]:
    """The questions that crashed the chat, through three ways of offering the tools: the old
    native path (llama.cpp parses calls; a mid-stream parse failure after text is fatal), the
    native path with continuation by prefill, and today's text tool calls."""
    import logging

    from llmrtc.agent.events import TurnFailed
    from llmrtc.llm import CompatProfile, ModelSettings, OpenAIProvider
    from llmrtc.llm.local import LLAMA_CPP_PROFILE, LOCAL_RETRY, TOOL_HINT, local_provider

    retries: list[str] = []

    class Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "answering again without tools" in record.getMessage():
                retries.append(record.getMessage())

    provider_logger = logging.getLogger("llmrtc.llm.openai_provider")
    provider_logger.addHandler(handler := Count())
    provider_logger.setLevel(logging.INFO)

    def native(continuing: bool) -> OpenAIProvider:
        compat = CompatProfile(
            tool_hint=TOOL_HINT,
            retry_without_tools=True,
            continue_after_stream_error=continuing,
            omit_tools_after_tool_results=True,
            plain_answer_hint=LLAMA_CPP_PROFILE.plain_answer_hint,
        )
        return OpenAIProvider(
            server.model,
            base_url=server.base_url,
            api_key=server.api_key,
            tool_call_format="auto",
            settings=ModelSettings(temperature=0.0),
            retry=LOCAL_RETRY,
            compat=compat,
        )

    lines = ["3) the questions that crashed the chat (answered / turns; server-error retries)"]
    ways = [
        ("native tools (before)", native(False)),
        ("native + prefill continuation", native(True)),
        ("text tools (now)", local_provider(server)),
    ]
    try:
        for name, llm in ways:
            retries.clear()
            answered = called = 0
            seconds: list[float] = []
            for question in CRASH_QUESTIONS:
                runner = TurnRunner(
                    llm,
                    ToolExecutor(REGISTRY),
                    system_prompt="You are a helpful assistant. Use the tools when they help."
                    " Answer briefly.",
                    history=ConversationHistory(),
                )
                began = time.perf_counter()
                events = [event async for event in runner.run_turn(question)]
                seconds.append(time.perf_counter() - began)
                failed = any(isinstance(e, TurnFailed) for e in events)
                text = "".join(e.text for e in events if isinstance(e, TextDelta))
                answered += not failed and bool(text.strip())
                called += any(isinstance(e, ToolCallStarted) for e in events)
            lines.append(
                f"   {name:<31}{answered}/{len(CRASH_QUESTIONS)} answered, {called} called the"
                f" tool, {len(retries)} retries, {sum(seconds) / len(seconds):.1f} s per turn"
            )
    finally:
        provider_logger.removeHandler(handler)
    return lines


async def main(quick: bool, local: bool, small: bool) -> None:
    print(
        f"llmrtc turn benchmark ({'quick' if quick else 'full'}) | Python"
        f" {platform.python_version()} | {os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.2f}"
    )
    print("caveat: shared, noisy machine; compare sides within one run\n")
    rounds, per_round = (20, 50) if quick else (100, 100)
    print("\n".join(await bench_overhead(rounds, per_round)), end="\n\n")
    if local:
        print("\n".join(await bench_local("0.5b" if small else "1.5b")), end="\n\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run")
    parser.add_argument("--local", action="store_true", help="also measure the offline model")
    parser.add_argument("--small", action="store_true", help="use the 0.5B model with --local")
    options = parser.parse_args()
    anyio.run(main, options.quick, options.local, options.small)
