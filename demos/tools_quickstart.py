"""Tools quickstart: define tools two ways, then run batches with a sequential write, a timeout
and an abort, and print every call's one result.

Run: `python demos/tools_quickstart.py`
"""

from __future__ import annotations

import time
from typing import Literal

import anyio

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
)

FAKE_WEATHER = {"tokyo": 21.0, "oslo": 4.5, "lima": 18.0}

# Style 1: a JSON Schema and a handler(args, ctx).


async def weather_handler(args: dict[str, str], ctx: ToolContext) -> dict[str, object]:
    await anyio.sleep(0.05)  # a network call
    celsius = FAKE_WEATHER.get(args["city"].lower(), 15.0)
    value = celsius if args["units"] == "celsius" else celsius * 9 / 5 + 32
    return {"city": args["city"], "temperature": round(value, 1), "units": args["units"]}


lookup_weather_schema = define_tool(
    ToolDefinition(
        name="lookupWeather",
        description="Current temperature in a city.",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Tokyo."},
                "units": {
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"],
                    "default": "celsius",
                },
            },
            "required": ["city"],
        },
        timeout=2.0,
    ),
    weather_handler,
)


# Style 2: type hints and a docstring.


@tool(timeout=2.0)
async def forecast(city: str, days: int = 3, units: Literal["celsius", "fahrenheit"] = "celsius"):
    """Daily forecast for a city.

    Args:
        city: City name, e.g. Tokyo.
        days: How many days ahead (1-7).
        units: Temperature units.
    """
    await anyio.sleep(0.05)
    base = FAKE_WEATHER.get(city.lower(), 15.0)
    return [{"day": d + 1, "temperature": base + d} for d in range(days)]


@tool(execution_policy="sequential")
async def save_note(text: str, ctx: ToolContext) -> str:
    """Save a note. Sequential: it runs after earlier calls finish, before later ones start.

    Args:
        text: The note.
    """
    await anyio.sleep(0.02)
    return f"saved {text!r} for session {ctx.session_id}"


@tool(timeout=0.3)
def slow_report(topic: str, ctx: ToolContext) -> str:
    """A blocking report generator (plain def: runs in a worker thread).

    Args:
        topic: What to report on.
    """
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if ctx.abort_signal.aborted:  # cooperative stop after a timeout or abort
            return "stopped early"
        time.sleep(0.01)
    return f"report on {topic}"


def show(title: str, results: list[ToolCallResult], elapsed: float) -> None:
    print(f"\n== {title} ({elapsed * 1000:.0f} ms)")
    for r in results:
        outcome = r.to_content() if r.success else r.error
        print(
            f"  {r.call_id:<4} {r.tool_name:<14} {r.status:<18} {r.duration_ms:7.1f} ms  {outcome}"
        )


async def main() -> None:
    registry = ToolRegistry([lookup_weather_schema, forecast, save_note, slow_report])
    executor = ToolExecutor(registry, max_concurrency=4, timeout=5.0)

    batch = [
        ToolCall("c1", "lookupWeather", {"city": "Tokyo"}),
        ToolCall("c2", "forecast", '{"city": "Oslo", "days": 2}'),
        ToolCall("c3", "save_note", {"text": "bring an umbrella"}),
        ToolCall("c4", "lookupWeather", {"city": "Lima", "units": "kelvin"}),
        ToolCall("c5", "lookupWether", {"city": "Paris"}),
        ToolCall("c6", "slow_report", {"topic": "rain"}),
    ]
    started = time.perf_counter()
    results = await executor.execute(batch, session_id="demo")
    show(
        "a batch: parallel, sequential, invalid, unknown, timeout",
        results,
        time.perf_counter() - started,
    )

    controller = AbortController()
    started = time.perf_counter()
    async with anyio.create_task_group() as group:

        async def barge_in() -> None:
            await anyio.sleep(0.03)
            controller.abort("user barged in")

        group.start_soon(barge_in)
        results = await executor.execute(
            [
                ToolCall("a1", "save_note", {"text": "first"}),
                ToolCall("a2", "forecast", {"city": "Tokyo", "days": 5}),
                ToolCall("a3", "slow_report", {"topic": "wind"}),
            ],
            abort_signal=controller.signal,
        )
    show(
        "an abort 30 ms in: finished calls keep their results",
        results,
        time.perf_counter() - started,
    )


if __name__ == "__main__":
    anyio.run(main)
