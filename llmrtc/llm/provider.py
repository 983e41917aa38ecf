"""The `LLMProvider` protocol every model backend implements, and `LLMError`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Protocol, runtime_checkable

from llmrtc.abort import AbortSignal
from llmrtc.errors import LLMRTCError
from llmrtc.llm.types import LLMDone, LLMEvent, LLMRequest, LLMResponse, LLMTextDelta, LLMToolCall

__all__ = ["LLMError", "LLMProvider", "collect_response"]


class LLMError(LLMRTCError):
    """A model request failed for good (after any retries). The turn's history stays valid.

    Its message is one line meant for a person: what failed, where (the URL), what to do.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        retryable: bool = False,
        provider: str | None = None,
        url: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        """The HTTP status, when the server answered with one."""
        self.retryable = retryable
        """Whether the failure was of a kind worth retrying (it was, and still failed)."""
        self.provider = provider
        """`gen_ai.provider.name` of the provider that failed."""
        self.url = url
        """The API's base URL the request went to, when there is one."""


@runtime_checkable
class LLMProvider(Protocol):
    """A model backend. `stream()` is the one required capability; `complete()` collects it.

    Contract of `stream()`:
      - yields `LLMTextDelta` for text, `LLMToolCall` for each complete tool call (in the order
        the model made them), and exactly one `LLMDone` last;
      - when `abort_signal` is set it stops the underlying request at once and ends with
        `LLMDone(stop_reason="aborted")` instead of raising;
      - raises `LLMError` when the request fails for good;
      - closing the iterator early (`aclose()`) releases the request.
    """

    model: str
    """The default model name sent with requests."""
    provider_name: str
    """`gen_ai.provider.name` for telemetry, e.g. `openai`, `llmrtc.local`, `llmrtc.scripted`."""

    def stream(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[LLMEvent]:
        """Stream the answer to `request`."""
        ...

    async def complete(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> LLMResponse:
        """The whole answer to `request` (built on `stream()`)."""
        ...


async def collect_response(events: AsyncIterator[LLMEvent]) -> LLMResponse:
    """Gather a stream into an `LLMResponse` (what `complete()` implementations return)."""
    text: list[str] = []
    calls = []
    done = LLMDone("stop")
    async with aclosing(events) as stream:  # type: ignore[type-var]
        async for event in stream:
            if isinstance(event, LLMTextDelta):
                text.append(event.text)
            elif isinstance(event, LLMToolCall):
                calls.append(event.call)
            else:
                done = event
    return LLMResponse("".join(text), tuple(calls), done.stop_reason, done.usage, done.model)
