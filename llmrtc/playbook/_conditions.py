"""Matching helpers of the engine's conditions: a keyword as a whole word, a tool call against
a `tool_call` condition's name and arguments."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from llmrtc.playbook.models import ToolCallCondition
from llmrtc.tools.calls import ToolCall

__all__ = ["has_word", "matches"]


def has_word(text: str, keyword: str) -> bool:
    """True if `keyword` occurs in `text` as a whole word, ignoring case."""
    return re.search(rf"(?<!\w){re.escape(keyword)}(?!\w)", text, re.IGNORECASE) is not None


def matches(condition: ToolCallCondition, call: ToolCall) -> bool:
    """True if `call` names the condition's tool and has every argument it requires."""
    if call.name != condition.tool_name:
        return False
    if not condition.arguments:
        return True
    arguments: Any = call.arguments
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return False
    return isinstance(arguments, Mapping) and all(
        arguments.get(key) == value for key, value in condition.arguments.items()
    )
