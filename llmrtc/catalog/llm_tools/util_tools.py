"""Ready LLM-backed tools: `util:summarize`, `util:classify` and `util:extract`.

They run on the models of the executor's `ModelPool` (its compat list for the tool id, else
its `default_model`), and their prompts are written for the offline default model
(Qwen2.5-Coder 1.5B): short, literal instructions, temperature 0, and for the JSON tools a
per-call output schema sent as `response_format`, so llama.cpp's constrained decoding makes a
label outside the list, or output outside the caller's schema, impossible.

Example:
    catalog = ToolCatalog([LocalBackend(UTIL_TOOLS, name="util")])
    async with ModelPool({"local": open_default_provider},
                         default_model="local/qwen2.5-coder-1.5b") as pool:
        executor = ToolExecutor(registry, models=pool)
"""

from __future__ import annotations

from typing import Any

from llmrtc.catalog.llm_tools.spec import MaxTokensContext, ModelPreference
from llmrtc.catalog.llm_tools.tool import LLMTool, define_llm_tool

__all__ = ["UTIL_TOOLS", "classify", "extract", "summarize"]

_DETERMINISTIC = ModelPreference(temperature=0.0)


def _summary_input(values: dict[str, Any]) -> dict[str, Any]:
    focus = values.get("focus")
    return {**values, "focus_line": f" Concentrate on: {focus}." if focus else ""}


def _summary_tokens(values: dict[str, Any], ctx: MaxTokensContext) -> int:
    # About 1.3 tokens per English word, doubled for other languages and numbers, plus room
    # for the last sentence to end.
    return 2 * int(values["max_words"]) + 32


summarize: LLMTool = define_llm_tool(
    id="util:summarize@1.0.0",
    description="Summarise a text in a few sentences, keeping only what the text says.",
    input_schema={
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "description": "The text to summarise."},
            "max_words": {
                "type": "integer",
                "minimum": 5,
                "maximum": 500,
                "default": 60,
                "description": "Longest summary wanted, in words.",
            },
            "focus": {
                "type": "string",
                "description": "What the summary should concentrate on (optional).",
            },
        },
        "required": ["text"],
    },
    system_prompt=(
        "You summarise texts faithfully. Use only facts stated in the text; never add facts "
        "or opinions of your own. Write plain sentences: no title, no bullet points, no "
        "preamble such as 'Here is a summary'."
    ),
    user_template=(
        "Summarise the text below in at most {{max_words}} words: keep only its main "
        "points.{{focus_line}}\n\nText:\n{{text}}"
    ),
    prepare_input=_summary_input,
    resolve_max_tokens=_summary_tokens,
    model_preference=_DETERMINISTIC,
    tags=("summarize", "summary", "text"),
    aliases=("summarise", "condense", "tl;dr"),
)
"""`util:summarize@1.0.0`: `{text, max_words=60, focus?}` → the summary (a string)."""


def _classify_input(values: dict[str, Any]) -> dict[str, Any]:
    labels = ", ".join(f'"{label}"' for label in values["labels"])
    notes = values.get("instructions")
    return {**values, "label_list": labels, "notes": f"\n{notes}" if notes else ""}


def _classify_schema(values: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": list(values["labels"])},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["label", "confidence"],
    }


classify: LLMTool = define_llm_tool(
    id="util:classify@1.0.0",
    description="Pick the one label from a given list that fits a text best.",
    input_schema={
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "description": "The text to classify."},
            "labels": {
                "type": "array",
                "items": {"type": "string", "minLength": 1},
                "minItems": 2,
                "uniqueItems": True,
                "description": "The labels to choose from.",
            },
            "instructions": {
                "type": "string",
                "description": "What the labels mean or how to choose (optional).",
            },
        },
        "required": ["text", "labels"],
    },
    system_prompt=(
        "You classify texts. Read the text, decide what it is mainly about, and answer with "
        "the one label from the list that names it. confidence is how sure you are, from 0 "
        "to 1."
    ),
    # The labels after the text: small models weigh what they read last.
    user_template=(
        "Text:\n{{text}}\n\nLabels: {{label_list}}{{notes}}\nWhich one label fits this text best?"
    ),
    output_format="json",
    output_schema={
        "type": "object",
        "properties": {"label": {"type": "string"}, "confidence": {"type": "number"}},
        "required": ["label", "confidence"],
    },
    resolve_output_schema=_classify_schema,
    prepare_input=_classify_input,
    model_preference=ModelPreference(temperature=0.0, max_tokens=64),
    tags=("classify", "label", "categorize", "text"),
    aliases=("categorise", "sentiment", "intent"),
)
"""`util:classify@1.0.0`: `{text, labels, instructions?}` → `{"label": one of labels,
"confidence": 0..1}`."""


def _extract_input(values: dict[str, Any]) -> dict[str, Any]:
    notes = values.get("instructions")
    return {**values, "notes": f"{notes}\n\n" if notes else ""}


extract: LLMTool = define_llm_tool(
    id="util:extract@1.0.0",
    description=(
        "Extract structured data from a text into a JSON object shaped by a given JSON Schema."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "description": "The text to read."},
            "schema": {
                "type": "object",
                "description": (
                    'JSON Schema of the object to fill, e.g. {"type": "object", "properties": '
                    '{"name": {"type": "string"}}}.'
                ),
            },
            "instructions": {
                "type": "string",
                "description": "Hints on what to extract (optional).",
            },
        },
        "required": ["text", "schema"],
    },
    system_prompt=(
        "You extract data from texts. Fill the fields of the output schema with information "
        "stated in the text, copying names, numbers and dates as they are written. Never "
        "invent a value: leave out a field the text does not give (use null where the schema "
        "allows it)."
    ),
    user_template="{{notes}}Text:\n{{text}}",
    output_format="json",
    resolve_output_schema=lambda values: values["schema"],
    prepare_input=_extract_input,
    model_preference=ModelPreference(temperature=0.0, max_tokens=512),
    tags=("extract", "structured", "parse", "json"),
    aliases=("extraction", "fill a form", "structured output"),
)
"""`util:extract@1.0.0`: `{text, schema, instructions?}` → an object matching `schema` (a
mismatch is a warning, as for every LLM tool)."""

UTIL_TOOLS: tuple[LLMTool, ...] = (summarize, classify, extract)
"""The three ready tools, e.g. for `LocalBackend(UTIL_TOOLS, name="util")`."""
