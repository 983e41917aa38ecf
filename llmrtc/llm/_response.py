"""Reading a streamed chat-completions answer for `OpenAIProvider`: text deltas, tool calls
(native deltas, calls written as text, or a composed JSON answer), usage, and the stop reason."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.llm._aborting import abort_scope
from llmrtc.llm._composed import ComposedAnswerParser
from llmrtc.llm.errors import TruncatedStreamError
from llmrtc.llm.text_tools import TextToolCallParser
from llmrtc.llm.types import (
    LLMDone,
    LLMEvent,
    LLMRequest,
    LLMTextDelta,
    LLMToolCall,
    StopReason,
    Usage,
)
from llmrtc.llm.wire import ToolCallAssembler

_END: Any = object()
"""What the stream's iterator gives at its end."""

_FINISH_REASONS: dict[str, StopReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "content_filter",
}


def aborted(scope: anyio.CancelScope, signal: AbortSignal | None) -> bool:
    """Whether the signal stopped the work of `scope`, also when the awaited call returned
    without a checkpoint (so the scope's cancellation was never delivered)."""
    return scope.cancel_called or (signal is not None and signal.aborted)


async def stream_events(
    response: Any,
    request: LLMRequest,
    abort_signal: AbortSignal | None,
    *,
    native: bool,
    composed: bool,
) -> AsyncGenerator[LLMEvent, None]:
    """The events of one streamed response.

    Args:
        response: The openai stream.
        request: What was asked (its tools decide which calls are accepted).
        abort_signal: Stops reading (the stream is closed, so is the server's generation).
        native: Only native tool-call deltas are calls (content is plain text).
        composed: The answer is a composed `{calls, output}` object (tools were sent as its
            schema); a server that wrote no JSON object is read as text calls instead.
    """
    parser = None
    if not native:
        # Every request, tools or not: call-shaped JSON is never text. With
        # tool_choice "none" no call is accepted; after a retry without tools (or tool
        # results) a call the model still writes to a declared tool is one.
        # Routable names (hidden, auto-routed tools) are accepted too: a text call to one is
        # a call the executor runs, not call-shaped noise to drop.
        offered = [] if request.tool_choice == "none" else [t.name for t in request.tools]
        routable = () if request.tool_choice == "none" else request.routable_names
        parser = TextToolCallParser(offered, routable)
    answer = (
        ComposedAnswerParser(request.tools, request.routable_names, parser) if composed else None
    )
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
                if answer is not None:
                    for event in answer.discard_undecided():
                        yield event
                elif parser is not None:
                    for event in parser.discard_undecided():
                        yield event
                yield LLMDone("aborted", usage, model)
                return
            if chunk is _END:
                break
            model = chunk.model or model
            if chunk.usage is not None:
                usage = Usage(chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
            for choice in chunk.choices:
                delta = choice.delta
                if delta is not None and delta.content:
                    events: list[LLMTextDelta | LLMToolCall]
                    if answer is not None:
                        events = answer.feed(delta.content)  # JSON, or text read by `parser`
                    elif parser is None:
                        events = [LLMTextDelta(delta.content)]
                    else:
                        events = parser.feed(delta.content)
                    for event in events:
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
    # The composed parser hands a text answer to `parser` itself.
    reader = answer if answer is not None else parser
    ends = reader.finish() if reader is not None else []
    for event in ends:
        emitted_calls += isinstance(event, LLMToolCall)
        yield event
    stop: StopReason = _FINISH_REASONS.get(finish or "stop", "stop")
    if answer is not None and not answer.complete:
        # A composed object cut short (max_tokens): its calls are lost, whatever the server
        # said. `length` lets the turn recover (asked again without tools if nothing was said).
        stop = "length"
    if emitted_calls and stop == "stop":
        stop = "tool_calls"  # servers differ; a response that called tools ended for them
    yield LLMDone(stop, usage, model)
