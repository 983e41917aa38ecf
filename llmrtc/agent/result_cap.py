"""The cap on a tool result the model is sent (`TurnSettings.max_tool_result_chars`): what a
result longer than the cap becomes, a JSON object the model can read, itself within the cap."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from llmrtc.tools.calls import ToolCallResult

__all__ = ["CutResult", "cut_tool_result"]


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
