"""`ScriptedOpenAIServer`: a real HTTP server on 127.0.0.1 that answers chat-completions,
transcription and speech requests from scripts, so the real `openai` client can be tested end
to end (streaming SSE, split tool-call deltas, multipart uploads, streamed audio, HTTP errors,
slow streams, clients that hang up). The audio replies live in `llmrtc.testing.openai_audio`."""

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

from llmrtc.testing.openai_audio import (
    SpeechReply,
    SpeechRequest,
    TranscriptionReply,
    TranscriptionRequest,
    parse_multipart,
    send_speech,
    send_transcription,
)

__all__ = [
    "DisconnectReply",
    "ErrorReply",
    "RecordedRequest",
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
    """The JSON body, or a multipart form's text fields (its files are in `files`)."""
    files: dict[str, tuple[str, str, bytes]] = field(default_factory=dict)
    """A multipart form's file parts: name → `(filename, content_type, data)`."""


_TRANSCRIPTIONS = "/v1/audio/transcriptions"
_SPEECH = "/v1/audio/speech"
_Reply = StreamReply | ErrorReply | DisconnectReply | TranscriptionReply | SpeechReply


class ScriptedOpenAIServer:
    """Serves one scripted reply per request, in order, on 127.0.0.1.

    Example:
        async with ScriptedOpenAIServer([text_reply("Hello!")]) as server:
            llm = OpenAIProvider("scripted-model", base_url=server.base_url, api_key="test")
            ...
        assert server.requests[0].body["messages"][0]["role"] == "system"

        async with ScriptedOpenAIServer(
            [], transcripts=["Weather in Tokyo?"], speech=[tone_reply(0.5)]
        ) as server:
            ...  # OpenAISTT / OpenAITTS with base_url=server.base_url
        upload = server.transcription_requests[0]  # the WAV, the model, the language
        spoken = server.speech_requests[0]  # the JSON body; bytes sent; finished or cut

    Each endpoint has its own script, so the order of requests across endpoints (a voice
    loop speaks sentence one while the model still streams) does not matter:
    `/v1/audio/transcriptions` answers from `transcripts`, `/v1/audio/speech` from `speech`,
    every other path from `replies` (chat completions). `ErrorReply` and `DisconnectReply`
    fit every script. Every scripted request is recorded in `requests`, in arrival order.

    A request beyond its script gets an HTTP 500 and is recorded in `unexpected`. A chat
    request whose history the OpenAI chat API would reject (tool calls and tool messages out
    of step) gets that API's HTTP 400 and is recorded in `refused`.
    `disconnects` counts replies the client hung up on before the server finished sending
    (a stream, a speech download, or a transcription the client stopped waiting for).
    """

    def __init__(
        self,
        replies: Iterable[StreamReply | ErrorReply | DisconnectReply],
        *,
        transcripts: Iterable[str | TranscriptionReply | ErrorReply | DisconnectReply] = (),
        speech: Iterable[SpeechReply | ErrorReply | DisconnectReply] = (),
    ) -> None:
        """Serve each script, one reply per request to its endpoint.

        Args:
            replies: Chat-completions replies (`StreamReply`, `text_reply`, ...).
            transcripts: Transcription replies; a `str` is `TranscriptionReply(text)`.
            speech: Speech replies (`SpeechReply`, `speech_reply`, `tone_reply`).

        Raises:
            TypeError: a reply in a script it cannot answer (say, a `SpeechReply` among the
                transcripts).
        """
        common = (ErrorReply, DisconnectReply)
        self.replies: list[_Reply] = _script("replies", replies, (StreamReply, *common))
        self.transcripts: list[_Reply] = _script(
            "transcripts",
            (TranscriptionReply(r) if isinstance(r, str) else r for r in transcripts),
            (TranscriptionReply, *common),
        )
        self.speech: list[_Reply] = _script("speech", speech, (SpeechReply, *common))
        self.requests: list[RecordedRequest] = []
        self.unexpected: list[RecordedRequest] = []
        self.refused: list[RecordedRequest] = []
        """Chat requests refused with HTTP 400 for a history the OpenAI chat API rejects (an
        assistant `tool_calls` message not followed by a `tool` message for each id, or a
        `tool` message that answers no call just before it), as that API does; they are also
        in `requests` and take no scripted reply."""
        self.transcription_requests: list[TranscriptionRequest] = []
        """What each transcription request uploaded, in order."""
        self.speech_requests: list[SpeechRequest] = []
        """Each speech request's JSON and how much of its reply went out, in order."""
        self.disconnects = 0
        self.disconnected_at: list[float] = []
        self.port = 0
        self._listener: anyio.abc.Listener[SocketStream] | None = None
        self._group: TaskGroup | None = None

    @property
    def base_url(self) -> str:
        """The `base_url` for the openai client, e.g. `http://127.0.0.1:PORT/v1`."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def __aenter__(self) -> ScriptedOpenAIServer:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self._listener = listener
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
        assert self._group is not None and self._listener is not None
        self._group.cancel_scope.cancel()
        try:
            return await self._group.__aexit__(exc_type, exc, traceback)
        finally:
            # Closed, not left to the garbage collector: a client of a stopped server is
            # refused at once instead of waiting in the kernel's backlog until it times out.
            await self._listener.aclose()

    async def _handle(self, stream: SocketStream) -> None:
        async with stream:
            try:
                request = await _read_request(stream)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ValueError):
                return
            path = request.path.partition("?")[0]
            script = {_TRANSCRIPTIONS: self.transcripts, _SPEECH: self.speech}.get(
                path, self.replies
            )
            if not script:
                self.unexpected.append(request)
                await _send_error(stream, ErrorReply(500, "request beyond the script"))
                return
            self.requests.append(request)
            refused = _history_error(request) if script is self.replies else None
            if refused is not None:  # as the real API: 400, and the scripted reply is kept
                self.refused.append(request)
                await _send_error(stream, ErrorReply(400, refused))
                return
            reply = script.pop(0)
            self._record_audio(path, request, reply)
            if isinstance(reply, ErrorReply):
                await _send_error(stream, reply)
                return
            if isinstance(reply, DisconnectReply):
                return
            try:
                if await self._answer(stream, request, reply):
                    return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                pass
            self.disconnects += 1
            self.disconnected_at.append(time.monotonic())

    def _record_audio(self, path: str, request: RecordedRequest, reply: _Reply) -> None:
        """Keep what an audio request carried, whatever its scripted reply."""
        if path == _TRANSCRIPTIONS:
            filename, content_type, audio = request.files.get("file", ("", "", b""))
            upload = TranscriptionRequest(dict(request.body), filename, content_type, audio)
            self.transcription_requests.append(upload)
        elif path == _SPEECH:
            chunks = reply.chunks if isinstance(reply, SpeechReply) else ()
            total = sum(len(data) for data in chunks)
            self.speech_requests.append(SpeechRequest(dict(request.body), total=total))

    async def _answer(self, stream: SocketStream, request: RecordedRequest, reply: _Reply) -> bool:
        """Send a `200` reply; False when the client hung up before it was all sent."""
        if isinstance(reply, TranscriptionReply):
            return await send_transcription(stream, reply)
        if isinstance(reply, SpeechReply):
            return await send_speech(stream, reply, self.speech_requests[-1])
        assert isinstance(reply, StreamReply)
        await self._send_stream(stream, reply)
        return True

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


def _script(name: str, replies: Iterable[Any], allowed: tuple[type, ...]) -> list[_Reply]:
    script = list(replies)
    for index, reply in enumerate(script):
        if not isinstance(reply, allowed):
            names = ", ".join(kind.__name__ for kind in allowed)
            raise TypeError(
                f"{name}[{index}] is a {type(reply).__name__}; this script takes {names}"
            )
    return script


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
    content_type = headers.get("content-type", "")
    if content_type.lower().startswith("multipart/form-data"):
        fields, files = parse_multipart(content_type, body)
        return RecordedRequest(method, path, headers, dict(fields), files)
    parsed = json.loads(body) if body else {}
    return RecordedRequest(method, path, headers, parsed)


def _history_error(request: RecordedRequest) -> str | None:
    """What the OpenAI chat API would say about the request's `messages` (None: accepted):
    after an assistant message with `tool_calls` come that many `tool` messages, one per id,
    before any other message; a `tool` message answers one of those."""
    messages = request.body.get("messages") if isinstance(request.body, dict) else None
    if not isinstance(messages, list):
        return None  # not a chat request (or not this check's business)
    open_ids: list[str] = []
    for position, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_ids:
                return (
                    f"Invalid parameter: messages[{position}]: messages with role 'tool' must "
                    "be a response to a preceding message with 'tool_calls'."
                )
            open_ids.remove(call_id)
            continue
        if open_ids:
            return (
                f"messages[{position}]: an assistant message with 'tool_calls' must be followed "
                "by tool messages responding to each 'tool_call_id'. The following "
                f"tool_call_ids did not have response messages: {', '.join(open_ids)}"
            )
        if role == "assistant":
            open_ids = [call.get("id") for call in message.get("tool_calls") or []]
    if open_ids:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages "
            "responding to each 'tool_call_id'. The following tool_call_ids did not have "
            f"response messages: {', '.join(open_ids)}"
        )
    return None


async def _send_error(stream: SocketStream, reply: ErrorReply) -> None:
    body = json.dumps(
        {"error": {"message": reply.message, "type": "scripted", "code": reply.status}}
    ).encode()
    reasons = {
        400: "Bad Request",
        401: "Unauthorized",
        404: "Not Found",
        429: "Too Many Requests",
        500: "Internal Server Error",
    }
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
