"""What `OpenTelemetryHooks` writes as content or error detail: GenAI-shaped messages and the
attributes of an `exception` span event (with or without content)."""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from llmrtc.telemetry._masking import mask_text
from llmrtc.telemetry.hooks import error_type_name

_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def messages_json(messages: Any) -> str:
    """Messages in the GenAI conventions' shape: `[{"role", "parts": [{"type", ...}]}]`."""
    out: list[dict[str, Any]] = []
    for message in messages:
        data = message.model_dump(mode="json") if hasattr(message, "model_dump") else message
        if not isinstance(data, Mapping):
            out.append({"role": "user", "parts": [{"type": "text", "content": str(data)}]})
            continue
        parts: list[dict[str, Any]] = []
        if data.get("content"):
            kind = "tool_call_response" if data.get("role") == "tool" else "text"
            part: dict[str, Any] = {"type": kind, "content": data["content"]}
            if kind == "tool_call_response":
                part["id"] = data.get("call_id")
            parts.append(part)
        for call in data.get("tool_calls") or ():
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("call_id"),
                    "name": call.get("name"),
                    "arguments": call.get("arguments"),
                }
            )
        out.append({"role": data.get("role", "user"), "parts": parts})
    return json.dumps(out, default=str, ensure_ascii=False)


def exception_attributes(
    error: BaseException, *, capture_content: bool, secrets: Sequence[str] = ()
) -> dict[str, Any]:
    """The attributes of an `exception` span event for `error`.

    Without consent: the type and a stack trace of frames only (file, line, function), so a
    trace shows what failed and where, never a value. With consent: also the message and the
    full trace with its source lines, both with `secrets` masked. No trace for an exception
    that was never raised.
    """
    attributes: dict[str, Any] = {"exception.type": error_type_name(error)}
    if capture_content:
        attributes["exception.message"] = mask_text(str(error), secrets)
    if error.__traceback__ is None:  # never raised (reported as is): no frames to show
        return attributes
    if capture_content:
        full = "".join(traceback.format_exception(error))
        attributes["exception.stacktrace"] = mask_text(full, secrets)
    else:
        attributes["exception.stacktrace"] = _frames_only(error)
    return attributes


def _frames_only(error: BaseException) -> str:
    """Python's traceback layout, chained exceptions included, minus messages and source lines
    (they are content: a message may quote an argument or hold a connection string)."""
    chain: list[tuple[BaseException, str | None]] = []  # newest first, with its link to older
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__cause__ is not None:
            older, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            older, link = current.__context__, _CONTEXT
        else:
            older, link = None, None
        chain.append((current, link if older is not None and id(older) not in seen else None))
        current = older
    parts: list[str] = []
    for exc, link in reversed(chain):  # oldest first, as Python prints them
        if link is not None:
            parts.append(link)
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            parts.append("Traceback (most recent call last):\n")
            parts.extend(f'  File "{f.filename}", line {f.lineno}, in {f.name}\n' for f in frames)
        parts.append(f"{error_type_name(exc)}\n")
    return "".join(parts)
