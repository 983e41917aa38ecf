"""The ready util tools (`util:summarize`, `util:classify`, `util:extract`) on `ScriptedLLM`:
what they send (prompt, token limit, the per-call output schema as `response_format`) and
what they return. Their behaviour on the real offline model is in
`test_util_tools_local_model.py`."""

from __future__ import annotations

from typing import Any

import pytest

from llmrtc.catalog.backend import LocalBackend
from llmrtc.catalog.llm_tools.model_pool import ModelPool
from llmrtc.catalog.llm_tools.util_tools import UTIL_TOOLS, classify, extract, summarize
from llmrtc.execution import ToolExecutor
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import RecordingHooks, ScriptedLLM
from llmrtc.tools import ToolCall, ToolRegistry

pytestmark = pytest.mark.anyio


async def call(llm: ScriptedLLM, name: str, arguments: dict[str, Any], **options: Any) -> Any:
    pool = ModelPool({"m": lambda: llm}, default_model="m/small")
    async with pool:
        executor = ToolExecutor(ToolRegistry(list(UTIL_TOOLS)), models=pool, **options)
        (result,) = await executor.execute([ToolCall("c1", name, arguments)])
    return result


async def test_summarize_sends_the_word_limit_and_focus_and_returns_text() -> None:
    llm = ScriptedLLM(["The shop opens at nine."])
    text = "Our shop, which sells bread, opens at nine every day except Sunday."
    result = await call(llm, "util__summarize", {"text": text, "max_words": 10, "focus": "hours"})
    assert result.result == "The shop opens at nine."
    request = llm.requests[0]
    user = request.messages[1].content
    assert user.startswith("Summarise the text below in at most 10 words: ")
    assert "Concentrate on: hours." in user
    assert user.endswith(text)
    assert request.settings.max_tokens == 52 and request.settings.temperature == 0.0
    assert request.settings.model == "small"
    await call(ScriptedLLM(["ok"]), "util__summarize", {"text": text})  # default max_words


async def test_classify_constrains_the_label_to_the_list_given() -> None:
    llm = ScriptedLLM(['{"label": "billing", "confidence": 0.9}'])
    arguments = {"text": "I was charged twice", "labels": ["billing", "shipping", "other"]}
    result = await call(llm, "util__classify", arguments)
    assert result.result == {"label": "billing", "confidence": 0.9}
    schema = llm.requests[0].response_format["json_schema"]["schema"]
    assert schema["properties"]["label"]["enum"] == ["billing", "shipping", "other"]
    assert 'Labels: "billing", "shipping", "other"' in llm.requests[0].messages[1].content


async def test_classify_warns_about_a_label_outside_the_list() -> None:
    class Warnings(RecordingHooks):
        def on_tool_warning(self, event: Any) -> None:
            self.calls.append(("on_tool_warning", event))

    warnings = Warnings()
    llm = ScriptedLLM(['{"label": "refund", "confidence": 0.5}'])
    arguments = {"text": "money back please", "labels": ["billing", "shipping"]}
    async with ModelPool({"m": lambda: llm}, default_model="m/x", hooks=warnings) as pool:
        executor = ToolExecutor(ToolRegistry([classify]), models=pool)
        (result,) = await executor.execute([ToolCall("c1", "util__classify", arguments)])
    assert result.status == "ok"
    (warning,) = [event for name, event in warnings.calls if name == "on_tool_warning"]
    assert "label" in warning.message and warning.code == "output_schema_mismatch"


async def test_extract_fills_the_schema_given() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "date": {"type": "string"}},
        "required": ["name"],
    }
    llm = ScriptedLLM(['{"name": "Ada Lovelace", "date": "1843-07-10"}'])
    text = "On 1843-07-10 Ada Lovelace published her notes."
    result = await call(llm, "util__extract", {"text": text, "schema": schema})
    assert result.result == {"name": "Ada Lovelace", "date": "1843-07-10"}
    request = llm.requests[0]
    assert request.response_format["json_schema"]["schema"] == schema
    assert '"name": {"type": "string"}' in request.messages[0].content


async def test_extract_refuses_an_invalid_schema_in_words_the_model_can_act_on() -> None:
    hooks = RecordingHooks()
    llm = ScriptedLLM([])
    arguments = {"text": "x", "schema": {"type": "object", "properties": {"a": {"type": 3}}}}
    result = await call(llm, "util__extract", arguments, hooks=hooks)
    assert result.status == "error"
    assert "util.extract: the output schema is invalid" in result.error
    assert "parameters" not in result.error
    assert llm.requests == []
    assert hooks.of(ToolEndEvent)[0].model_usage is None  # no model was asked


def test_util_tools_live_in_a_backend_under_their_ids() -> None:
    backend = LocalBackend(UTIL_TOOLS, name="util")
    assert [tool.definition.tool_id for tool in UTIL_TOOLS] == [
        "util:summarize@1.0.0",
        "util:classify@1.0.0",
        "util:extract@1.0.0",
    ]
    assert backend.name == "util" and summarize in UTIL_TOOLS and extract in UTIL_TOOLS
