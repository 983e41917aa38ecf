"""Requests to a model and the typed events its streamed answer is made of."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from llmrtc.llm.messages import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from llmrtc.llm.settings import ModelSettings
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.definition import ToolDefinition

__all__ = [
    "LLMDone",
    "LLMEvent",
    "LLMRequest",
    "LLMResponse",
    "LLMTextDelta",
    "LLMToolCall",
    "StopReason",
    "ToolChoice",
    "Usage",
]

ToolChoice = Literal["auto", "required", "none"] | Mapping[str, str]
"""`"auto"`, `"required"`, `"none"`, or `{"name": "tool_name"}` to force one tool."""

StopReason = Literal["stop", "length", "tool_calls", "content_filter", "aborted"]
"""Why a model response ended; `aborted` when the caller's abort signal stopped it."""

AnyMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage


@dataclass(frozen=True)
class LLMRequest:
    """One request to a model. Options left as None use the provider's defaults."""

    messages: Sequence[AnyMessage]
    """The conversation, system prompt first."""
    tools: Sequence[ToolDefinition] = ()
    """The tools the model may call."""
    tool_choice: ToolChoice = "auto"
    """Whether and which tools the model must call."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Model name and sampling options; what is None uses the provider's defaults."""
    routable_names: Sequence[str] = ()
    """Tools that are answered when called but are not offered (a discovery-mode catalog's real
    tools, auto-routed; refused tools, answered with the refusal). Never shown to the model; a
    provider that finds calls in text accepts calls naming them (dotted or wire form) instead
    of dropping them as unknown."""
    continues_chain: bool = False
    """The last tool results only prepare another call (they came from a `ChainStep` such as
    `search_tools`): tools stay offered even where a profile omits them after tool results."""
    response_format: Mapping[str, Any] | None = None
    """An OpenAI `response_format` for the answer, e.g. `{"type": "json_schema",
    "json_schema": {"name": "out", "schema": {...}, "strict": True}}`; sent where the provider's
    compat profile says the server honours it (`CompatProfile.response_format`)."""

    def __post_init__(self) -> None:
        choice = self.tool_choice
        if isinstance(choice, Mapping):
            if set(choice) != {"name"} or not isinstance(choice["name"], str):
                raise ValueError(f"tool_choice must be {{'name': str}}, got {choice!r}")
            if choice["name"] not in {t.name for t in self.tools}:
                raise ValueError(
                    f"tool_choice names {choice['name']!r}, which is not among the request's "
                    f"tools {[t.name for t in self.tools]}"
                )
        elif choice not in ("auto", "required", "none"):
            raise ValueError(
                f"tool_choice must be 'auto', 'required', 'none' or {{'name': ...}}, got {choice!r}"
            )


@dataclass(frozen=True)
class Usage:
    """Token counts of one or more model requests (0 where the server reported none)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of `input_tokens`, those the server took from its prompt cache instead of processing
    them again (`usage.prompt_tokens_details.cached_tokens`, as OpenAI and llama.cpp report
    it): a warm prefix shows here."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cached_input_tokens + other.cached_input_tokens,
        )

    @property
    def processed_input_tokens(self) -> int:
        """Input tokens the server had to process (not taken from its prompt cache)."""
        return self.input_tokens - self.cached_input_tokens

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class LLMTextDelta:
    """A piece of answer text, as soon as it is decided to be text (never a tool call)."""

    text: str


@dataclass(frozen=True, slots=True)
class LLMToolCall:
    """A complete tool call, as soon as its arguments are complete. `call.arguments` keeps
    the raw string the model produced, so malformed JSON reaches the executor."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class LLMDone:
    """The last event of every stream."""

    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    """The model that answered, as the server reported it."""


LLMEvent = LLMTextDelta | LLMToolCall | LLMDone
"""What `LLMProvider.stream()` yields."""


@dataclass(frozen=True)
class LLMResponse:
    """A whole model answer, as `LLMProvider.complete()` returns it."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    stop_reason: StopReason
    usage: Usage
    model: str | None = None

    def to_message(self) -> AssistantMessage:
        """The answer as an `AssistantMessage` for the history."""
        return AssistantMessage(
            content=self.text,
            tool_calls=self.tool_calls,
            interrupted=self.stop_reason == "aborted",
        )
