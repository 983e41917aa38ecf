"""`OpenAIProvider`: the one code path for OpenAI and every OpenAI-compatible server (vLLM,
Ollama, llama.cpp servers, LM Studio, the offline default model)."""

from __future__ import annotations

import json
import logging
import os
import random
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, Literal

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.llm.messages import SystemMessage, ToolMessage, UserMessage
from llmrtc.llm.provider import LLMError, collect_response
from llmrtc.llm.settings import ModelSettings
from llmrtc.llm.text_tools import (
    TextToolCallParser,
    new_call_id,
    render_text_call,
    render_tool_prompt,
)
from llmrtc.llm.types import (
    AnyMessage,
    LLMDone,
    LLMEvent,
    LLMRequest,
    LLMResponse,
    LLMTextDelta,
    LLMToolCall,
    StopReason,
    Usage,
)
from llmrtc.tools.calls import ToolCall

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIProvider", "ToolCallFormat"]

logger = logging.getLogger(__name__)

ToolCallFormat = Literal["native", "text", "auto"]
"""`native`: tools go in the API's `tools` field and calls come back structured. `text`: tool
schemas go into the system prompt and calls are parsed from the answer text. `auto`: native,
and calls a model writes as text are still recognised (no schemas in the prompt)."""

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


class TruncatedStreamError(Exception):
    """The stream ended before the model said it had finished (no `finish_reason`)."""


def _connection_errors() -> tuple[type[Exception], ...]:
    """Failures to get an answer at all: the connection, the transport of whichever httpx the
    installed openai uses, or a stream cut short."""
    import openai

    errors: list[type[Exception]] = [openai.APIConnectionError, TruncatedStreamError]
    for module in ("httpx2", "httpx"):
        try:
            errors.append(__import__(module).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


class OpenAIProvider:
    """Streams chat completions through the real `openai` client.

    Example:
        llm = OpenAIProvider("gpt-4o-mini")  # OPENAI_API_KEY from the environment
        local = OpenAIProvider("qwen", base_url="http://127.0.0.1:8080/v1", api_key="x")

    Tool-call deltas are assembled by index and each call is yielded as soon as it is complete,
    with the raw argument string kept (malformed JSON reaches the executor as
    `invalid_arguments`, never silently `{}`). Transient failures (HTTP 429, 5xx, connection
    errors) are retried here with exponential backoff that an abort interrupts; other 4xx fail
    at once. Retries happen only before anything was streamed.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        tool_call_format: ToolCallFormat = "native",
        max_retries: int = 2,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 8.0,
        request_timeout: float = 60.0,
        settings: ModelSettings | None = None,
        tool_hint: str | None = None,
        retry_without_tools_on_server_error: bool = False,
        omit_tools_after_tool_results: bool = False,
        retry_server_errors: bool = True,
        stream_usage: bool = True,
        provider_name: str = "openai",
    ) -> None:
        """Create a provider.

        Args:
            model: Model name sent with every request (a request may override it).
            base_url: An OpenAI-compatible server, e.g. `http://127.0.0.1:8080/v1`.
            api_key: Defaults to `OPENAI_API_KEY`; servers at a `base_url` may need none.
            client: A ready `openai.AsyncOpenAI` (then base_url/api_key/timeout are unused).
            tool_call_format: `"native"`, `"text"` or `"auto"` (see `ToolCallFormat`).
            max_retries: Retries of transient failures (the openai client's own are off).
            retry_base_delay: First backoff delay in seconds; it doubles per retry, with jitter.
            retry_max_delay: Cap for one backoff delay (also for a server's `Retry-After`).
            request_timeout: Seconds for the HTTP request (read timeout between stream chunks).
            settings: Defaults for every request; a request's own settings override them
                field by field (the local model uses temperature 0).
            tool_hint: A sentence appended to the system prompt whenever tools are offered
                (small models need to be told to answer with the JSON object only).
            retry_without_tools_on_server_error: Retry once without tools when the server fails
                on a tool call (the llama.cpp server answers a call to an undeclared tool, or a
                call it cannot parse, with an HTTP 500 or an error inside the stream).
            omit_tools_after_tool_results: Send no tools with a request whose last message is
                a tool result (small local models then answer from the result instead of
                calling again; calls they still write as text are parsed).
            retry_server_errors: Retry HTTP 429/5xx (False for a local server, whose errors
                are deterministic); connection failures are retried either way.
            stream_usage: Ask for token usage in the stream (`stream_options.include_usage`).
            provider_name: `gen_ai.provider.name` reported to telemetry.

        Raises:
            ValueError: without an API key for the OpenAI API itself, or for bad options.
        """
        if tool_call_format not in ("native", "text", "auto"):
            raise ValueError(
                f"tool_call_format must be 'native', 'text' or 'auto', got {tool_call_format!r}"
            )
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.model = model
        self.provider_name = provider_name
        self.tool_call_format: ToolCallFormat = tool_call_format
        self.max_retries = max_retries
        self.retry_base_delay = retry_base_delay
        self.retry_max_delay = retry_max_delay
        self.settings = settings or ModelSettings()
        self.tool_hint = tool_hint
        self.retry_without_tools_on_server_error = retry_without_tools_on_server_error
        self.omit_tools_after_tool_results = omit_tools_after_tool_results
        self.retry_server_errors = retry_server_errors
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
            client = openai.AsyncOpenAI(
                api_key=key, base_url=base_url, max_retries=0, timeout=request_timeout
            )
        self.client = client
        self._connection_errors = _connection_errors()
        # APIError: HTTP status errors, and error events inside a stream.
        self._retry_errors: tuple[type[Exception], ...] = (
            openai.APIError,
            *self._connection_errors,
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={str(self.client.base_url)!r})"

    async def complete(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> LLMResponse:
        """The whole answer to `request`."""
        return await collect_response(self.stream(request, abort_signal=abort_signal))

    async def stream(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[LLMEvent]:
        """Stream the answer: text deltas, complete tool calls, then one `LLMDone`."""
        params = self._params(request)
        attempt = 0
        dropped_tools = False
        streamed = False
        while True:
            if abort_signal is not None and abort_signal.aborted:
                yield LLMDone("aborted")
                return
            try:
                response = await _until_aborted(
                    self.client.chat.completions.create(**params), abort_signal
                )
                if response is None:
                    yield LLMDone("aborted")
                    return
                async with aclosing(self._events(response, request, abort_signal)) as events:
                    async for event in events:
                        streamed = True
                        yield event
                return
            except self._retry_errors as exc:
                status = getattr(exc, "status_code", None)
                if streamed:
                    raise self._error(exc, status, retryable=False) from exc
                # An error event inside the stream (no status, not a connection failure) is how
                # llama.cpp reports a tool call it could not parse once streaming has begun.
                in_stream_error = status is None and not isinstance(exc, self._connection_errors)
                if (
                    (status == 500 or in_stream_error)
                    and self.retry_without_tools_on_server_error
                    and "tools" in params
                    and not dropped_tools
                ):
                    logger.info("HTTP 500 with tools offered: retrying once without tools")
                    params = {k: v for k, v in params.items() if k not in ("tools", "tool_choice")}
                    dropped_tools = True
                    continue
                retryable = (status is None and not in_stream_error) or (
                    status is not None
                    and (status == 429 or status >= 500)
                    and self.retry_server_errors
                )
                if not retryable or attempt >= self.max_retries:
                    raise self._error(exc, status, retryable=retryable) from exc
                delay = self._backoff(attempt, exc)
                attempt += 1
                logger.info("transient model error (%s); retry %d in %.2f s", exc, attempt, delay)
                if not await _sleep_unless_aborted(delay, abort_signal):
                    yield LLMDone("aborted")
                    return

    def _error(self, exc: BaseException, status: int | None, *, retryable: bool) -> LLMError:
        where = f"HTTP {status}" if status is not None else type(exc).__name__
        body = getattr(exc, "body", None)
        message = body.get("message") if isinstance(body, dict) else None
        message = message or getattr(exc, "message", None) or str(exc)
        return LLMError(
            f"{self.provider_name} request to model {self.model!r} failed: {where}: {message}",
            status_code=status,
            retryable=retryable,
            provider=self.provider_name,
        )

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        response = getattr(exc, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after is not None:
            try:
                return min(float(retry_after), self.retry_max_delay)
            except ValueError:
                pass  # an HTTP date: fall back to our own backoff
        delay = self.retry_base_delay * (2**attempt)
        return float(min(delay * random.uniform(0.8, 1.2), self.retry_max_delay))

    # Request ---------------------------------------------------------------------------

    def _params(self, request: LLMRequest) -> dict[str, Any]:
        text_mode = self.tool_call_format == "text"
        offered = bool(request.tools) and request.tool_choice != "none"
        params: dict[str, Any] = {
            "model": request.settings.model or self.model,
            "messages": self._messages(request, text_mode=text_mode, offered=offered),
            "stream": True,
        }
        if self.stream_usage:
            params["stream_options"] = {"include_usage": True}
        settings = self.settings.merged(request.settings)
        if settings.temperature is not None:
            params["temperature"] = settings.temperature
        if settings.max_tokens is not None:
            params["max_tokens"] = settings.max_tokens
        if settings.top_p is not None:
            params["top_p"] = settings.top_p
        after_results = bool(request.messages) and isinstance(request.messages[-1], ToolMessage)
        if self.omit_tools_after_tool_results and after_results:
            return params  # answer from the results; a call written as text is still parsed
        if request.tools and not text_mode:
            params["tools"] = [tool.to_openai() for tool in request.tools]
            choice = request.tool_choice
            if isinstance(choice, Mapping):
                params["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
            else:
                params["tool_choice"] = choice
        return params

    def _messages(
        self, request: LLMRequest, *, text_mode: bool, offered: bool
    ) -> list[dict[str, Any]]:
        extra: list[str] = []
        if offered and text_mode:
            extra.append(render_tool_prompt(request.tools))
            choice = request.tool_choice
            if isinstance(choice, Mapping):
                extra.append(f"You must call the tool {choice['name']} now.")
            elif choice == "required":
                extra.append("You must call one of the tools now.")
        if offered and self.tool_hint:
            extra.append(self.tool_hint)
        out: list[dict[str, Any]] = []
        for index, message in enumerate(request.messages):
            if index == 0 and isinstance(message, SystemMessage) and extra:
                # Appended, never varied: the prompt stays byte-identical across turns so a
                # server's prefix cache keeps hitting.
                out.append({"role": "system", "content": "\n\n".join([message.content, *extra])})
            else:
                out.append(_message_to_openai(message, text_mode=text_mode))
        return out

    # Response --------------------------------------------------------------------------

    async def _events(
        self, response: Any, request: LLMRequest, abort_signal: AbortSignal | None
    ) -> AsyncGenerator[LLMEvent, None]:
        parser = None
        if self.tool_call_format != "native" and request.tools:
            parser = TextToolCallParser([tool.name for tool in request.tools])
        calls = _CallAssembler()
        emitted_calls = 0
        usage = Usage()
        model: str | None = None
        finish: str | None = None
        iterator = response.__aiter__()
        try:
            while True:
                chunk = await _until_aborted(_next(iterator), abort_signal, default=_ABORTED)
                if chunk is _ABORTED:
                    for event in parser.discard_undecided() if parser else ():
                        yield event  # text before anything call-like; the rest is dropped
                    yield LLMDone("aborted", usage, model)
                    return
                if chunk is _END:
                    break
                model = chunk.model or model
                if chunk.usage is not None:
                    usage = Usage(
                        chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0
                    )
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta is not None and delta.content:
                        if parser is None:
                            yield LLMTextDelta(delta.content)
                        else:
                            for event in parser.feed(delta.content):
                                emitted_calls += isinstance(event, LLMToolCall)
                                yield event
                    for part in (delta.tool_calls if delta is not None else None) or ():
                        function = part.function
                        for call in calls.add(
                            part.index,
                            part.id,
                            function.name if function is not None else None,
                            function.arguments if function is not None else None,
                        ):
                            yield LLMToolCall(call)
                            emitted_calls += 1
                    if choice.finish_reason:
                        finish = choice.finish_reason
        finally:
            with anyio.CancelScope(shield=True):
                await response.close()  # stops the HTTP stream (and the server's generation)
        if finish is None:
            raise TruncatedStreamError("the stream ended before the model finished its answer")
        for call in calls.finish():
            yield LLMToolCall(call)
            emitted_calls += 1
        for event in parser.finish() if parser else ():
            emitted_calls += isinstance(event, LLMToolCall)
            yield event
        stop: StopReason = _FINISH_REASONS.get(finish or "stop", "stop")
        if emitted_calls and stop == "stop":
            stop = "tool_calls"  # servers differ; a response that called tools ended for them
        yield LLMDone(stop, usage, model)


_ABORTED = object()
_END = object()


async def _next(iterator: Any) -> Any:
    try:
        return await iterator.__anext__()
    except StopAsyncIteration:
        return _END


async def _until_aborted(awaitable: Any, signal: AbortSignal | None, default: Any = None) -> Any:
    """Await `awaitable`, cancelling it the moment `signal` aborts (then return `default`)."""
    if signal is None:
        return await awaitable
    with anyio.CancelScope() as scope:
        unsubscribe = signal.subscribe(scope.cancel)
        try:
            return await awaitable
        finally:
            unsubscribe()
    if hasattr(awaitable, "close"):
        awaitable.close()  # a coroutine cancelled before it started: no "never awaited"
    return default


async def _sleep_unless_aborted(seconds: float, signal: AbortSignal | None) -> bool:
    """Sleep; False if `signal` aborted meanwhile."""
    if signal is None:
        await anyio.sleep(seconds)
        return True
    with anyio.move_on_after(seconds):
        await signal.wait()
        return False
    return True


class _CallAssembler:
    """Builds tool calls from streamed deltas, whatever the server's habits.

    OpenAI sends each call under its own `index`; some servers reuse index 0 for every call
    (telling them apart by `id`), omit `index`, or interleave calls. A call is yielded early,
    before the stream ends, only when its arguments are complete JSON and every call before it
    was yielded, so the model's order is kept and no call is cut in half.
    """

    def __init__(self) -> None:
        self._slots: list[dict[str, Any]] = []  # in order of appearance
        self._yielded = 0

    def add(
        self, index: int | None, call_id: str | None, name: str | None, arguments: str | None
    ) -> list[ToolCall]:
        slot = self._slot_for(index, call_id)
        if call_id and not slot["id"]:
            slot["id"] = call_id
        if name:
            slot["name"] += name
        if arguments:
            slot["args"].append(arguments)
        return self._ready()

    def finish(self) -> list[ToolCall]:
        """Every call not yielded yet (malformed arguments included: the executor says so)."""
        ready = [_assembled(slot) for slot in self._slots[self._yielded :]]
        self._yielded = len(self._slots)
        return ready

    def _slot_for(self, index: int | None, call_id: str | None) -> dict[str, Any]:
        open_slots = self._slots[self._yielded :]
        if index is None:  # no index: an id starts a call, anything else continues the last
            if call_id or not open_slots:
                return self._new(index)
            return open_slots[-1]
        for slot in reversed(open_slots):
            if slot["index"] == index:
                if call_id and slot["id"] and call_id != slot["id"]:
                    return self._new(index)  # index reused for the next call
                found: dict[str, Any] = slot
                return found
        return self._new(index)

    def _new(self, index: int | None) -> dict[str, Any]:
        slot: dict[str, Any] = {"index": index, "id": None, "name": "", "args": []}
        self._slots.append(slot)
        return slot

    def _ready(self) -> list[ToolCall]:
        """Leading calls that are complete: a later call has started, and their JSON closes."""
        ready: list[ToolCall] = []
        while self._yielded < len(self._slots) - 1:
            slot = self._slots[self._yielded]
            try:
                json.loads("".join(slot["args"]) or "{}")
            except ValueError:
                break  # still streaming (interleaved), or malformed: decided at the end
            ready.append(_assembled(slot))
            self._yielded += 1
        return ready


def _assembled(slot: dict[str, Any]) -> ToolCall:
    return ToolCall(slot["id"] or new_call_id(), slot["name"], "".join(slot["args"]))


def _arguments_json(call: ToolCall) -> str:
    """A call's arguments as the JSON object string chat APIs require in history. A malformed
    string the model produced is replayed as `{}`: servers reject invalid JSON there, and its
    tool message already carries the parse error the model needs."""
    if not isinstance(call.arguments, str):
        return json.dumps(call.arguments)
    try:
        parsed = json.loads(call.arguments or "{}")
    except ValueError:
        return "{}"
    return call.arguments if isinstance(parsed, dict) else "{}"


def _message_to_openai(message: AnyMessage, *, text_mode: bool) -> dict[str, Any]:
    if isinstance(message, SystemMessage | UserMessage):
        return {"role": message.role, "content": message.content}
    if isinstance(message, ToolMessage):
        if text_mode:  # a model without tool support knows no "tool" role
            return {
                "role": "user",
                "content": f"<tool_response>\n{message.content}\n</tool_response>",
            }
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
    if text_mode:
        text = "\n".join([message.content, *map(render_text_call, message.tool_calls)]).strip()
        return {"role": "assistant", "content": text}
    out: dict[str, Any] = {"role": "assistant", "content": message.content or None}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments_json(call)},
            }
            for call in message.tool_calls
        ]
    return out


def to_openai_messages(
    messages: Sequence[AnyMessage], *, text_mode: bool = False
) -> list[dict[str, Any]]:
    """Messages in the chat-completions wire format (what `OpenAIProvider` sends)."""
    return [_message_to_openai(m, text_mode=text_mode) for m in messages]
