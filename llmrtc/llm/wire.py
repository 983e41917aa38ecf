"""The chat-completions wire format: messages to OpenAI dicts, and tool calls assembled from
streamed deltas, whatever the server's habits."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from llmrtc.llm.messages import SystemMessage, ToolMessage, UserMessage
from llmrtc.llm.types import AnyMessage
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.ids import to_wire_name

__all__ = [
    "ToolCallAssembler",
    "arguments_json",
    "message_to_openai",
    "new_call_id",
    "render_text_call",
    "render_tool_prompt",
    "to_openai_messages",
]


def new_call_id() -> str:
    """A fresh tool call id for calls parsed from text (the model gave none)."""
    return f"call_{uuid.uuid4().hex[:12]}"


def render_tool_prompt(tools: Sequence[ToolDefinition]) -> str:
    """The system-prompt section that teaches a model without native tools how to call them."""
    lines = [
        "You can call tools. To call one, reply with only this, and nothing else:",
        '<tool_call>{"name": "TOOL_NAME", "arguments": {ARGUMENTS_AS_JSON}}</tool_call>',
        "Available tools:",
    ]
    for tool in tools:
        schema = json.dumps(tool.json_schema, separators=(",", ":"), sort_keys=True)
        lines.append(f"- {tool.wire_name}: {tool.description} Arguments (JSON Schema): {schema}")
    return "\n".join(lines)


def render_text_call(call: ToolCall) -> str:
    """A past call in the text form the model was taught (for the history of a text-mode chat)."""
    arguments: Any = call.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = {}
    name = to_wire_name(call.name)  # the form the prompt showed the model
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def arguments_json(call: ToolCall) -> str:
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


def message_to_openai(message: AnyMessage, *, text_mode: bool = False) -> dict[str, Any]:
    """One message as a chat-completions dict.

    Args:
        message: The message.
        text_mode: For a model without native tools: past calls become `<tool_call>` text in
            the assistant message and tool results become user messages in
            `<tool_response>` tags (the form Qwen's own template renders them in).
    """
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
    # An answer cut before its first word (barge-in) is an empty interrupted message: chat APIs
    # refuse a null content without tool calls, so it goes as "".
    content = message.content or (None if message.tool_calls else "")
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                # Dotted names go out in wire form (`crm__lookup`): APIs refuse dots.
                "function": {"name": to_wire_name(call.name), "arguments": arguments_json(call)},
            }
            for call in message.tool_calls
        ]
    return out


def to_openai_messages(
    messages: Sequence[AnyMessage], *, text_mode: bool = False
) -> list[dict[str, Any]]:
    """Messages in the chat-completions wire format (what `OpenAIProvider` sends)."""
    return [message_to_openai(m, text_mode=text_mode) for m in messages]


class ToolCallAssembler:
    """Builds tool calls from streamed deltas, whatever the server's habits.

    OpenAI sends each call under its own `index`; some servers reuse index 0 for every call
    (telling them apart by `id`), omit `index`, or interleave calls. A call is yielded early,
    before the stream ends, only when its arguments are complete JSON and every call before it
    was yielded, so the model's order is kept and no call is cut in half.
    """

    def __init__(self, tool_names: Iterable[str] = ()) -> None:
        """An assembler for one streamed response.

        Args:
            tool_names: The request's tool names (`crm.lookup`): a call that comes back in a
                name's wire form (`crm__lookup`) is named by it. Other names are kept as sent
                (a registry still finds a tool by its wire name).
        """
        self._slots: list[dict[str, Any]] = []  # in order of appearance
        self._yielded = 0
        self._names = {to_wire_name(name): name for name in tool_names}

    def add(
        self, index: int | None, call_id: str | None, name: str | None, arguments: str | None
    ) -> list[ToolCall]:
        """Add one delta; returns the calls it completed."""
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
        ready = [self._assembled(slot) for slot in self._slots[self._yielded :]]
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
            ready.append(self._assembled(slot))
            self._yielded += 1
        return ready

    def _assembled(self, slot: dict[str, Any]) -> ToolCall:
        name = self._names.get(slot["name"], slot["name"])
        return ToolCall(slot["id"] or new_call_id(), name, "".join(slot["args"]))
