"""`ScriptedLLM`: a deterministic model for fast tests of turn loops, playbooks and bots."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from llmrtc.abort import AbortController, AbortSignal
from llmrtc.errors import LLMRTCError
from llmrtc.llm.messages import AssistantMessage, SystemMessage, ToolMessage
from llmrtc.llm.prompting import PromptCompletion, PromptLike, complete_prompt
from llmrtc.llm.provider import LLMError, collect_response
from llmrtc.llm.types import (
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

__all__ = ["ScriptExhaustedError", "ScriptedLLM", "ScriptedResponse"]


class ScriptExhaustedError(LLMRTCError, AssertionError):
    """A request arrived after the last scripted response."""


@dataclass(frozen=True)
class ScriptedResponse:
    """One scripted model response."""

    text: str | None = None
    """Answer text, streamed in small deltas."""
    tool_calls: Sequence[ToolCall] = ()
    """Tool calls, yielded after the text."""
    delay: float = 0.0
    """Seconds before the first delta (an abort during the wait ends the response)."""
    error: BaseException | str | None = None
    """Raise this (a string becomes an `LLMError`): instead of answering, or, with `text` or
    `tool_calls`, after streaming the text and before the calls (a server failing mid-stream,
    as llama.cpp does when it cannot parse the model's output)."""
    chunk_delay: float = 0.0
    """Seconds between text deltas (to abort in the middle of streaming text)."""


ScriptEntry = str | Sequence[ToolCall] | ScriptedResponse


def _as_response(entry: ScriptEntry) -> ScriptedResponse:
    if isinstance(entry, ScriptedResponse):
        return entry
    if isinstance(entry, str):
        return ScriptedResponse(text=entry)
    return ScriptedResponse(tool_calls=tuple(entry))


def check_chat_messages(messages: Sequence[Any]) -> None:
    """Raise `AssertionError` where a chat API would reject the conversation: a first message
    that is not the system prompt, an assistant tool call without its tool message, or a tool
    message without its call."""
    if not messages or not isinstance(messages[0], SystemMessage):
        raise AssertionError(f"the first message must be the system prompt, got {messages[:1]!r}")
    open_calls: dict[str, ToolCall] = {}
    for position, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            if message.call_id not in open_calls:
                raise AssertionError(
                    f"message {position}: tool message for call {message.call_id!r} has no "
                    "matching assistant tool call before it"
                )
            del open_calls[message.call_id]
            continue
        if open_calls:
            raise AssertionError(
                f"message {position}: tool calls {sorted(open_calls)} have no tool message"
            )
        if isinstance(message, AssistantMessage):
            open_calls = {call.call_id: call for call in message.tool_calls}
    if open_calls:
        raise AssertionError(f"tool calls {sorted(open_calls)} have no tool message")


class ScriptedLLM:
    """Answers each request with the next scripted entry and records every request.

    `script` has one entry per model request: a `str` (a text answer), a list of `ToolCall`
    (a tool-call response), or a `ScriptedResponse`. It fails loudly on a request beyond the
    script and on a conversation a chat API would reject.

    Example:
        llm = ScriptedLLM([[ToolCall("c1", "lookupWeather", {"city": "Tokyo"})], "Sunny, 21°C."])
        ...
        llm.assert_consumed()
    """

    provider_name = "llmrtc.scripted"

    def __init__(self, script: Sequence[ScriptEntry], *, model: str = "scripted") -> None:
        """Script the responses, in request order."""
        self.model = model
        self._script = [_as_response(entry) for entry in script]
        self._next = 0
        self.requests: list[LLMRequest] = []
        """Every request received, in order."""

    @property
    def remaining(self) -> int:
        """Scripted responses not used yet."""
        return len(self._script) - self._next

    def assert_consumed(self) -> None:
        """Raise `AssertionError` if scripted responses are left."""
        if self.remaining:
            raise AssertionError(
                f"{self.remaining} scripted response(s) never requested: "
                f"{self._script[self._next :]!r}"
            )

    async def complete(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> LLMResponse:
        """The whole scripted answer."""
        return await collect_response(self.stream(request, abort_signal=abort_signal))

    async def complete_prompt(
        self, prompt: PromptLike, *, abort_signal: AbortSignal | None = None
    ) -> PromptCompletion:
        """One system + user prompt, no tools, the whole answer (what LLM-backed tools call)."""
        return await complete_prompt(self, prompt, abort_signal=abort_signal)

    async def stream(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[LLMEvent]:
        """Stream the next scripted answer."""
        self.requests.append(request)
        check_chat_messages(request.messages)
        if self._next >= len(self._script):
            raise ScriptExhaustedError(
                f"request {len(self.requests)} arrived but the script has only "
                f"{len(self._script)} response(s); last message: {request.messages[-1]!r}"
            )
        response = self._script[self._next]
        self._next += 1
        if response.error is not None and not (response.text or response.tool_calls):
            raise self._error(response.error)
        # Without a signal, one that never aborts: every wait is then the same (and even a
        # zero delay is a checkpoint, as a real stream's network reads are).
        signal = abort_signal if abort_signal is not None else AbortController().signal
        if not await signal.sleep(response.delay):
            yield LLMDone("aborted")
            return
        produced = 0
        for index, piece in enumerate(_pieces(response.text or "")):
            if index and not await signal.sleep(response.chunk_delay):
                yield LLMDone("aborted", Usage(_count(request), produced))
                return
            produced += 1
            yield LLMTextDelta(piece)
        if response.error is not None:
            raise self._error(response.error)
        for call in response.tool_calls:
            yield LLMToolCall(call)
        reason: StopReason = "tool_calls" if response.tool_calls else "stop"
        yield LLMDone(
            reason, Usage(_count(request), produced + len(response.tool_calls)), self.model
        )

    def _error(self, error: BaseException | str) -> BaseException:
        return LLMError(error, provider=self.provider_name) if isinstance(error, str) else error


def _pieces(text: str) -> list[str]:
    """Word-sized deltas that join back to exactly `text`."""
    pieces: list[str] = []
    for word in text.split(" "):
        pieces.append(word if not pieces else " " + word)
    return [p for p in pieces if p]


def _count(request: LLMRequest) -> int:
    return sum(len(getattr(m, "content", "").split()) for m in request.messages)
