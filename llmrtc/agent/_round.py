"""One turn's running state, and one model round of it: the request, and its response streamed
with its hook events."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from llmrtc.abort import AbortSignal
from llmrtc.agent.events import TextDelta, TurnStopReason
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.settings import TurnSettings
from llmrtc.llm.messages import AssistantMessage, ToolMessage
from llmrtc.llm.provider import LLMProvider
from llmrtc.llm.types import LLMDone, LLMRequest, LLMTextDelta, LLMToolCall, ToolChoice, Usage
from llmrtc.telemetry.hooks import (
    Hooks,
    LLMEndEvent,
    LLMFirstTokenEvent,
    LLMStartEvent,
    emit,
    hooks_for,
)
from llmrtc.tools.calls import ToolCall, ToolCallResult
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.registry import ToolRegistry

logger = logging.getLogger(__name__)


class TurnState:
    """The running state of one turn, and how it writes to the conversation history."""

    def __init__(
        self,
        history: ConversationHistory,
        turn_id: str | None = None,
        max_tool_result_chars: int | None = None,
    ) -> None:
        self.history = history
        self.max_tool_result_chars = max_tool_result_chars  # see TurnSettings
        self.id = turn_id or f"turn_{uuid.uuid4().hex[:12]}"
        self.started = time.perf_counter()
        self.texts: list[str] = []  # everything yielded as text, in order
        self.partial: list[str] = []  # text of the response being streamed, not yet stored
        self.pending: list[ToolCall] = []  # calls in the history that have no result yet
        self.results: list[ToolCallResult] = []
        self.usage = Usage()
        self.stop_reason: TurnStopReason = "stop"
        self.response: tuple[LLMDone, list[ToolCall]] | None = None
        self.failure: BaseException | None = None  # a model failure the turn recovered from

    def say(self, text: str) -> list[TextDelta]:
        """Record `text` as said in this turn; returns the deltas to yield (a space first
        when it would otherwise glue onto the words said before it)."""
        deltas = []
        if not self.partial and _needs_space(self.texts, text):
            # A new response after earlier text: keep the words apart (for speech, and for
            # keyword conditions on the turn's text).
            self.texts.append(" ")
            deltas.append(TextDelta(" "))
        self.texts.append(text)
        deltas.append(TextDelta(text))
        return deltas

    def store_partial(self) -> None:
        """Keep what the model actually said before it was cut off, marked interrupted."""
        text = "".join(self.partial)
        self.partial = []
        if text:
            self.history.append(AssistantMessage(text, (), True))

    def record_results(self, results: list[ToolCallResult]) -> None:
        """Store a batch's results (in request order): the pending calls are settled."""
        limit = self.max_tool_result_chars
        for result in results:
            content = result.to_content()
            if limit is not None and len(content) > limit:
                cut = cut_tool_result(result, limit)
                logger.info(
                    "the result of tool %r (call %s) was too long for the model "
                    "(max_tool_result_chars=%d): it was shown the first %d of the %d characters "
                    "of %s",
                    result.tool_name,
                    result.call_id,
                    limit,
                    cut.shown_chars,
                    cut.total_chars,
                    cut.what,
                )
                content = cut.content
            self.history.append(ToolMessage(result.call_id, content))
        self.results.extend(results)
        self.pending = []

    def __repr__(self) -> str:
        return f"<turn {self.id} {self.stop_reason}>"


@dataclass(frozen=True)
class CutResult:
    """What the model is sent instead of a result longer than the cap."""

    content: str
    """The tool message's content, at most the cap long (JSON)."""
    shown_chars: int
    """How many characters of `what` it holds."""
    total_chars: int
    """How many characters `what` has."""
    what: str
    """What was cut: `"its text"`, `"its JSON"` or `"its error text"`."""


def cut_tool_result(result: ToolCallResult, limit: int) -> CutResult:
    """`result` as a tool message of at most `limit` characters, for a result whose whole
    content (`to_content()`) is longer.

    - A string result: `{"truncated": true, "shown_chars": K, "total_chars": M, "note": ...,
      "partial_result": "<the first K characters of the string itself>"}` (K and M count the
      string's characters; it is escaped once, as any JSON string).
    - Any other successful result: the same object, with `partial_result` the first K
      characters of the result's JSON text (a prefix that is not valid JSON by itself) and K,
      M counting that JSON text.
    - A failed result: `{"error": "<the first K characters of the error text> ... [cut: K of
      M characters]", "status": "<status>"}`: the status stays, the error text is shortened.

    A JSON object, not a bare prefix: the model reads the note, and the message stays valid
    JSON like every other."""
    if result.status != "ok":
        error = result.error or ""

        def cut_error(shown: int) -> str:
            text = f"{error[:shown]} ... [cut: {shown} of {len(error)} characters]"
            return json.dumps({"error": text, "status": result.status}, ensure_ascii=False)

        shown = _longest(cut_error, len(error), limit)
        return CutResult(cut_error(shown), shown, len(error), "its error text")
    if isinstance(result.result, str):
        text, what, kind = result.result, "its text", "text"
    else:
        text, what, kind = result.to_content(), "its JSON", "JSON text (a prefix, not valid JSON)"
    total = len(text)

    def cut(shown: int) -> str:
        return json.dumps(
            {
                "truncated": True,
                "shown_chars": shown,
                "total_chars": total,
                "note": (
                    f"The tool's result was too long for you: partial_result holds only the "
                    f"first {shown} of the {total} characters of its {kind}."
                ),
                "partial_result": text[:shown],
            },
            ensure_ascii=False,
        )

    shown = _longest(cut, total, limit)
    return CutResult(cut(shown), shown, total, what)


def _longest(render: Callable[[int], str], total: int, limit: int) -> int:
    """The largest `shown` (at most `total`) whose `render(shown)` fits in `limit` (0 if none:
    the cap's minimum leaves room for the note)."""
    # Most texts escape little: the longest prefix the rest of the message leaves room for.
    best = min(total, max(0, limit - len(render(0)) - 2 * (len(str(limit)) - 1)))
    if len(render(best)) <= limit:
        low, high = best, best
    else:
        low, high = 0, best
    # Escaping (quotes, backslashes, control characters) made the prefix longer than itself:
    # the longest that fits.
    while low < high:
        middle = (low + high + 1) // 2
        if len(render(middle)) <= limit:
            low = middle
        else:
            high = middle - 1
    return low


def _needs_space(texts: Sequence[str], text: str) -> bool:
    return bool(texts) and not texts[-1][-1:].isspace() and not text[:1].isspace()


def model_request(
    history: ConversationHistory,
    settings: TurnSettings,
    offered: ToolRegistry,
    round_index: int,
    *,
    final: bool = False,
    without_tools: bool = False,
    strict: bool = False,
    offer: Callable[[list[ToolDefinition]], list[ToolDefinition]] = list,
) -> LLMRequest:
    """The request of a turn's round `round_index`: `final` forbids tool use (the round
    limit, a two-phase answer); `without_tools` also leaves the definitions out (the retry of an
    empty answer).

    `strict` (when settings are assigned): a tool_choice naming a tool not offered is a
    `ValueError`. Otherwise (a live session, where the tool may have left the registry since)
    a forcing choice that can no longer be met is logged and relaxed: to `"auto"`, or to
    `"none"` when no tools are left.
    """
    choice: ToolChoice = settings.tool_choice
    if final or without_tools:
        choice = "none"
    elif round_index > 0 and (choice == "required" or isinstance(choice, Mapping)):
        choice = "auto"  # forcing applies to the first round only
    # `offer`: the executor's view of what to send (e.g. `_reasoningForCall` on each schema).
    tools = [] if without_tools else offer(offered.definitions())
    if not strict:
        choice = _reachable_choice(choice, {t.name for t in tools})
    messages = history.for_request(settings.system_prompt)
    return LLMRequest(
        messages=messages,
        tools=tools,
        tool_choice=choice,
        settings=settings.model,
        # Hidden tools run when named (auto-routing), and a refused tool named anyway gets its
        # refusal as the result: a text-mode provider must not drop a call to either. Not when
        # no call may be made at all.
        routable_names=()
        if without_tools or choice == "none"
        else [*offered.hidden_names(), *offered.refused_names()],
        continues_chain=bool(tools) and _continues_chain(messages, offered),
    )


def _continues_chain(messages: Sequence[object], offered: ToolRegistry) -> bool:
    """Whether the request answers tool results that all came from `ChainStep`s (calls that
    only prepare another, such as `search_tools`). A real tool in the batch ends the chain:
    its result is what the model now answers from."""
    if not messages or not isinstance(messages[-1], ToolMessage):
        return False
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            calls = message.tool_calls
            return bool(calls) and all(offered.leads_to_call(call.name) for call in calls)
    return False


def _reachable_choice(choice: ToolChoice, names: set[str]) -> ToolChoice:
    """`choice`, or what is left of it when the tools it forces are not offered."""
    relaxed: ToolChoice = "auto" if names else "none"
    if isinstance(choice, Mapping) and choice.get("name") not in names:
        logger.warning(
            "tool_choice forces %r, which is not offered (tools: %s): using %r instead",
            choice.get("name"),
            sorted(names),
            relaxed,
        )
        return relaxed
    if choice == "required" and not names:
        logger.warning("tool_choice 'required' but no tools are offered: using 'none' instead")
        return "none"
    return choice


async def stream_model_round(
    llm: LLMProvider,
    request: LLMRequest,
    turn: TurnState,
    signal: AbortSignal,
    *,
    hooks: Hooks | None,
    session_id: str | None,
    stage_id: str | None,
) -> AsyncGenerator[TextDelta, None]:
    """Stream one model response as `TextDelta`s, reporting it to the `on_llm_*` hooks.

    Leaves `(done, calls)` in `turn.response`, or None when the response was aborted. Its text
    is in `turn.partial` either way (the caller stores it). Raises what the provider raises
    (after `on_llm_end` reported it).
    """
    request_id = f"req_{uuid.uuid4().hex[:12]}"
    model = request.settings.model or llm.model
    listeners = [hooks]
    await emit(
        hooks_for(listeners, "on_llm_start"),
        "on_llm_start",
        LLMStartEvent(
            request_id=request_id,
            model=model,
            session_id=session_id,
            turn_id=turn.id,
            stage_id=stage_id,
            provider=llm.provider_name,
            messages=request.messages,
            tool_names=tuple(t.name for t in request.tools),
            temperature=request.settings.temperature,
            max_tokens=request.settings.max_tokens,
        ),
    )
    started = time.perf_counter()
    first = True
    calls: list[ToolCall] = []
    done = LLMDone("stop")
    turn.response = None
    error_type: str | None = None
    try:
        events = llm.stream(request, abort_signal=signal)
        async with aclosing(events) as stream:  # type: ignore[type-var]  # providers return generators
            async for event in stream:
                if first and not isinstance(event, LLMDone):
                    first = False
                    await emit(
                        hooks_for(listeners, "on_llm_first_token"),
                        "on_llm_first_token",
                        LLMFirstTokenEvent(
                            request_id=request_id,
                            model=model,
                            latency_s=time.perf_counter() - started,
                            session_id=session_id,
                            turn_id=turn.id,
                        ),
                    )
                if isinstance(event, LLMTextDelta):
                    deltas = turn.say(event.text)
                    turn.partial.append(event.text)
                    for delta in deltas:
                        yield delta
                elif isinstance(event, LLMToolCall):
                    calls.append(event.call)
                else:
                    done = event
    except BaseException as exc:
        error_type = type(exc).__qualname__
        raise
    finally:
        await emit(
            hooks_for(listeners, "on_llm_end"),
            "on_llm_end",
            LLMEndEvent(
                request_id=request_id,
                model=model,
                session_id=session_id,
                turn_id=turn.id,
                stage_id=stage_id,
                provider=llm.provider_name,
                response_model=done.model,
                stop_reason=done.stop_reason,
                input_tokens=done.usage.input_tokens,
                output_tokens=done.usage.output_tokens,
                duration_s=time.perf_counter() - started,
                output_text="".join(turn.partial),
                error_type=error_type,
            ),
        )
    turn.usage = turn.usage + done.usage
    if done.stop_reason != "aborted" and not signal.aborted:
        turn.response = (done, calls)
