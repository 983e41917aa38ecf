"""`ScriptedOpenAIServer`: a real HTTP server on 127.0.0.1 that answers chat-completions
requests from a script, so the real `openai` client can be tested end to end (streaming SSE,
split tool-call deltas, HTTP errors, slow streams, clients that hang up)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import SocketStream, TaskGroup

__all__ = [
    "DisconnectReply",
    "ErrorReply",
    "ScriptedOpenAIServer",
    "StreamReply",
    "chunk",
    "text_reply",
    "tool_call_reply",
]


def chunk(
    *,
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    model: str = "scripted-model",
) -> dict[str, Any]:
    """One `chat.completion.chunk` object."""
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    body: dict[str, Any] = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": model,
        "choices": []
        if usage is not None and not delta and finish_reason is None
        else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = {
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "completion_tokens": usage.get("completion_tokens", 0),
            "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0),
        }
    return body


@dataclass
class StreamReply:
    """A `200` event stream: each chunk as `data: {...}`, then `data: [DONE]`."""

    chunks: Sequence[dict[str, Any]]
    delay: float = 0.0
    """Seconds to wait before each chunk (slow generation)."""
    hang_after: int | None = None
    """Send this many chunks, then keep the connection open without sending more."""
    drop_after: int | None = None
    """Send this many chunks, then close the connection abruptly (no [DONE])."""


@dataclass
class DisconnectReply:
    """Close the connection without answering (a crashed or restarting server)."""


@dataclass
class ErrorReply:
    """An HTTP error with a JSON body in the OpenAI error shape."""

    status: int
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)


def text_reply(
    text: str, *, pieces: int = 3, usage: tuple[int, int] = (10, 5), delay: float = 0.0
) -> StreamReply:
    """A streamed text answer split into `pieces` deltas, with usage at the end."""
    size = max(1, -(-len(text) // pieces))
    parts = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    chunks = [chunk(content=part) for part in parts]
    chunks.append(chunk(finish_reason="stop"))
    chunks.append(chunk(usage={"prompt_tokens": usage[0], "completion_tokens": usage[1]}))
    return StreamReply(chunks, delay=delay)


def tool_call_reply(
    calls: Iterable[tuple[str, str, str]], *, split: int = 3, usage: tuple[int, int] = (12, 8)
) -> StreamReply:
    """Streamed tool calls `(call_id, name, arguments_json)`, the arguments split into `split`
    deltas per call, as real servers send them."""
    chunks: list[dict[str, Any]] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        chunks.append(
            chunk(
                tool_calls=[
                    {
                        "index": index,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            )
        )
        size = max(1, -(-len(arguments) // split))
        for start in range(0, len(arguments), size):
            piece = arguments[start : start + size]
            chunks.append(chunk(tool_calls=[{"index": index, "function": {"arguments": piece}}]))
    chunks.append(chunk(finish_reason="tool_calls"))
    chunks.append(chunk(usage={"prompt_tokens": usage[0], "completion_tokens": usage[1]}))
    return StreamReply(chunks)


@dataclass
class RecordedRequest:
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ScriptedOpenAIServer:
    """Serves one scripted reply per request, in order, on 127.0.0.1.

    Example:
        async with ScriptedOpenAIServer([text_reply("Hello!")]) as server:
            llm = OpenAIProvider("scripted-model", base_url=server.base_url, api_key="test")
            ...
        assert server.requests[0].body["messages"][0]["role"] == "system"

    A request beyond the script gets an HTTP 500 and is recorded in `unexpected`.
    `disconnects` counts streams the client closed before the server finished sending.
    """

    def __init__(self, replies: Iterable[StreamReply | ErrorReply | DisconnectReply]) -> None:
        """Serve `replies`, one per request."""
        self.replies = list(replies)
        self.requests: list[RecordedRequest] = []
        self.unexpected: list[RecordedRequest] = []
        self.disconnects = 0
        self.disconnected_at: list[float] = []
        self.port = 0
        self._group: TaskGroup | None = None

    @property
    def base_url(self) -> str:
        """The `base_url` for the openai client, e.g. `http://127.0.0.1:PORT/v1`."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> ScriptedOpenAIServer:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(listener.serve, self._handle)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._group is not None
        self._group.cancel_scope.cancel()
        return await self._group.__aexit__(exc_type, exc, traceback)

    async def _handle(self, stream: SocketStream) -> None:
        async with stream:
            try:
                request = await _read_request(stream)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ValueError):
                return
            if not self.replies:
                self.unexpected.append(request)
                await _send_error(stream, ErrorReply(500, "request beyond the script"))
                return
            self.requests.append(request)
            reply = self.replies.pop(0)
            if isinstance(reply, ErrorReply):
                await _send_error(stream, reply)
                return
            if isinstance(reply, DisconnectReply):
                return
            try:
                await self._send_stream(stream, reply)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                self.disconnects += 1
                self.disconnected_at.append(time.monotonic())

    async def _send_stream(self, stream: SocketStream, reply: StreamReply) -> None:
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            "Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
        )
        await stream.send(head.encode())
        for sent, body in enumerate(reply.chunks):
            if reply.hang_after is not None and sent >= reply.hang_after:
                # Keep the stream open, probing so a client hang-up is noticed.
                while True:
                    await anyio.sleep(0.02)
                    await stream.send(b": keep-alive\n\n")
            if reply.drop_after is not None and sent >= reply.drop_after:
                return  # closes the connection without [DONE]
            if reply.delay:
                await anyio.sleep(reply.delay)
            await stream.send(f"data: {json.dumps(body)}\n\n".encode())
        await stream.send(b"data: [DONE]\n\n")


async def _read_request(stream: SocketStream) -> RecordedRequest:
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
        if len(data) > 1_000_000:
            raise ValueError("request head too large")
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        body += await stream.receive()
    parsed = json.loads(body) if body else {}
    return RecordedRequest(method, path, headers, parsed)


async def _send_error(stream: SocketStream, reply: ErrorReply) -> None:
    body = json.dumps(
        {"error": {"message": reply.message, "type": "scripted", "code": reply.status}}
    ).encode()
    reasons = {400: "Bad Request", 429: "Too Many Requests", 500: "Internal Server Error"}
    head = f"HTTP/1.1 {reply.status} {reasons.get(reply.status, 'Error')}\r\n"
    head += "Content-Type: application/json\r\nConnection: close\r\n"
    head += f"Content-Length: {len(body)}\r\n"
    for name, value in reply.headers.items():
        head += f"{name}: {value}\r\n"
    with (
        anyio.move_on_after(5),
        contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError),
    ):
        await stream.send(head.encode() + b"\r\n" + body)
