"""Reading a streamed chat-completions answer for `OpenAIProvider`: native tool-call deltas,
the content (through the tool-call format's `ContentReader`), usage, and the stop reason."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.llm._aborting import abort_scope, aborted
from llmrtc.llm.errors import TruncatedStreamError
from llmrtc.llm.formats import ContentReader
from llmrtc.llm.types import (
    LLMDone,
    LLMEvent,
    LLMRequest,
    LLMToolCall,
    StopReason,
    Usage,
)
from llmrtc.llm.wire import ToolCallAssembler

logger = logging.getLogger(__name__)

_END: Any = object()
"""What the stream's iterator gives at its end."""

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


async def stream_events(
    response: Any,
    request: LLMRequest,
    abort_signal: AbortSignal | None,
    reader: ContentReader,
) -> AsyncGenerator[LLMEvent, None]:
    """The events of one streamed response.

    Args:
        response: The openai stream.
        request: What was asked (its tools name the native calls).
        abort_signal: Stops reading (the stream is closed, so is the server's generation).
        reader: Reads the content, as the tool-call format says (native deltas are calls in
            every format).
    """
    calls = ToolCallAssembler([*(t.name for t in request.tools), *request.routable_names])
    emitted_calls = 0
    usage = Usage()
    model: str | None = None
    finish: str | None = None
    iterator = response.__aiter__()
    try:
        while True:
            # One scope per chunk: the yields below must stay outside any cancel scope.
            with abort_scope(abort_signal) as scope:
                chunk = await anext(iterator, _END)
            # A chunk already buffered comes without a checkpoint, so an abort that landed
            # meanwhile (while the consumer spoke the last delta) cancelled nothing: drop
            # the chunk all the same, nothing after a barge-in is said.
            if scope.cancelled_caught or aborted(scope, abort_signal):
                # Text before anything call-like; the rest is dropped.
                for event in reader.discard_undecided():
                    yield event
                yield LLMDone("aborted", usage, model)
                return
            if chunk is _END:
                break
            model = chunk.model or model
            if chunk.usage is not None:
                usage = usage_of(chunk.usage)
            for choice in chunk.choices:
                delta = choice.delta
                if delta is not None and delta.content:
                    for event in reader.feed(delta.content):
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
    for event in reader.finish():
        emitted_calls += isinstance(event, LLMToolCall)
        yield event
    stop: StopReason = _FINISH_REASONS.get(finish or "stop", "stop")
    if reader.cut_short:
        # A composed object cut short (max_tokens): its calls are lost, whatever the server
        # said. `length` lets the turn recover (asked again without tools if nothing was said).
        stop = "length"
    if emitted_calls and stop == "stop":
        stop = "tool_calls"  # servers differ; a response that called tools ended for them
    yield LLMDone(stop, usage, model)


def usage_of(reported: Any) -> Usage:
    """The chunk's `usage`, with the cached prompt tokens where the server says them."""
    details = getattr(reported, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return Usage(reported.prompt_tokens or 0, reported.completion_tokens or 0, cached or 0)
