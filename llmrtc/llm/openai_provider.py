"""`OpenAIProvider`: the one code path for OpenAI and every OpenAI-compatible server (vLLM,
Ollama, llama.cpp servers, LM Studio, the offline default model)."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Literal

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.llm._aborting import abort_scope
from llmrtc.llm._request import request_params, sends_tools
from llmrtc.llm._response import aborted, stream_events
from llmrtc.llm.compat import CompatProfile, RetryPolicy
from llmrtc.llm.errors import connection_errors, describe_failure
from llmrtc.llm.prompting import PromptCompletion, PromptLike, complete_prompt
from llmrtc.llm.provider import LLMError, collect_response
from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.types import LLMDone, LLMEvent, LLMRequest, LLMResponse, LLMTextDelta, LLMToolCall

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIProvider", "ToolCallFormat"]

logger = logging.getLogger(__name__)

ToolCallFormat = Literal["native", "text", "auto", "composed"]
"""`native`: tools go in the API's `tools` field and calls come back structured. `text`: tool
schemas go into the system prompt and calls are parsed from the answer text (the server never
parses a call, so it cannot fail on one). `auto`: native, and calls a model writes as text are
still recognised (no schemas in the prompt). `composed`: the tools and the answer become one
JSON schema (seed 002's `{calls, output}`: either calls or an answer) sent as
`response_format`; the server constrains decoding to it (llama.cpp does), so no call is
malformed or names an undeclared tool; `output` is streamed as text, the calls become tool
calls; the API's `tools` field is not sent (its root `anyOf` suits llama.cpp; OpenAI's strict
structured outputs want an object root, so no `strict` is sent). It needs a server that honours
`response_format` (refused with `compat.response_format` False). A server that ignores the
schema is still read: a composed object after a preamble or in a code fence is parsed, never
spoken; a composed call naming an undeclared tool is kept (the executor answers `not_found`);
an object cut short ends with stop reason `length`. In `text`, `auto` and a `composed` answer
written as plain text, call-shaped JSON naming no declared tool is dropped, in every request,
with or without tools."""


class OpenAIProvider:
    """Streams chat completions through the real `openai` client.

    Example:
        llm = OpenAIProvider("gpt-4o-mini")  # OPENAI_API_KEY from the environment
        local = OpenAIProvider("qwen", base_url="http://127.0.0.1:8080/v1", api_key="x")

    Tool-call deltas are assembled by index and each call is yielded as soon as it is complete,
    with the raw argument string kept (malformed JSON reaches the executor as
    `invalid_arguments`, never silently `{}`). Transient failures (HTTP 429, 5xx, connection
    errors) are retried as `retry` says, with a backoff an abort interrupts; other 4xx fail at
    once. A server's quirks are handled as its `compat` profile says.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        tool_call_format: ToolCallFormat = "native",
        retry: RetryPolicy | None = None,
        compat: CompatProfile | None = None,
        request_timeout: float = 60.0,
        settings: ModelSettings | None = None,
        stream_usage: bool = True,
        provider_name: str = "openai",
        composed_output_schema: Mapping[str, Any] | None = None,
        composed_allow_both: bool = False,
    ) -> None:
        """Create a provider.

        Args:
            model: Model name sent with every request (a request may override it).
            base_url: An OpenAI-compatible server, e.g. `http://127.0.0.1:8080/v1`.
            api_key: Defaults to `OPENAI_API_KEY`; servers at a `base_url` may need none.
            client: A ready `openai.AsyncOpenAI` (then base_url/api_key/timeout are unused).
            tool_call_format: `"native"`, `"text"` or `"auto"` (see `ToolCallFormat`).
            retry: When failed requests are tried again (default `RetryPolicy()`).
            compat: The server's quirks (default: none; see `llmrtc.llm.local.LLAMA_CPP_PROFILE`).
            request_timeout: Seconds for the HTTP request (read timeout between stream chunks).
            settings: Defaults for every request; a request's own settings override them
                field by field (the local model uses temperature 0).
            stream_usage: Ask for token usage in the stream (`stream_options.include_usage`).
            provider_name: `gen_ai.provider.name` reported to telemetry.
            composed_output_schema: In the `composed` format, the schema of the answer
                (`output`); default a string, streamed as the answer text. Any other schema's
                value is given as one JSON text at the end. A request's own
                `response_format` (JSON schema or JSON object) takes its place for that request.
            composed_allow_both: In the `composed` format, send seed 002's own shape: an
                object root whose `output` may be null, each call the tool's parameters
                flattened beside `"_tool": <name>`, so calls and an answer may come together.
                By default the model writes calls or an answer, never both (small models
                invent answers beside their calls). Both shapes are read either way. A request
                offering a tool with a parameter named `_tool` uses the nested shape
                (warned once per tool).
                Only with `tool_call_format="composed"`.

        Raises:
            ValueError: without an API key for the OpenAI API itself, for bad options, or for
                the `composed` format with a `compat` profile whose server ignores
                `response_format` (the format is one).
        """
        if tool_call_format not in ("native", "text", "auto", "composed"):
            raise ValueError(
                "tool_call_format must be 'native', 'text', 'auto' or 'composed', "
                f"got {tool_call_format!r}"
            )
        if composed_output_schema is not None and not isinstance(composed_output_schema, Mapping):
            raise ValueError(
                "composed_output_schema must be a JSON Schema dict or None, "
                f"got {type(composed_output_schema).__name__}"
            )
        if not isinstance(composed_allow_both, bool):
            raise ValueError(
                f"composed_allow_both must be True or False, got {composed_allow_both!r}"
            )
        if composed_allow_both and tool_call_format != "composed":
            raise ValueError(
                "composed_allow_both=True shapes the composed format's schema, but "
                f"tool_call_format is {tool_call_format!r}: pass tool_call_format='composed' "
                "or leave composed_allow_both out"
            )
        if tool_call_format == "composed" and compat is not None and not compat.response_format:
            # The composed format IS a response_format: without one the server writes free
            # text, and the calls it meant are guessed from text at best. Refused, not degraded
            # silently: tool_call_format="text" is the honest choice for such a server.
            raise ValueError(
                "tool_call_format='composed' needs a server that honours response_format, but "
                "compat.response_format is False; use tool_call_format='text' (or 'native')"
            )
        self.model = model
        self.provider_name = provider_name
        self.tool_call_format: ToolCallFormat = tool_call_format
        self.retry = retry or RetryPolicy()
        self.compat = compat or CompatProfile()
        self.request_timeout = request_timeout
        self.settings = settings or ModelSettings()
        self.stream_usage = stream_usage
        self.composed_output_schema = composed_output_schema
        self.composed_allow_both = composed_allow_both
        self.composed_nested_for: set[str] = set()
        """Tools (with a `_tool` parameter) that made `allow_both` requests use the nested
        shape; each is warned about once."""
        import openai  # here, not at module import: `import llmrtc` stays light

        if client is None:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            if key is None:
                if base_url is None:
                    raise ValueError(
                        "no API key: pass api_key=..., set OPENAI_API_KEY, or give the "
                        "base_url of a server that needs none"
                    )
                key = "not-needed"
            # Retries are ours (abortable, and only before anything streamed): the client's
            # own would sleep through a barge-in.
            # Our own HTTP client: the one openai makes for itself closes itself from its
            # finaliser on whatever event loop is running then, and its connections may belong
            # to a loop that has ended ("Event loop is closed" in an unrelated task).
            client = openai.AsyncOpenAI(
                api_key=key,
                base_url=base_url,
                max_retries=0,
                timeout=request_timeout,
                http_client=openai.DefaultAsyncHttpxClient(),
            )
        self.client = client
        self._connection_errors = connection_errors()
        # APIError: HTTP status errors, and error events inside a stream.
        self._retry_errors: tuple[type[Exception], ...] = (
            openai.APIError,
            *self._connection_errors,
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={str(self.client.base_url)!r})"

    @property
    def base_url(self) -> str:
        """The API's URL, e.g. `https://api.openai.com/v1/`."""
        return str(self.client.base_url)

    async def complete(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> LLMResponse:
        """The whole answer to `request`."""
        return await collect_response(self.stream(request, abort_signal=abort_signal))

    async def complete_prompt(
        self, prompt: PromptLike, *, abort_signal: AbortSignal | None = None
    ) -> PromptCompletion:
        """One system + user prompt, no tools, the whole answer (what LLM-backed tools call)."""
        return await complete_prompt(self, prompt, abort_signal=abort_signal)

    async def stream(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[LLMEvent]:
        """Stream the answer: text deltas, complete tool calls, then one `LLMDone`."""
        params = self._params(request)
        attempt = 0
        dropped_tools = False
        said: list[str] = []  # text already yielded: never yielded twice
        called = False
        while True:
            if abort_signal is not None and abort_signal.aborted:
                yield LLMDone("aborted")
                return
            try:
                with abort_scope(abort_signal) as scope:
                    response = await self.client.chat.completions.create(**params)
                if scope.cancelled_caught:
                    yield LLMDone("aborted")
                    return
                if aborted(scope, abort_signal):
                    # Aborted while `create` finished without a checkpoint: the stream is open.
                    with anyio.CancelScope(shield=True):
                        await response.close()
                    yield LLMDone("aborted")
                    return
                events = stream_events(
                    response,
                    request,
                    abort_signal,
                    native=self.tool_call_format == "native",
                    composed=self.tool_call_format == "composed"
                    and self._sends_tools(request)
                    and not dropped_tools,
                )
                async with aclosing(events) as stream:
                    async for event in stream:
                        if isinstance(event, LLMTextDelta):
                            said.append(event.text)
                        elif isinstance(event, LLMToolCall):
                            called = True
                        yield event
                return
            except self._retry_errors as exc:
                status = getattr(exc, "status_code", None)
                # An error event inside the stream (no status, not a connection failure) is how
                # llama.cpp reports output it could not parse once streaming has begun.
                in_stream = status is None and not isinstance(exc, self._connection_errors)
                if (
                    (status == 500 or in_stream)
                    and self.compat.retry_without_tools
                    and self._sends_tools(request)
                    and not dropped_tools
                    and not called
                    and (not said or self.compat.continue_after_stream_error)
                ):
                    logger.info(
                        "%s failed with tools offered (%s); answering again without tools%s",
                        self.provider_name,
                        "HTTP 500" if status == 500 else "error in the stream",
                        ", continuing the streamed text" if said else "",
                    )
                    params = self._params(request, withhold_tools=True, prefill="".join(said))
                    dropped_tools = True
                    continue
                if said or called:
                    raise self._error(exc, retryable=False) from exc
                retryable = (status is None and not in_stream) or (
                    status is not None
                    and (status == 429 or status >= 500)
                    and self.retry.retry_status_errors
                )
                if not retryable or attempt >= self.retry.max_retries:
                    raise self._error(exc, retryable=retryable) from exc
                delay = self._backoff(attempt, exc)
                attempt += 1
                logger.info("transient model error (%s); retry %d in %.2f s", exc, attempt, delay)
                with abort_scope(abort_signal) as scope:
                    await anyio.sleep(delay)
                if scope.cancelled_caught:
                    yield LLMDone("aborted")
                    return

    def _error(self, exc: BaseException, *, retryable: bool) -> LLMError:
        status = getattr(exc, "status_code", None)
        return LLMError(
            describe_failure(
                exc,
                url=self.base_url,
                model=self.model,
                timeout=self.request_timeout,
                connection_errors=self._connection_errors,
            ),
            status_code=status,
            retryable=retryable,
            provider=self.provider_name,
            url=self.base_url,
        )

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        response = getattr(exc, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after is not None:
            try:
                return min(float(retry_after), self.retry.max_delay)
            except ValueError:
                pass  # an HTTP date: fall back to our own backoff
        delay = self.retry.base_delay * (2**attempt)
        return float(min(delay * random.uniform(0.8, 1.2), self.retry.max_delay))

    # Request and response (built and read in `_request` / `_response`) ---------------------

    def _sends_tools(self, request: LLMRequest) -> bool:
        return sends_tools(self, request)

    def _params(
        self, request: LLMRequest, *, withhold_tools: bool = False, prefill: str = ""
    ) -> dict[str, Any]:
        return request_params(self, request, withhold_tools=withhold_tools, prefill=prefill)
