"""One-line descriptions of failed model requests: what failed, where, what to do."""

from __future__ import annotations

import socket
from typing import Final

from llmrtc.errors import LLMRTCError

__all__ = ["connection_errors", "describe_failure"]

_MAX_DETAIL: Final = 300


class TruncatedStreamError(LLMRTCError):
    """The stream ended before the model said it had finished (no `finish_reason`)."""


def connection_errors() -> tuple[type[Exception], ...]:
    """Failures to get an answer at all: the connection, the transport of whichever httpx the
    installed openai uses, or a stream cut short."""
    import openai

    errors: list[type[Exception]] = [openai.APIConnectionError, TruncatedStreamError]
    for module in ("httpx2", "httpx"):
        try:
            errors.append(__import__(module).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 1] + "…"


def _root_reason(exc: BaseException) -> str:
    """The innermost cause of a connection failure, in a few words."""
    seen: set[int] = set()
    current: BaseException | None = exc
    innermost = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return "connection refused"
        if isinstance(current, socket.gaierror):
            return "host name not found"
        if isinstance(current, TimeoutError) or "Timeout" in type(current).__name__:
            return "timed out"
        innermost = current
        current = current.__cause__ or current.__context__
    text = str(innermost) or type(innermost).__name__
    return _one_line(text)


def describe_failure(
    exc: BaseException,
    *,
    url: str,
    model: str,
    timeout: float,
    connection_errors: tuple[type[Exception], ...],
) -> str:
    """What failed, where (the URL) and what to do, in one line.

    Args:
        exc: The exception the openai client (or the stream) raised.
        url: The API's base URL.
        model: The model the request was for.
        timeout: The request timeout in seconds.
        connection_errors: The exception types that mean "no answer at all".
    """
    url = url.rstrip("/")
    status = getattr(exc, "status_code", None)
    if isinstance(exc, TruncatedStreamError):
        return (
            f"the answer from {url} (model {model!r}) stopped before the model finished it "
            "(the connection was cut); try again"
        )
    if status is None and isinstance(exc, connection_errors):
        reason = _root_reason(exc)
        if reason == "timed out":
            return (
                f"no answer from {url} within {timeout:g} s (model {model!r}): the server is "
                "overloaded or unreachable; try again, or check OPENAI_BASE_URL"
            )
        return (
            f"cannot connect to {url} ({reason}): is the server running? "
            "Check OPENAI_BASE_URL (and your network)."
        )
    body = getattr(exc, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    detail = _one_line(str(message or getattr(exc, "message", None) or exc))
    if status is None:
        return f"model {model!r} at {url} failed while answering: {detail}"
    advice = {
        401: "check OPENAI_API_KEY",
        403: "check OPENAI_API_KEY and its permissions",
        404: "check the model name (LLMRTC_MODEL) and OPENAI_BASE_URL",
        429: "rate limited or out of quota; wait, or check your plan",
    }.get(status, "the server failed; try again" if status >= 500 else "the request was refused")
    return f"model {model!r} at {url} failed: HTTP {status}: {detail} ({advice})"
