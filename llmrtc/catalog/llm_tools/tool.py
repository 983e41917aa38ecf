"""`define_llm_tool` and `LLMTool`: a tool whose handler is a prompt to a model, run on a
`ModelPool` with model fallback, and registered and executed like any other tool.

Example:
    summarize = define_llm_tool(
        id="util:summarize@1.0.0",
        description="Summarise a text.",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}},
                      "required": ["text"]},
        system_prompt="You summarise texts faithfully.",
        user_template="Summarise: {{text}}",
        model_preference=ModelPreference(preferred="local/qwen2.5-coder-1.5b",
                                         fallbacks=["openai/gpt-4o-mini"]),
    )
    executor = ToolExecutor(ToolRegistry([summarize]), models=ModelPool({...}))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from llmrtc.catalog.llm_tools.run import PromptRunner
from llmrtc.catalog.llm_tools.spec import (
    UNSET,
    LLMToolSpec,
    MaxTokensContext,
    ModelPreference,
    OutputFormat,
    PromptVariant,
    schema_error,
)
from llmrtc.catalog.llm_tools.text import template_names
from llmrtc.tools.arguments import compile_validator
from llmrtc.tools.definition import ExecutionPolicy, InterruptPolicy, ToolDefinition
from llmrtc.tools.ids import parse_tool_id
from llmrtc.tools.tool import Tool

__all__ = ["LLMTool", "define_llm_tool"]


class LLMTool(Tool):
    """A `Tool` made by `define_llm_tool`: its handler prompts a model of `ctx.models`."""

    __slots__ = ("spec",)

    def __init__(self, definition: ToolDefinition, spec: LLMToolSpec) -> None:
        """Bind the prompt runner for `spec` to `definition`."""
        self.spec = spec
        """The prompt, output and model settings."""
        super().__init__(definition, PromptRunner(definition, spec).run)


def define_llm_tool(
    *,
    id: str,
    description: str,
    input_schema: dict[str, Any],
    user_template: str,
    system_prompt: str = "",
    output_format: OutputFormat = "text",
    output_schema: dict[str, Any] | None = None,
    output_example: Any = None,
    variants: Sequence[PromptVariant] = (),
    model_preference: ModelPreference | None = None,
    prepare_input: Callable[[dict[str, Any]], Any] | None = None,
    resolve_max_tokens: Callable[[dict[str, Any], MaxTokensContext], int | None] | None = None,
    resolve_output_schema: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    timeout: float | None = None,
    execution_policy: ExecutionPolicy | None = None,
    on_interrupt: InterruptPolicy = "cancel",
    sensitive_fields: Sequence[str] = (),
    tags: Sequence[str] = (),
    aliases: Sequence[str] = (),
    examples: Sequence[Mapping[str, Any]] = (),
) -> LLMTool:
    """Define a tool answered by a model: its input fills a prompt, the model's answer (text,
    or JSON checked against `output_schema`) is its result.

    A call runs through `ToolExecutor` like any other (policy, timeout, abort, argument
    validation, hooks, one result); the executor's `models` pool supplies the model. The
    models tried are the pool's compat list for this tool, then `model_preference.preferred`,
    its `fallbacks` and the pool's default; models whose provider lacks credentials are
    skipped, and a failing model (HTTP error, unparseable JSON, empty answer) hands over to
    the next with an `on_model_fallback` hook and a warning. The models used, attempts and
    tokens are on the result's `model_usage`.

    Args:
        id: `namespace:name@semver` (`util:summarize@1.0.0`); the tool is named
            `namespace.name`.
        description: What the tool does, for the calling model.
        input_schema: JSON Schema of the arguments (`type: object`); its top-level `default`s
            fill missing arguments before the template is rendered.
        user_template: The user message, with `{{name}}` (or `{{name.field}}`) placeholders
            for arguments; strings go in as they are, other values as JSON, absent ones as
            nothing.
        system_prompt: The system prompt (also a template).
        output_format: `"text"` (the stripped answer is the result) or `"json"`: the system
            prompt gets the output schema, the example and a JSON-only instruction, the schema
            goes as `response_format` where the server honours it, and the JSON value is read
            from the answer even inside fences or prose.
        output_schema: For `"json"`: the result's JSON Schema. A result not matching it is a
            warning (`on_tool_warning` hook and the log), not an error.
        output_example: For `"json"`: an example result shown in the system prompt.
        variants: Prompt wording per model (`PromptVariant`), chosen per model tried.
        model_preference: The models and sampling defaults (`ModelPreference`).
        prepare_input: `prepare_input(values) -> values` (sync or async): reshape the
            arguments (defaults filled) before rendering; its keys are the template's
            variables.
        resolve_max_tokens: `resolve_max_tokens(values, MaxTokensContext) -> int | None`: the
            output limit per request (e.g. from the input's length); None keeps the variant's
            or preference's.
        resolve_output_schema: For `"json"`: `resolve_output_schema(values) -> schema | None`:
            the output schema of one call, built from its input (an enum of the labels given,
            the schema a caller asks to extract into); used in the prompt, as
            `response_format` and for the warning check, in place of `output_schema`. A schema
            it returns that is not valid JSON Schema fails the call with a `ToolError`.
        timeout, execution_policy, on_interrupt, sensitive_fields, tags, aliases, examples:
            As for `ToolDefinition`.

    Raises:
        ValueError: for a malformed id, schema, model id or variant, a template naming an
            undeclared argument (without `prepare_input`), or JSON options with text output.
    """
    parsed = parse_tool_id(id)
    if parsed.namespace is None or parsed.version is None:
        raise ValueError(f"tool id {id!r}: an LLM tool id is 'namespace:name@1.0.0'")
    if output_format not in ("json", "text"):
        raise ValueError(
            f"tool {id!r}: output_format must be 'json' or 'text', got {output_format!r}"
        )
    json_options = (output_schema, output_example, resolve_output_schema)
    if output_format == "text" and any(option is not None for option in json_options):
        raise ValueError(
            f"tool {id!r}: output_schema, output_example and resolve_output_schema describe "
            "JSON output; set output_format='json'"
        )
    definition = ToolDefinition(
        name=parsed.name,
        namespace=parsed.namespace,
        version=parsed.version,
        description=description,
        parameters=input_schema,
        timeout=timeout,
        execution_policy=execution_policy,
        on_interrupt=on_interrupt,
        sensitive_fields=sensitive_fields,
        tags=tags,
        aliases=aliases,
        examples=examples,
    )
    validator = None
    if output_schema is not None:
        try:
            validator = compile_validator(output_schema)
        except ValueError as exc:
            raise ValueError(f"tool {id!r}: output_schema: {schema_error(exc)}") from None
    variants = tuple(variants)
    _check_variants(id, variants, json_output=output_format == "json")
    if prepare_input is None:
        declared = set(definition.parameters.get("properties", {}))  # type: ignore[union-attr]
        texts = [user_template, system_prompt]
        texts += [t for v in variants for t in (v.user_template, v.system_prompt) if t]
        unknown = sorted({name for text in texts for name in template_names(text)} - declared)
        if unknown:
            raise ValueError(
                f"tool {id!r}: the prompt uses {unknown} but input_schema declares only "
                f"{sorted(declared)}; declare them or build them in prepare_input"
            )
    spec = LLMToolSpec(
        tool_id=definition.tool_id,
        input_schema=definition.parameters,  # type: ignore[arg-type]
        output_schema=output_schema,
        system_prompt=system_prompt,
        user_template=user_template,
        output_format=output_format,
        output_example=output_example,
        variants=variants,
        model_preference=model_preference or ModelPreference(),
        prepare_input=prepare_input,
        resolve_max_tokens=resolve_max_tokens,
        resolve_output_schema=resolve_output_schema,
        output_validator=validator,
    )
    return LLMTool(definition, spec)


def _check_variants(
    tool_id: str, variants: tuple[PromptVariant, ...], *, json_output: bool
) -> None:
    ids = [variant.id for variant in variants]
    if len(set(ids)) != len(ids):
        raise ValueError(f"tool {tool_id!r}: two prompt variants share an id ({ids})")
    if sum(variant.is_default for variant in variants) > 1:
        raise ValueError(f"tool {tool_id!r}: only one prompt variant may be is_default")
    for variant in variants:
        if not isinstance(variant, PromptVariant):
            raise ValueError(f"tool {tool_id!r}: variants must be PromptVariant, got {variant!r}")
        if not json_output and variant.output_example is not UNSET:
            raise ValueError(
                f"tool {tool_id!r}: variant {variant.id!r} sets output_example, which only JSON "
                "output uses; set output_format='json'"
            )
