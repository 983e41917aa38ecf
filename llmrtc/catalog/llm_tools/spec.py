"""What an LLM-backed tool asks for: its models and sampling (`ModelPreference`), prompt
wording per model (`PromptVariant`), what sizes a request (`MaxTokensContext`), and everything
`define_llm_tool` was given (`LLMToolSpec`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from llmrtc.catalog.llm_tools.model_pool import parse_model_id

__all__ = [
    "UNSET",
    "LLMToolSpec",
    "MaxTokensContext",
    "ModelPreference",
    "OutputFormat",
    "PromptVariant",
    "schema_error",
    "select_variant",
]

OutputFormat = Literal["json", "text"]
"""`"text"`: the answer, stripped, is the result. `"json"`: the JSON value in the answer is."""

UNSET: Any = object()
"""A `PromptVariant` field not set (None is a value there: "show no output example")."""


@dataclass(frozen=True)
class ModelPreference:
    """The models an LLM-backed tool asks for, and its sampling defaults."""

    preferred: str | None = None
    """The `provider/model` id tried first (after the pool's compat list for the tool)."""
    fallbacks: Sequence[str] = ()
    """Tried in order when the models before fail (stored as a tuple)."""
    max_tokens: int | None = None
    """Output token limit, unless a variant or `resolve_max_tokens` sets one."""
    temperature: float | None = None
    """Sampling temperature, unless a variant sets one."""

    def __post_init__(self) -> None:
        if isinstance(self.fallbacks, str):
            raise ValueError("fallbacks must be a list of 'provider/model' ids, not one string")
        object.__setattr__(self, "fallbacks", tuple(self.fallbacks))
        for model_id in (
            *([self.preferred] if self.preferred is not None else []),
            *self.fallbacks,
        ):
            parse_model_id(model_id)
        _check_limits("ModelPreference", self.max_tokens, self.temperature)


@dataclass(frozen=True)
class PromptVariant:
    """Prompt wording for some models: the fields it sets replace the tool's own when the
    model tried matches (`select_variant`)."""

    id: str
    """Names the variant (unique within a tool)."""
    provider_match: str | Sequence[str] = ()
    """Substrings of the `provider/model` id this variant is for (`"local/"`, `"gpt-4o"`)."""
    is_default: bool = False
    """Used when no variant matches (else the first variant is)."""
    system_prompt: str | None = None
    """Replaces the tool's system prompt (a template too)."""
    user_template: str | None = None
    """Replaces the tool's user template."""
    output_example: Any = UNSET
    """Replaces the tool's output example (JSON output only; None shows none)."""
    max_tokens: int | None = None
    """Replaces the preference's output limit (`resolve_max_tokens` still overrides it)."""
    temperature: float | None = None
    """Replaces the preference's temperature."""

    def __post_init__(self) -> None:
        matches = (self.provider_match,) if isinstance(self.provider_match, str) else None
        object.__setattr__(self, "provider_match", matches or tuple(self.provider_match))
        if not isinstance(self.id, str) or not self.id:
            raise ValueError(f"a prompt variant needs a non-empty id, got {self.id!r}")
        _check_limits(f"variant {self.id!r}", self.max_tokens, self.temperature)

    def matches(self, model_id: str) -> bool:
        """Whether one of `provider_match` occurs in `model_id`."""
        return any(pattern and pattern in model_id for pattern in self.provider_match)


def select_variant(variants: Sequence[PromptVariant], model_id: str) -> PromptVariant | None:
    """The first variant matching `model_id`, else the default one, else the first, else
    None (no variants)."""
    for variant in variants:
        if variant.matches(model_id):
            return variant
    for variant in variants:
        if variant.is_default:
            return variant
    return variants[0] if variants else None


@dataclass(frozen=True, slots=True)
class MaxTokensContext:
    """What `resolve_max_tokens` knows about the request it sizes."""

    model_id: str
    """The `provider/model` id about to be asked."""
    provider: str
    model: str
    input_tokens: int
    """Estimated tokens of the system prompt and user message (`estimate_tokens`)."""


@dataclass(frozen=True)
class LLMToolSpec:
    """Everything `define_llm_tool` was given (see its arguments)."""

    tool_id: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    system_prompt: str
    user_template: str
    output_format: OutputFormat
    output_example: Any
    variants: tuple[PromptVariant, ...]
    model_preference: ModelPreference
    prepare_input: Callable[[dict[str, Any]], Any] | None = None
    resolve_max_tokens: Callable[[dict[str, Any], MaxTokensContext], int | None] | None = None
    resolve_output_schema: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
    output_validator: Any = field(default=None, repr=False)


def schema_error(exc: Exception) -> str:
    """`exc`, an output schema's error from `compile_validator`, worded for an output."""
    # compile_validator words its errors for tool parameters.
    return str(exc).replace("parameters is not", "not", 1).replace("parameters has", "it has", 1)


def _check_limits(where: str, max_tokens: int | None, temperature: float | None) -> None:
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ValueError(f"{where}: max_tokens must be an integer >= 1, got {max_tokens!r}")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not math.isfinite(temperature)
        or temperature < 0
    ):
        raise ValueError(f"{where}: temperature must be a number >= 0, got {temperature!r}")
