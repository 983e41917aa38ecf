"""`complete_prompt`: one system + user prompt in, one text answer out, for tools that call a
model themselves (LLM-backed tools, `llmrtc.catalog.define_llm_tool`).

The catalog (floor 1) may not import this floor, so it declares what it needs as a protocol: an
object with `complete_prompt(prompt, *, abort_signal)` that reads the prompt's attributes and
returns an object with `text`, `model`, `input_tokens` and `output_tokens`. `OpenAIProvider`
and `llmrtc.testing.ScriptedLLM` have that method; any other `LLMProvider` gets it from
`PromptCompleter(provider)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from llmrtc.abort import AbortSignal
from llmrtc.llm.messages import SystemMessage, UserMessage
from llmrtc.llm.provider import LLMProvider
from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.types import LLMRequest

__all__ = ["PromptCompleter", "PromptCompletion", "PromptLike", "complete_prompt"]


class PromptLike(Protocol):
    """What `complete_prompt` reads from a prompt (the catalog's `ToolPrompt` has it)."""

    @property
    def system(self) -> str:
        """The system prompt."""
        ...

    @property
    def user(self) -> str:
        """The user message."""
        ...

    @property
    def model(self) -> str | None:
        """The model name for this request (the `model` part of `provider/model`)."""
        ...

    @property
    def max_tokens(self) -> int | None:
        """Output token limit."""
        ...

    @property
    def temperature(self) -> float | None:
        """Sampling temperature."""
        ...

    @property
    def response_format(self) -> Mapping[str, Any] | None:
        """An OpenAI `response_format` (e.g. the output schema as `json_schema`)."""
        ...


@dataclass(frozen=True, slots=True)
class PromptCompletion:
    """The answer to one prompt."""

    text: str
    """The answer text (whole)."""
    model: str | None
    """The model that answered, as the server reported it (None if it did not)."""
    input_tokens: int | None
    """Prompt tokens, when the server reported usage."""
    output_tokens: int | None
    """Completion tokens, when the server reported usage."""
    stop_reason: str
    """Why the answer ended (`stop`, `length`, `aborted`, ...)."""


async def complete_prompt(
    provider: LLMProvider, prompt: PromptLike, *, abort_signal: AbortSignal | None = None
) -> PromptCompletion:
    """Send `prompt` (system + user, no tools) to `provider` and collect the answer.

    Raises:
        LLMError: the request failed (the provider's own retries are already spent).
    """
    request = LLMRequest(
        [SystemMessage(prompt.system), UserMessage(prompt.user)],
        settings=ModelSettings(
            model=prompt.model, max_tokens=prompt.max_tokens, temperature=prompt.temperature
        ),
        response_format=prompt.response_format,
    )
    response = await provider.complete(request, abort_signal=abort_signal)
    usage = response.usage
    reported = usage.input_tokens or usage.output_tokens  # 0/0: the server sent no usage
    return PromptCompletion(
        text=response.text,
        model=response.model,
        input_tokens=usage.input_tokens if reported else None,
        output_tokens=usage.output_tokens if reported else None,
        stop_reason=response.stop_reason,
    )


class PromptCompleter:
    """Gives any `LLMProvider` the `complete_prompt` method LLM-backed tools call.

    Example:
        pool = ModelPool({"mine": lambda: PromptCompleter(MyProvider())})
    """

    def __init__(self, provider: LLMProvider) -> None:
        """Wrap `provider`."""
        self.provider = provider
        """The wrapped provider."""

    async def complete_prompt(
        self, prompt: PromptLike, *, abort_signal: AbortSignal | None = None
    ) -> PromptCompletion:
        """`complete_prompt(self.provider, prompt)`."""
        return await complete_prompt(self.provider, prompt, abort_signal=abort_signal)

    async def aclose(self) -> None:
        """Close the wrapped provider if it can be closed."""
        close = getattr(self.provider, "aclose", None)
        if close is not None:
            await close()
