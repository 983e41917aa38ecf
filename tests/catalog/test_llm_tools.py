"""LLM-backed tools (`define_llm_tool`) on `ScriptedLLM` models through the real executor:
templates and defaults, variants, JSON output repair and schema warnings, model resolution
and fallback, missing credentials, and model usage on the result, hooks and span."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from llmrtc.catalog.backend import LocalBackend
from llmrtc.catalog.llm_tools import (
    LLMTool,
    MaxTokensContext,
    ModelPreference,
    PromptVariant,
    define_llm_tool,
)
from llmrtc.catalog.llm_tools.model_pool import (
    MissingCredentialsError,
    ModelPool,
    ModelUnavailableError,
)
from llmrtc.execution import ToolExecutor
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import InMemoryTelemetry, RecordingHooks, ScriptedLLM, ScriptedResponse
from llmrtc.tools import ModelUsage, ToolCall, ToolRegistry

pytestmark = pytest.mark.anyio

TEXT_INPUT = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "style": {"type": "string", "default": "brief"},
    },
    "required": ["text"],
}
SENTIMENT_OUTPUT = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["positive", "negative", "neutral"]},
        "confidence": {"type": "number"},
    },
    "required": ["label"],
}


class FallbackHooks(Hooks):
    """Records the LLM-tool events (not yet on `Hooks`: found by name)."""

    def __init__(self) -> None:
        self.fallbacks: list[Any] = []
        self.warnings: list[Any] = []

    def on_model_fallback(self, event: Any) -> None:
        self.fallbacks.append(event)

    def on_tool_warning(self, event: Any) -> None:
        self.warnings.append(event)


def summarize_tool(**overrides: Any) -> LLMTool:
    options: dict[str, Any] = {
        "id": "util:summarize@1.0.0",
        "description": "Summarise a text.",
        "input_schema": TEXT_INPUT,
        "system_prompt": "You write {{style}} summaries.",
        "user_template": "Summarise: {{text}}",
        "model_preference": ModelPreference(preferred="a/m1", fallbacks=["b/m2"]),
    }
    options.update(overrides)
    return define_llm_tool(**options)


def sentiment_tool(**overrides: Any) -> LLMTool:
    options: dict[str, Any] = {
        "id": "util:sentiment@1.0.0",
        "description": "Sentiment of a text.",
        "input_schema": TEXT_INPUT,
        "system_prompt": "You label sentiment.",
        "user_template": "Text: {{text}}",
        "output_format": "json",
        "output_schema": SENTIMENT_OUTPUT,
        "output_example": {"label": "positive", "confidence": 0.9},
        "model_preference": ModelPreference(preferred="a/m1"),
    }
    options.update(overrides)
    return define_llm_tool(**options)


async def run(
    tool: LLMTool, pool: ModelPool, arguments: dict[str, Any], **executor_options: Any
) -> Any:
    executor = ToolExecutor(ToolRegistry([tool]), models=pool, **executor_options)
    (result,) = await executor.execute([ToolCall("c1", tool.definition.wire_name, arguments)])
    return result


async def test_text_tool_renders_templates_with_defaults_and_reports_usage() -> None:
    llm = ScriptedLLM(["  A short summary.  "], model="m1-served")
    async with ModelPool({"a": lambda: llm}) as pool:
        result = await run(summarize_tool(), pool, {"text": "Long story."})
    assert result.status == "ok", result.error
    assert result.result == "A short summary."
    (request,) = llm.requests
    system, user = request.messages
    assert system.content == "You write brief summaries."  # the schema default filled in
    assert user.content == "Summarise: Long story."
    assert request.settings.model == "m1"  # the model part of a/m1, per request
    assert request.response_format is None
    assert result.model_usage.model == "a/m1"
    assert result.model_usage.attempts == 1
    assert result.model_usage.input_tokens and result.model_usage.output_tokens
    llm.assert_consumed()


async def test_registers_in_a_backend_and_a_registry_like_any_tool() -> None:
    tool = summarize_tool()
    backend = LocalBackend([tool])
    assert await backend.get("util:summarize@1.0.0") is tool
    assert tool.definition.name == "util.summarize"
    assert ToolRegistry([tool]).get("util.summarize") is tool


async def test_json_output_instruction_schema_example_and_response_format() -> None:
    llm = ScriptedLLM(['{"label": "positive", "confidence": 0.8}'])
    async with ModelPool({"a": lambda: llm}) as pool:
        result = await run(sentiment_tool(), pool, {"text": "I love it"})
    assert result.result == {"label": "positive", "confidence": 0.8}
    request = llm.requests[0]
    system = request.messages[0].content
    assert system.startswith("You label sentiment.")
    assert json.dumps(SENTIMENT_OUTPUT) in system and '"confidence": 0.9' in system
    assert system.rstrip().endswith("It must follow the output schema above.")
    assert request.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "util__sentiment", "schema": SENTIMENT_OUTPUT},
    }


@pytest.mark.parametrize(
    "answer",
    [
        '```json\n{"label": "negative"}\n```',
        'Sure! Here is the JSON:\n{"label": "negative"}\nHope this helps.',
        'Result: ```\n{"label": "negative"}\n``` done',
    ],
)
async def test_json_repair_fences_and_prose(answer: str) -> None:
    async with ModelPool({"a": lambda: ScriptedLLM([answer])}) as pool:
        result = await run(sentiment_tool(), pool, {"text": "meh"})
    assert result.status == "ok"
    assert result.result == {"label": "negative"}


async def test_output_not_matching_the_schema_is_a_warning_not_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = FallbackHooks()
    llm = ScriptedLLM(['{"label": "ecstatic"}'])
    async with ModelPool({"a": lambda: llm}, hooks=hooks) as pool:
        with caplog.at_level(logging.WARNING, "llmrtc.catalog.llm_tools"):
            result = await run(sentiment_tool(), pool, {"text": "wow"})
    assert result.status == "ok"
    assert result.result == {"label": "ecstatic"}
    (warning,) = hooks.warnings
    assert warning.code == "output_schema_mismatch"
    assert "label" in warning.message and warning.model == "a/m1"
    assert warning.call_id == "c1" and warning.tool_id == "util:sentiment@1.0.0"
    assert "does not match output_schema" in caplog.text


async def test_unparseable_output_is_an_error_naming_the_raw_text() -> None:
    raw = "I think the sentiment is rather positive overall. " * 10
    async with ModelPool({"a": lambda: ScriptedLLM([raw])}) as pool:
        result = await run(sentiment_tool(), pool, {"text": "wow"})
    assert result.status == "error"
    assert "not valid JSON" in result.error
    assert "I think the sentiment is rather positive" in result.error
    assert len(result.error) < 400  # shortened
    assert result.model_usage.model == "a/m1"
    assert "not valid JSON" in result.model_usage.failures[0]


async def test_a_failing_model_falls_back_to_the_next_with_hook_and_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = FallbackHooks()
    first = ScriptedLLM([ScriptedResponse(error="HTTP 500 from http://secret-host/v1")])
    second = ScriptedLLM(["Summary by m2."])
    async with ModelPool({"a": lambda: first, "b": lambda: second}, hooks=hooks) as pool:
        with caplog.at_level(logging.WARNING, "llmrtc.catalog.llm_tools"):
            result = await run(summarize_tool(), pool, {"text": "x"})
    assert result.status == "ok"
    assert result.result == "Summary by m2."
    usage = result.model_usage
    assert usage.model == "b/m2" and usage.attempts == 2
    assert usage.failures == ("a/m1: LLMError: HTTP 500 from http://secret-host/v1",)
    (event,) = hooks.fallbacks
    assert (event.failed_model, event.next_model, event.attempt) == ("a/m1", "b/m2", 1)
    assert "HTTP 500" in event.error
    assert "a/m1 failed" in caplog.text and "trying b/m2" in caplog.text


async def test_after_the_last_model_one_error_lists_every_failure() -> None:
    hooks = FallbackHooks()
    first = ScriptedLLM([ScriptedResponse(error="HTTP 500 from http://secret-host/v1")])
    second = ScriptedLLM(["not json at all"])
    tool = sentiment_tool(model_preference=ModelPreference(preferred="a/m1", fallbacks=["b/m2"]))
    async with ModelPool({"a": lambda: first, "b": lambda: second}, hooks=hooks) as pool:
        recorder = RecordingHooks()
        result = await run(tool, pool, {"text": "x"}, hooks=recorder)
    assert result.status == "error"
    assert result.error.startswith("util.sentiment failed on 2 model(s): ")
    assert "a/m1: the model failed" in result.error
    assert "b/m2: the answer is not valid JSON: 'not json at all'" in result.error
    assert "secret-host" not in result.error  # internal text never reaches the model
    assert len(hooks.fallbacks) == 1  # no fallback event after the last model
    (end,) = recorder.of(ToolEndEvent)
    assert end.model_usage == result.model_usage
    assert result.model_usage.attempts == 2 and len(result.model_usage.failures) == 2
    assert "secret-host" in end.exception.failures[0]  # the full reason, for logs and hooks


async def test_model_resolution_compat_preferred_fallbacks_default_deduplicated() -> None:
    pool = ModelPool(
        {"a": ScriptedLLM, "b": ScriptedLLM, "c": ScriptedLLM},
        compat={"util:summarize": ["c/cheap", "a/m1"], "other:x@1.0.0": {"recommended": ["b/x"]}},
        default_model="a/m1",
    )
    assert pool.resolve("util:summarize@1.0.0", "a/m1", ["b/m2", "c/cheap"]) == [
        "c/cheap",
        "a/m1",
        "b/m2",
    ]
    assert pool.resolve("other:x@1.0.0", None, ()) == ["b/x", "a/m1"]
    assert pool.resolve("none:y@1.0.0", None, ()) == ["a/m1"]


async def test_compat_list_is_tried_before_the_preference() -> None:
    cheap = ScriptedLLM(["from the compat model"])
    pool = ModelPool({"a": ScriptedLLM, "c": lambda: cheap}, compat={"util:summarize": ["c/x"]})
    async with pool:
        result = await run(summarize_tool(), pool, {"text": "x"})
    assert result.result == "from the compat model"
    assert result.model_usage.model == "c/x"


async def test_providers_without_credentials_are_skipped() -> None:
    def no_key() -> Any:
        raise MissingCredentialsError("A_API_KEY")

    second = ScriptedLLM(["fine"])
    hooks = FallbackHooks()
    async with ModelPool({"a": no_key, "b": lambda: second}, hooks=hooks) as pool:
        result = await run(summarize_tool(), pool, {"text": "x"})
        assert result.result == "fine"
        assert result.model_usage.attempts == 1  # a skipped model is not an attempt
        assert hooks.fallbacks == []
        assert pool.unavailable("a") is not None


async def test_no_usable_provider_fails_before_any_request_naming_the_missing_keys() -> None:
    def no_key(*keys: str) -> Any:
        def factory() -> Any:
            raise MissingCredentialsError(*keys)

        return factory

    recorder = RecordingHooks()
    pool = ModelPool({"a": no_key("A_API_KEY"), "b": no_key("B_API_KEY", "B_ORG")})
    async with pool:
        result = await run(summarize_tool(), pool, {"text": "x"}, hooks=recorder)
    assert result.status == "error"
    assert "A_API_KEY" not in result.error  # the model is only told the tool failed
    (end,) = recorder.of(ToolEndEvent)
    error = end.exception
    assert isinstance(error, ModelUnavailableError)
    assert error.missing_keys == ("A_API_KEY", "B_API_KEY", "B_ORG")
    assert "set A_API_KEY or B_API_KEY or B_ORG" in str(error)
    assert result.model_usage.attempts == 0


async def test_a_model_of_a_provider_the_pool_lacks_is_skipped() -> None:
    second = ScriptedLLM(["ok"])
    async with ModelPool({"b": lambda: second}) as pool:
        result = await run(summarize_tool(), pool, {"text": "x"})
    assert result.result == "ok"
    assert "no factory for provider 'a'" in result.model_usage.failures[0]


async def test_variants_by_model_match_then_default_then_first() -> None:
    variants = [
        PromptVariant("small", provider_match=["local/"], user_template="Short: {{text}}"),
        PromptVariant("big", provider_match="gpt-4o", system_prompt="Be thorough.", max_tokens=99),
        PromptVariant("plain", is_default=True, user_template="Plain: {{text}}", temperature=0.3),
    ]
    llms = {name: ScriptedLLM(["done"]) for name in ("local", "openai", "other")}
    pool = ModelPool({name: (lambda llm=llm: llm) for name, llm in llms.items()})
    async with pool:
        for preferred in ("local/q", "openai/gpt-4o-mini", "other/x"):
            tool = summarize_tool(
                variants=variants, model_preference=ModelPreference(preferred=preferred)
            )
            assert (await run(tool, pool, {"text": "T"})).status == "ok"
    local, openai, other = (llms[name].requests[0] for name in ("local", "openai", "other"))
    assert local.messages[1].content == "Short: T"
    assert openai.messages[0].content == "Be thorough." and openai.settings.max_tokens == 99
    assert other.messages[1].content == "Plain: T" and other.settings.temperature == 0.3
    no_default = [variants[1], variants[0]]
    llm = ScriptedLLM(["done"])
    tool = summarize_tool(variants=no_default, model_preference=ModelPreference(preferred="z/q"))
    async with ModelPool({"z": lambda: llm}) as pool:
        await run(tool, pool, {"text": "T"})
    assert llm.requests[0].messages[0].content == "Be thorough."  # the first variant


async def test_prepare_input_and_resolve_max_tokens() -> None:
    seen: list[MaxTokensContext] = []

    def prepare(values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "words": len(values["text"].split())}

    def size(values: dict[str, Any], ctx: MaxTokensContext) -> int:
        seen.append(ctx)
        return 10 + values["words"]

    llm = ScriptedLLM(["ok"])
    tool = summarize_tool(
        user_template="Summarise these {{words}} words: {{text}}",
        prepare_input=prepare,
        resolve_max_tokens=size,
        model_preference=ModelPreference(preferred="a/m1", max_tokens=500, temperature=0.1),
    )
    async with ModelPool({"a": lambda: llm}) as pool:
        await run(tool, pool, {"text": "one two three"})
    request = llm.requests[0]
    assert request.messages[1].content == "Summarise these 3 words: one two three"
    assert request.settings.max_tokens == 13
    assert request.settings.temperature == 0.1
    (ctx,) = seen
    assert (ctx.model_id, ctx.provider, ctx.model) == ("a/m1", "a", "m1")
    assert ctx.input_tokens > 0


async def test_model_usage_on_the_span() -> None:
    telemetry = InMemoryTelemetry()
    llm = ScriptedLLM(["ok"], model="served-name")
    async with ModelPool({"a": lambda: llm}) as pool:
        result = await run(summarize_tool(), pool, {"text": "x"}, hooks=telemetry.hooks)
    span = telemetry.span("execute_tool util.summarize")
    assert span.attributes["gen_ai.response.model"] == "a/m1"
    assert span.attributes["llmrtc.tool.model_attempts"] == 1
    assert span.attributes["gen_ai.usage.output_tokens"] == result.model_usage.output_tokens


async def test_without_a_pool_the_call_fails_with_an_internal_error() -> None:
    recorder = RecordingHooks()
    executor = ToolExecutor(ToolRegistry([summarize_tool()]), hooks=recorder)
    (result,) = await executor.execute([ToolCall("c1", "util__summarize", {"text": "x"})])
    assert result.status == "error"
    assert "ModelPool" in str(recorder.of(ToolEndEvent)[0].exception)


def test_definition_errors_are_raised_when_the_tool_is_defined() -> None:
    with pytest.raises(ValueError, match=r"namespace:name@1\.0\.0"):
        summarize_tool(id="summarize")
    with pytest.raises(ValueError, match=r"uses \['missing'\]"):
        summarize_tool(user_template="{{missing}}")
    with pytest.raises(ValueError, match="output_format='json'"):
        summarize_tool(output_schema={"type": "object"})
    with pytest.raises(ValueError, match="provider/model"):
        ModelPreference(preferred="gpt-4o")
    with pytest.raises(ValueError, match="output_schema"):
        sentiment_tool(output_schema={"type": "nope"})
    with pytest.raises(ValueError, match="share an id"):
        summarize_tool(variants=[PromptVariant("v"), PromptVariant("v")])
    with pytest.raises(ValueError, match="only one"):
        summarize_tool(
            variants=[PromptVariant("v", is_default=True), PromptVariant("w", is_default=True)]
        )
    with pytest.raises(ValueError, match="max_tokens"):
        ModelPreference(max_tokens=0)
    with pytest.raises(ValueError, match="variant 'v' sets output_example"):
        summarize_tool(variants=[PromptVariant("v", output_example={"a": 1})])


async def test_an_async_prepare_input_and_a_variant_example() -> None:
    async def prepare(values: dict[str, Any]) -> dict[str, Any]:
        return {**values, "text": values["text"].upper()}

    llm = ScriptedLLM(['{"label": "neutral"}'])
    tool = sentiment_tool(
        prepare_input=prepare,
        variants=[PromptVariant("a", provider_match="a/", output_example={"label": "neutral"})],
    )
    async with ModelPool({"a": lambda: llm}) as pool:
        result = await run(tool, pool, {"text": "fine"})
    assert result.result == {"label": "neutral"}
    system, user = llm.requests[0].messages
    assert user.content == "Text: FINE"
    assert '{"label": "neutral"}' in system.content and "0.9" not in system.content


def test_model_usage_type_is_the_contract_one() -> None:
    assert ModelUsage("a/b").attempts == 1


async def test_otel_span_carries_the_model_usage_and_each_fallback() -> None:
    telemetry = InMemoryTelemetry()
    first = ScriptedLLM([ScriptedResponse(error="HTTP 500 from http://secret-host/v1")])
    second = ScriptedLLM(["Summary by m2."])
    pool_hooks = telemetry.new_hooks()
    async with ModelPool({"a": lambda: first, "b": lambda: second}, hooks=pool_hooks) as pool:
        result = await run(summarize_tool(), pool, {"text": "x"}, hooks=telemetry.hooks)
    assert result.status == "ok"
    (span,) = [s for s in telemetry.spans() if s.name.startswith("execute_tool")]
    assert span.attributes["gen_ai.response.model"] == "b/m2"
    assert span.attributes["llmrtc.tool.model_attempts"] == 2
    (event,) = [e for e in span.events if e.name == "llmrtc.tool.model_fallback"]
    assert event.attributes["llmrtc.tool.failed_model"] == "a/m1"
    assert event.attributes["llmrtc.tool.next_model"] == "b/m2"
    assert "secret-host" not in str(dict(event.attributes))
