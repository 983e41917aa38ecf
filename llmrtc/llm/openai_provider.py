"""`OpenAIProvider`: the one code path for OpenAI and every OpenAI-compatible server (vLLM,
Ollama, llama.cpp servers, LM Studio, the offline default model)."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.llm._aborting import abort_scope, aborted
from llmrtc.llm.chat_stream import stream_events, usage_of
from llmrtc.llm.compat import CompatProfile, RetryPolicy
from llmrtc.llm.errors import connection_errors, describe_failure
from llmrtc.llm.formats import CallFormat, ToolCallFormat, format_for
from llmrtc.llm.grammar import ARGUMENTS_GRAMMAR, call_prefix
from llmrtc.llm.messages import AssistantMessage, SystemMessage, ToolMessage
from llmrtc.llm.prompting import PromptCompletion, PromptLike, complete_prompt
from llmrtc.llm.provider import LLMError, collect_response
from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.tool_routing import (
    answered_message,
    chosen,
    grounded,
    router_grammar,
    router_messages,
    routes,
)
from llmrtc.llm.types import (
    LLMDone,
    LLMEvent,
    LLMRequest,
    LLMResponse,
    LLMTextDelta,
    LLMToolCall,
    Usage,
)
from llmrtc.llm.wire import message_to_openai
from llmrtc.tools.definition import ToolDefinition

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIProvider", "ToolCallFormat"]

logger = logging.getLogger(__name__)


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
            tool_call_format: `"native"`, `"text"`, `"auto"` or `"composed"` (see
                `ToolCallFormat`; each is a strategy in `llmrtc.llm.formats`).
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
        call_format = format_for(
            tool_call_format,
            composed_output_schema=composed_output_schema,
            composed_allow_both=composed_allow_both,
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
        self.call_format: CallFormat = call_format
        """The strategy of `tool_call_format`: what goes into a request, how content is read."""
        if retry is not None and retry.for_tools_only:
            raise ValueError(
                "RetryPolicy.retry_on, attempt_timeout and retry_side_effects apply to tool "
                "calls only (@tool(retry=...)); a model request retries connection failures "
                "and, with retry_status_errors, HTTP 429 and 5xx"
            )
        self.retry = retry or RetryPolicy()
        self.compat = compat or CompatProfile()
        self.request_timeout = request_timeout
        self.settings = settings or ModelSettings()
        self.stream_usage = stream_usage
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
        forced, spent = await self._route(request, abort_signal)
        params = self._params(request, force=forced)
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
                reader = self.call_format.reader(
                    request, tools_sent=self._sends_tools(request) and not dropped_tools
                )
                if forced is not None:
                    reader.feed(call_prefix(forced.wire_name))  # the prefilled start
                events = stream_events(response, request, abort_signal, reader)
                async with aclosing(events) as stream:
                    if forced is not None:
                        # A routed call: held until its arguments are checked against what
                        # the user said; a made-up one is dropped and the model answers freely.
                        held = [event async for event in stream]
                        call = next((e.call for e in held if isinstance(e, LLMToolCall)), None)
                        done = held[-1] if held and isinstance(held[-1], LLMDone) else None
                        if done is not None and done.stop_reason == "aborted":
                            yield _with_usage(done, spent)  # an unchecked call is no call
                            return
                        if call is None or not grounded(call, forced, request):
                            logger.info(
                                "routed call to %s not grounded in what the user said (%s); "
                                "answering without routing",
                                forced.name,
                                call.arguments if call is not None else "no call",
                            )
                            spent = spent + (done.usage if done is not None else Usage())
                            forced = None
                            params = self._params(request)
                            continue
                        for event in held:
                            called = called or isinstance(event, LLMToolCall)
                            yield _with_usage(event, spent)
                        return
                    async for event in stream:
                        if isinstance(event, LLMTextDelta):
                            said.append(event.text)
                        elif isinstance(event, LLMToolCall):
                            called = True
                        yield _with_usage(event, spent)
                return
            except self._retry_errors as exc:
                if forced is not None:
                    # The routed request failed: answer as without routing (a retry of the
                    # forced request would skip the check of its call).
                    logger.info("routed request failed (%s); answering without routing", exc)
                    forced = None
                    params = self._params(request)
                    continue
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

    async def _route(
        self, request: LLMRequest, abort_signal: AbortSignal | None
    ) -> tuple[ToolDefinition | None, Usage]:
        """The tool `compat.route_tools` says the user's message needs, or None (no routing
        here, the router said none, failed or was aborted: the model then decides alone),
        and the tokens the router's request used."""
        if not (self.compat.route_tools and self.call_format.name == "text"):
            return None, Usage()
        if not self._sends_tools(request):
            return None, Usage()
        tools = routes(request)
        message = answered_message(request)
        if not tools or message is None:
            return None, Usage()
        answer = ""
        usage = Usage()
        try:
            with abort_scope(abort_signal) as scope:
                params: dict[str, Any] = {
                    "model": request.settings.model or self.model,
                    "messages": router_messages(tools, message.content),
                    # A name is never more tokens than characters.
                    "max_tokens": max(len(t.wire_name) for t in tools) + 4,
                    "temperature": 0.0,
                    "stream": True,
                    "extra_body": {"grammar": router_grammar(tools)},
                }
                if self.stream_usage:
                    params["stream_options"] = {"include_usage": True}
                response = await self.client.chat.completions.create(**params)
                async with response:
                    async for chunk in response:
                        for choice in chunk.choices:
                            answer += choice.delta.content or ""
                        if chunk.usage is not None:
                            usage = usage_of(chunk.usage)
        except self._retry_errors as exc:
            logger.info("tool router failed (%s); the model decides alone", exc)
            return None, usage
        if scope.cancelled_caught:
            return None, usage  # the answer's request sees the abort at once
        tool = chosen(tools, answer)
        logger.debug("tool router: %r -> %s", message.content, tool.name if tool else "none")
        return tool, usage

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
        return self.retry.delay(attempt)

    # The request -------------------------------------------------------------------------

    def _sends_tools(self, request: LLMRequest) -> bool:
        """Whether tools go with this request (in the API's field, the prompt or the schema)."""
        if not request.tools or request.tool_choice == "none":
            return False
        after_results = bool(request.messages) and isinstance(request.messages[-1], ToolMessage)
        # Results that only prepare the next call (a discovery search) leave the model midway
        # through its task: omitting the tools then would force a premature answer.
        omit = self.compat.omit_tools_after_tool_results and not request.continues_chain
        return not (omit and after_results)

    def _params(
        self,
        request: LLMRequest,
        *,
        withhold_tools: bool = False,
        prefill: str = "",
        force: ToolDefinition | None = None,
    ) -> dict[str, Any]:
        """The keyword arguments of `chat.completions.create` for `request` (`force`: the
        answer is a call to that tool, the router's choice)."""
        sent = self._sends_tools(request) and not withhold_tools
        grammar = None
        if force is not None:
            # The call is decided: its frame is prefilled, the model writes the arguments.
            grammar = ARGUMENTS_GRAMMAR
            prefill = call_prefix(force.wire_name)
        elif (
            self.compat.grammar
            and request.tools
            and not withhold_tools
            # A response_format constrains decoding itself: one constraint per request.
            and not (request.response_format is not None and self.compat.response_format)
        ):
            # Tools that may not be called now (after tool results, tool_choice "none") stay
            # in the prompt, with a grammar that allows prose only: the prompt is the same
            # bytes as the request that called, so the server reuses its cached prefix.
            grammar = self.call_format.grammar(request, calls=sent)
        params: dict[str, Any] = {
            "model": request.settings.model or self.model,
            "messages": self._messages(request, sent=sent or grammar is not None),
            "stream": True,
        }
        if grammar is not None:
            params["extra_body"] = {"grammar": grammar}
        if prefill:
            # A trailing assistant message: llama.cpp (and others) continue it, so an answer
            # cut by a server error resumes where the user's copy of it stops.
            params["messages"].append({"role": "assistant", "content": prefill})
        if self.stream_usage:
            params["stream_options"] = {"include_usage": True}
        settings = self.settings.merged(request.settings)
        for name in ("temperature", "max_tokens", "top_p"):
            if (value := getattr(settings, name)) is not None:
                params[name] = value
        if request.response_format is not None and self.compat.response_format:
            params["response_format"] = dict(request.response_format)
        if sent:
            params.update(self.call_format.request_fields(request))
        return params

    def _messages(self, request: LLMRequest, *, sent: bool) -> list[Any]:
        """The messages of `request`, its system prompt extended with the format's tools
        section (`sent`: the tools are in the prompt) or the plain-answer hint."""
        compat = self.compat
        extra: list[str] = []
        if sent:
            extra = self.call_format.prompt(request, compat)
        elif compat.plain_answer_hint and (request.tools or _mentions_tools(request.messages)):
            # Only where a call could be written (tools withheld, or calls earlier in the
            # conversation): a tool-free prompt that asks for JSON (an LLM-backed tool's) must
            # not be told "no JSON".
            extra.append(compat.plain_answer_hint)
        text_mode = self.call_format.history_as_text
        messages = list(request.messages)
        out: list[dict[str, Any]] = []
        if extra and not (messages and isinstance(messages[0], SystemMessage)):
            out.append({"role": "system", "content": "\n\n".join(extra)})
            extra = []
        for index, message in enumerate(messages):
            if index == 0 and isinstance(message, SystemMessage) and extra:
                # Appended, never varied: the prompt stays byte-identical across turns so a
                # server's prefix cache keeps hitting.
                out.append({"role": "system", "content": "\n\n".join([message.content, *extra])})
            else:
                out.append(message_to_openai(message, text_mode=text_mode))
        return out


def _with_usage(event: LLMEvent, spent: Usage) -> LLMEvent:
    """`event`, its usage including `spent` (the router's request and a dropped routed call)
    when it is the `LLMDone`: what the answer cost, not only its last request."""
    if isinstance(event, LLMDone) and spent.total_tokens:
        return dataclasses.replace(event, usage=event.usage + spent)
    return event


def _mentions_tools(messages: Sequence[Any]) -> bool:
    """Whether the conversation has tool calls or results (a model may imitate them)."""
    return any(
        isinstance(m, ToolMessage) or (isinstance(m, AssistantMessage) and m.tool_calls)
        for m in messages
    )
