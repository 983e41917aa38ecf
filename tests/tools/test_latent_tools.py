"""Latent tools (seed 002): a schema without a handler; the calling model writes the result in
`_output`, which is validated against the output schema and becomes the call's result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmrtc.agent import TurnRunner
from llmrtc.execution import ToolExecutor
from llmrtc.llm import ToolMessage
from llmrtc.llm.openai_provider import OpenAIProvider
from llmrtc.telemetry.events import ToolEndEvent, ToolStartEvent
from llmrtc.testing import ScriptedLLM, ScriptedResponse
from llmrtc.testing.openai_server import ScriptedOpenAIServer, text_reply, tool_call_reply
from llmrtc.testing.recording import RecordingHooks
from llmrtc.tools import ToolCall, ToolDefinition, ToolRegistry, define_tool
from llmrtc.tools.loader import load_tools_file
from llmrtc.tools.schema_form import OUTPUT_FIELD
from llmrtc.tools.tool import LatentTool

pytestmark = pytest.mark.anyio

SENTIMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Analyzes text sentiment",
    "properties": {
        "_tool": {"type": "string", "const": "sentimentAnalysis"},
        "text": {"type": "string", "description": "Text to analyze"},
        "_output": {
            "type": "object",
            "properties": {
                "sentiment": {"type": "string", "enum": ["positive", "negative", "neutral"]},
                "confidence": {"type": "number"},
            },
            "required": ["sentiment", "confidence"],
        },
    },
    "required": ["text"],
}
GOOD = {"text": "This is the best!", "_output": {"sentiment": "positive", "confidence": 0.99}}


def sentiment() -> LatentTool:
    made = define_tool(SENTIMENT_SCHEMA)
    assert isinstance(made, LatentTool)
    return made


def test_seed_schema_becomes_a_latent_tool_whose_offered_schema_requires_output() -> None:
    made = sentiment()
    definition = made.definition
    assert made.latent and definition.name == "sentimentAnalysis"
    assert definition.description == "Analyzes text sentiment"
    assert "_tool" not in definition.parameters["properties"]
    assert definition.parameters["required"] == ["text", OUTPUT_FIELD]
    assert definition.output_schema == SENTIMENT_SCHEMA["properties"]["_output"]
    offered = definition.to_openai()["function"]["parameters"]
    assert offered["properties"][OUTPUT_FIELD]["required"] == ["sentiment", "confidence"]


def test_definition_without_handler_uses_its_output_schema() -> None:
    definition = ToolDefinition(
        name="capital",
        description="The capital of a country.",
        parameters={"type": "object", "properties": {"country": {"type": "string"}}},
        output_schema={"type": "string"},
    )
    made = define_tool(definition)
    assert isinstance(made, LatentTool)
    assert made.definition.parameters["properties"][OUTPUT_FIELD]["type"] == "string"
    assert made.definition.parameters["required"] == [OUTPUT_FIELD]


def test_latent_tool_without_an_output_schema_is_refused_when_defined() -> None:
    with pytest.raises(ValueError, match="output_schema"):
        define_tool(ToolDefinition(name="vague"))


def test_bad_schemas_say_what_is_allowed() -> None:
    with pytest.raises(ValueError, match="needs a name"):
        define_tool({"type": "object", "properties": {"_output": {"type": "string"}}})
    with pytest.raises(ValueError, match=r"_activity.*not supported"):
        define_tool({**SENTIMENT_SCHEMA, "properties": {"_activity": {}, "_tool": {"const": "x"}}})
    with pytest.raises(ValueError, match="output_schema is not a valid JSON Schema"):
        ToolDefinition(name="x", output_schema={"type": "nonsense"})


async def test_the_model_written_output_is_the_result_through_the_executor() -> None:
    hooks = RecordingHooks()
    executor = ToolExecutor(ToolRegistry([sentiment()]), hooks=hooks)
    result = await executor.execute_single(ToolCall("c1", "sentimentAnalysis", json.dumps(GOOD)))
    assert result.status == "ok"
    assert result.result == {"sentiment": "positive", "confidence": 0.99}
    assert json.loads(result.to_content()) == GOOD["_output"]
    assert len(hooks.of(ToolStartEvent)) == 1
    assert [e.status for e in hooks.of(ToolEndEvent)] == ["ok"]


@pytest.mark.parametrize("validate", [True, False])
async def test_missing_or_invalid_output_is_invalid_arguments_the_model_can_act_on(
    validate: bool,
) -> None:
    executor = ToolExecutor(ToolRegistry([sentiment()]), validate_arguments=validate)
    missing, wrong = await executor.execute(
        [
            ToolCall("c1", "sentimentAnalysis", {"text": "meh"}),
            ToolCall("c2", "sentimentAnalysis", {"text": "meh", "_output": {"sentiment": "so-so"}}),
        ]
    )
    assert missing.status == wrong.status == "invalid_arguments"
    assert "_output is missing" in (missing.error or "")
    assert "write its result in the _output argument" in (missing.error or "")
    assert '"enum":["positive","negative","neutral"]' in (missing.error or "")  # what is allowed
    assert "'so-so' is not one of" in (wrong.error or "")
    assert "'confidence' is a required property" in (wrong.error or "")


async def test_latent_tool_through_a_turn_with_a_scripted_model() -> None:
    call = ToolCall("c1", "sentimentAnalysis", GOOD)
    llm = ScriptedLLM(
        [ScriptedResponse(tool_calls=[call]), ScriptedResponse(text="It is positive.")]
    )
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([sentiment()])), system_prompt="Be kind.")
    events = [event async for event in runner.run_turn("How does 'This is the best!' feel?")]
    assert events
    tool_messages = [m for m in runner.history.messages if isinstance(m, ToolMessage)]
    assert json.loads(tool_messages[0].content) == GOOD["_output"]
    offered = llm.requests[0].tools[0].parameters
    assert OUTPUT_FIELD in offered["required"]


async def test_latent_tool_through_a_turn_on_the_openai_wire() -> None:
    replies = [
        tool_call_reply([("call_1", "sentimentAnalysis", json.dumps({"text": "ugh"}))]),
        tool_call_reply([("call_2", "sentimentAnalysis", json.dumps(GOOD))]),
        text_reply("It is positive."),
    ]
    async with ScriptedOpenAIServer(replies) as server:
        llm = OpenAIProvider("scripted", base_url=server.base_url, api_key="test")
        executor = ToolExecutor(ToolRegistry([sentiment()]))
        runner = TurnRunner(llm, executor, system_prompt="Be kind.")
        [event async for event in runner.run_turn("How does it feel?")]
    sent = server.requests[0].body["tools"][0]["function"]["parameters"]
    assert sent["required"] == ["text", OUTPUT_FIELD]
    # The first call forgot `_output`: the model is told, corrects itself, gets its result.
    second = server.requests[1].body["messages"][-1]
    assert second["role"] == "tool" and "_output is missing" in second["content"]
    third = server.requests[2].body["messages"][-1]
    assert json.loads(third["content"]) == GOOD["_output"]


def test_a_tools_file_and_the_registry_take_schema_tools(tmp_path: Path) -> None:
    file = tmp_path / "tools.py"
    file.write_text(
        "from llmrtc.tools import define_tool\n"
        f"sentiment = define_tool({SENTIMENT_SCHEMA!r})\n"
        "echo = define_tool({'type': 'object', 'properties': {'_tool': {'const': 'echo'}, "
        "'text': {'type': 'string'}, '_output': {'type': 'string'}}}, lambda args, ctx: 'x')\n"
    )
    registry = load_tools_file(file)
    assert registry.names() == ["sentimentAnalysis", "echo"]
    latent, explicit = registry.get("sentimentAnalysis"), registry.get("echo")
    assert latent is not None and latent.latent
    # With a handler the schema's `_output` is the output schema, not an argument.
    assert explicit is not None and not explicit.latent
    assert explicit.definition.output_schema == {"type": "string"}
    assert OUTPUT_FIELD not in explicit.definition.parameters["properties"]
