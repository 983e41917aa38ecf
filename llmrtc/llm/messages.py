"""Chat messages: what a conversation is made of, in the shape chat APIs accept."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmrtc.tools.calls import ToolCall

__all__ = ["AssistantMessage", "Message", "SystemMessage", "ToolMessage", "UserMessage"]


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True)


class SystemMessage(_Message):
    """Instructions for the model (the system prompt, or a playbook transition note)."""

    role: Literal["system"] = "system"
    content: str

    def __init__(self, content: str | None = None, /, **data: Any) -> None:
        """`SystemMessage("You are a helpful assistant.")`."""
        super().__init__(**({"content": content} if content is not None else {}), **data)


class UserMessage(_Message):
    """What the user said (or typed)."""

    role: Literal["user"] = "user"
    content: str

    def __init__(self, content: str | None = None, /, **data: Any) -> None:
        """`UserMessage("What's the weather in Tokyo?")`."""
        super().__init__(**({"content": content} if content is not None else {}), **data)


class AssistantMessage(_Message):
    """What the model answered: text and/or tool calls."""

    role: Literal["assistant"] = "assistant"
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls the model made in this message; each needs a `ToolMessage` after it."""
    interrupted: bool = False
    """True when the answer was cut short (barge-in, abort): `content` is what was actually
    produced. Kept for the application; never sent to the model."""

    def __init__(
        self,
        content: str | None = None,
        tool_calls: Any = None,
        interrupted: bool | None = None,
        /,
        **data: Any,
    ) -> None:
        """`AssistantMessage("It is sunny.")` or `AssistantMessage("", [call])`."""
        positional = {
            key: value
            for key, value in (
                ("content", content),
                ("tool_calls", tool_calls),
                ("interrupted", interrupted),
            )
            if value is not None
        }
        super().__init__(**positional, **data)


class ToolMessage(_Message):
    """The result of one tool call, sent back to the model."""

    role: Literal["tool"] = "tool"
    call_id: str
    """The id of the call this answers."""
    content: str
    """The result as JSON text (`ToolCallResult.to_content()`)."""

    def __init__(
        self, call_id: str | None = None, content: str | None = None, /, **data: Any
    ) -> None:
        """`ToolMessage("call_1", '{"temp": 21}')`."""
        positional = {
            key: value for key, value in (("call_id", call_id), ("content", content)) if value
        }
        super().__init__(**positional, **data)


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]
"""Any chat message; plain dicts with a `role` key validate into the right class."""
