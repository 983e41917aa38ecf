"""`ToolError`: a failure a tool reports to the model in its own words."""

from __future__ import annotations

from llmrtc.errors import LLMRTCError

__all__ = ["ToolError"]


class ToolError(LLMRTCError):
    """Raise from a handler to tell the model what went wrong; the message is sent as is.

    Any other exception a handler raises is an internal error: the model gets only a short
    generic message (a voice agent may speak it, and exception text can hold secrets such as
    a connection string), while the full exception goes to hooks, the log and the span.

    Example:
        @tool
        async def book_table(time: str) -> str:
            \"\"\"Book a table.\"\"\"
            if not await tables.free_at(time):
                raise ToolError("No table is free at 8 pm; offer 9 pm.")
            ...
    """
