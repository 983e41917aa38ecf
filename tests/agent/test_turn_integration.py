"""A full turn seen from outside: OpenTelemetry spans, the default provider, the chat CLI."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from llmrtc import (
    OpenAIProvider,
    OpenTelemetryHooks,
    ToolCall,
    ToolExecutor,
    ToolRegistry,
    TurnRunner,
    open_default_provider,
    tool,
)
from llmrtc.testing import ScriptedLLM, ScriptedOpenAIServer, text_reply, tool_call_reply

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


@tool
async def lookupWeather(city: str) -> dict[str, Any]:
    """Current weather."""
    return {"city": city, "temperature_c": 21}


async def test_a_turn_span_holds_its_chat_and_tool_spans() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hooks = OpenTelemetryHooks(tracer_provider=provider)
    llm = ScriptedLLM(
        [
            [
                ToolCall("c1", "lookupWeather", {"city": "Tokyo"}),
                ToolCall("c2", "lookupWeather", {"city": "Oslo"}),
            ],
            "Both 21.",
        ]
    )
    runner = TurnRunner(
        llm, ToolExecutor(ToolRegistry([lookupWeather])), system_prompt="s", hooks=hooks
    )
    async for _ in runner.run_turn("weather?"):
        pass
    spans = {s.name: s for s in exporter.get_finished_spans()}
    names = sorted(s.name for s in exporter.get_finished_spans())
    assert names == [
        "chat scripted",
        "chat scripted",
        "execute_tool lookupWeather",
        "execute_tool lookupWeather",
        "llmrtc.turn",
    ]
    turn = spans["llmrtc.turn"]
    for span in exporter.get_finished_spans():
        if span is not turn:
            assert span.parent is not None and span.parent.span_id == turn.context.span_id
    assert dict(turn.attributes or {})["llmrtc.turn.tool_calls"] == 2


async def test_default_provider_uses_the_environments_server(monkeypatch: Any) -> None:
    async with ScriptedOpenAIServer([text_reply("from the env server")]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "env-key")
        monkeypatch.setenv("LLMRTC_MODEL", "env-model")
        async with open_default_provider() as llm:
            assert isinstance(llm, OpenAIProvider) and llm.model == "env-model"
            runner = TurnRunner(llm, ToolExecutor(ToolRegistry()), system_prompt="s")
            events = [e async for e in runner.run_turn("hi")]
        assert events[-1].text == "from the env server"
        assert server.requests[0].headers["authorization"] == "Bearer env-key"
        assert server.requests[0].body["model"] == "env-model"


async def test_chat_cli_shows_tool_calls_live() -> None:
    replies = [
        tool_call_reply([("c1", "lookupWeather", '{"city": "Tokyo"}')]),
        text_reply("It is 21 degrees in Tokyo."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}
        result = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "llmrtc.cli",
                "chat",
                "--tools",
                str(ROOT / "demos" / "tools_quickstart.py"),
            ],
            input=b"What's the weather in Tokyo?\n",
            env=env,
            check=False,
        )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert '-> lookupWeather({"city": "Tokyo"})' in out
    assert "<- lookupWeather ok" in out and '"temperature":21.0' in out
    assert "It is 21 degrees in Tokyo." in out
    assert len(server.requests) == 2


async def test_text_agent_demo_runs_a_full_turn() -> None:
    replies = [
        tool_call_reply([("c1", "lookupWeather", '{"city": "Oslo"}')]),
        text_reply("It is 4 degrees and rainy in Oslo."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "k"}
        result = await anyio.run_process(
            [sys.executable, str(ROOT / "demos" / "text_agent.py"), "Weather in Oslo?"],
            env=env,
            check=False,
        )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert '[calling lookupWeather {"city": "Oslo"}]' in out
    assert '"temperature":4' in out and "rainy in Oslo" in out
