"""One model round of a turn: the request it sends (from the history, the settings and the
offered tools), and its response streamed and reported to the `on_llm_*` hooks."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import aclosing

from llmrtc.abort import AbortSignal
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.settings import TurnSettings
from llmrtc.llm.messages import AssistantMessage, ToolMessage
from llmrtc.llm.provider import LLMProvider
from llmrtc.llm.types import LLMDone, LLMRequest, LLMTextDelta, LLMToolCall, ToolChoice, Usage
from llmrtc.telemetry.events import LLMEndEvent, LLMFirstTokenEvent, LLMStartEvent
from llmrtc.telemetry.hooks import Hooks, emit
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.registry import ToolRegistry

__all__ = ["ModelRound", "model_request"]

logger = logging.getLogger(__name__)


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


class ModelRound:
    """One model request of a turn and its response, streamed as text and reported to the
    `on_llm_*` hooks (`on_llm_end` also when it failed or was cut off).

    After `stream()` ended without raising: `response` holds `(done, calls)`, or None when
    the response was aborted; `usage` holds what it cost either way.
    """

    def __init__(
        self,
        llm: LLMProvider,
        request: LLMRequest,
        *,
        hooks: Hooks | None,
        session_id: str | None,
        turn_id: str,
        stage_id: str | None,
    ) -> None:
        """Prepare the round (nothing is sent before `stream()`)."""
        self.llm = llm
        self.request = request
        self.hooks = hooks
        self.session_id = session_id
        self.turn_id = turn_id
        self.stage_id = stage_id
        self.response: tuple[LLMDone, list[ToolCall]] | None = None
        """The finished response and its tool calls; None while streaming or when aborted."""
        self.usage = Usage()
        """Token usage of the response (set once it ended)."""

    async def stream(self, signal: AbortSignal) -> AsyncGenerator[str, None]:
        """Send the request and yield the response's text as it comes.

        Raises what the provider raises (after `on_llm_end` reported it).
        """
        llm, request = self.llm, self.request
        request_id = f"req_{uuid.uuid4().hex[:12]}"
        model = request.settings.model or llm.model
        await emit(
            self.hooks,
            LLMStartEvent(
                request_id=request_id,
                model=model,
                session_id=self.session_id,
                turn_id=self.turn_id,
                stage_id=self.stage_id,
                provider=llm.provider_name,
                messages=request.messages,
                tool_names=tuple(t.name for t in request.tools),
                temperature=request.settings.temperature,
                max_tokens=request.settings.max_tokens,
            ),
        )
        started = time.perf_counter()
        first = True
        text: list[str] = []  # appended before each yield: complete if the consumer leaves
        calls: list[ToolCall] = []
        done = LLMDone("stop")
        self.response = None
        error_type: str | None = None
        try:
            events = llm.stream(request, abort_signal=signal)
            async with aclosing(events) as stream:  # type: ignore[type-var]  # providers return generators
                async for event in stream:
                    if first and not isinstance(event, LLMDone):
                        first = False
                        await emit(
                            self.hooks,
                            LLMFirstTokenEvent(
                                request_id=request_id,
                                model=model,
                                latency_s=time.perf_counter() - started,
                                session_id=self.session_id,
                                turn_id=self.turn_id,
                            ),
                        )
                    if isinstance(event, LLMTextDelta):
                        text.append(event.text)
                        yield event.text
                    elif isinstance(event, LLMToolCall):
                        calls.append(event.call)
                    else:
                        done = event
        except BaseException as exc:
            error_type = type(exc).__qualname__
            raise
        finally:
            await emit(
                self.hooks,
                LLMEndEvent(
                    request_id=request_id,
                    model=model,
                    session_id=self.session_id,
                    turn_id=self.turn_id,
                    stage_id=self.stage_id,
                    provider=llm.provider_name,
                    response_model=done.model,
                    stop_reason=done.stop_reason,
                    input_tokens=done.usage.input_tokens,
                    output_tokens=done.usage.output_tokens,
                    cached_input_tokens=done.usage.cached_input_tokens,
                    duration_s=time.perf_counter() - started,
                    output_text="".join(text),
                    error_type=error_type,
                ),
            )
        self.usage = done.usage
        if done.stop_reason != "aborted" and not signal.aborted:
            self.response = (done, calls)
