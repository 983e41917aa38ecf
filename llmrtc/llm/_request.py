"""The chat-completions request `OpenAIProvider` sends: which tools go (in the API's field, the
system prompt, or a composed `response_format`), the messages, and the sampling options."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llmrtc.llm._composed import composed_prompt, composed_response_format, output_schema_of
from llmrtc.llm.messages import AssistantMessage, SystemMessage, ToolMessage
from llmrtc.llm.text_tools import render_tool_prompt
from llmrtc.llm.types import LLMRequest
from llmrtc.llm.wire import message_to_openai
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.ids import to_wire_name
from llmrtc.tools.latent import TOOL_FIELD

if TYPE_CHECKING:
    from llmrtc.llm.openai_provider import OpenAIProvider

logger = logging.getLogger("llmrtc.llm")


def sends_tools(provider: OpenAIProvider, request: LLMRequest) -> bool:
    """Whether tools go with this request (in the API's field, the prompt or the schema)."""
    if not request.tools or request.tool_choice == "none":
        return False
    after_results = bool(request.messages) and isinstance(request.messages[-1], ToolMessage)
    # Results that only prepare the next call (a discovery search) leave the model midway
    # through its task: omitting the tools then would force a premature answer.
    omit = provider.compat.omit_tools_after_tool_results and not request.continues_chain
    return not (omit and after_results)


def request_params(
    provider: OpenAIProvider,
    request: LLMRequest,
    *,
    withhold_tools: bool = False,
    prefill: str = "",
) -> dict[str, Any]:
    """The keyword arguments of `chat.completions.create` for `request`."""
    fmt = provider.tool_call_format
    text_mode = fmt in ("text", "composed")
    sent = sends_tools(provider, request) and not withhold_tools
    params: dict[str, Any] = {
        "model": request.settings.model or provider.model,
        "messages": _messages(provider, request, text_mode=text_mode, sent=sent),
        "stream": True,
    }
    if prefill:
        # A trailing assistant message: llama.cpp (and others) continue it, so an answer
        # cut by a server error resumes where the user's copy of it stops.
        params["messages"].append({"role": "assistant", "content": prefill})
    if provider.stream_usage:
        params["stream_options"] = {"include_usage": True}
    settings = provider.settings.merged(request.settings)
    for name in ("temperature", "max_tokens", "top_p"):
        if (value := getattr(settings, name)) is not None:
            params[name] = value
    if request.response_format is not None and provider.compat.response_format:
        params["response_format"] = dict(request.response_format)
    if sent and fmt == "composed":
        # The tools are the answer's schema: the server (llama.cpp constrains decoding to
        # it) can produce no malformed call and no call to an undeclared tool. The request's
        # own response_format (an LLM-backed tool's schema) is the answer branch's schema.
        own = output_schema_of(request.response_format)
        params["response_format"] = composed_response_format(
            request.tools,
            request.tool_choice,
            own if own is not None else provider.composed_output_schema,
            allow_both=composed_allow_both(provider, request.tools),
        )
    elif sent and not text_mode:
        params["tools"] = [tool.to_openai() for tool in request.tools]
        choice = request.tool_choice
        if isinstance(choice, Mapping):
            params["tool_choice"] = {
                "type": "function",
                "function": {"name": to_wire_name(choice["name"])},
            }
        else:
            params["tool_choice"] = choice
    return params


def composed_allow_both(provider: OpenAIProvider, tools: Sequence[ToolDefinition]) -> bool:
    """Whether a composed request is sent in seed 002's shape: when the provider asks for it
    and no offered tool has a parameter named `_tool` (where that shape's flattened calls name
    their tool). A request offering such a tool is sent in the nested calls-or-answer shape
    instead, with a warning once per tool and provider: every tool stays offered and callable,
    and the parser reads either shape. (`compose_schema(..., allow_both=True)`, a user's own
    call, refuses such a tool.)"""
    if not provider.composed_allow_both:
        return False
    clashing = [t.name for t in tools if TOOL_FIELD in (t.json_schema.get("properties") or {})]
    for name in clashing:
        if name not in provider.composed_nested_for:
            provider.composed_nested_for.add(name)
            logger.warning(
                "tool %r has a parameter named %r, where seed 002's flattened calls name their "
                "tool: requests offering it use the nested calls-or-answer shape instead of "
                "composed_allow_both's; rename the parameter to get seed 002's shape",
                name,
                TOOL_FIELD,
            )
    return not clashing


def _messages(
    provider: OpenAIProvider, request: LLMRequest, *, text_mode: bool, sent: bool
) -> list[Any]:
    compat = provider.compat
    extra: list[str] = []
    if sent and provider.tool_call_format == "composed":
        # The profile's tool hint asks for a bare call object: the composed prompt says how
        # this answer is shaped instead.
        both = composed_allow_both(provider, request.tools)
        extra.append(composed_prompt(request.tools, allow_both=both))
    elif sent:
        if compat.tool_hint:
            extra.append(compat.tool_hint)
        if text_mode:
            extra.append((compat.tool_prompt or render_tool_prompt)(request.tools))
            choice = request.tool_choice
            if isinstance(choice, Mapping):
                extra.append(f"You must call the tool {to_wire_name(choice['name'])} now.")
            elif choice == "required":
                extra.append("You must call one of the tools now.")
    elif compat.plain_answer_hint and (request.tools or _mentions_tools(request.messages)):
        # Only where a call could be written (tools withheld, or calls earlier in the
        # conversation): a tool-free prompt that asks for JSON (an LLM-backed tool's) must not
        # be told "no JSON".
        extra.append(compat.plain_answer_hint)
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


def _mentions_tools(messages: Sequence[Any]) -> bool:
    """Whether the conversation has tool calls or results (a model may imitate them)."""
    return any(
        isinstance(m, ToolMessage) or (isinstance(m, AssistantMessage) and m.tool_calls)
        for m in messages
    )
