"""The audio half of `ScriptedOpenAIServer`: scripted replies for `/v1/audio/transcriptions`
(speech to text) and `/v1/audio/speech` (text to speech), what the server records about those
requests, and the helpers that parse and answer them.

Example:
    server = ScriptedOpenAIServer(
        [],
        transcripts=["What is the weather in Tokyo?", ErrorReply(500)],
        speech=[tone_reply(1.0), speech_reply(pcm, pieces=8, delay=0.05)],
    )
"""

from __future__ import annotations

import json
import math
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import SocketStream

__all__ = [
    "SPEECH_SAMPLE_RATE",
    "SpeechReply",
    "SpeechRequest",
    "TranscriptionReply",
    "TranscriptionRequest",
    "speech_reply",
    "tone",
    "tone_reply",
]

SPEECH_SAMPLE_RATE = 24_000
"""The rate of OpenAI's `response_format="pcm"` speech: 24 kHz mono s16le, no header."""


@dataclass
class TranscriptionReply:
    """A `200` answer to `/v1/audio/transcriptions`: `{"text": text}` (the JSON format)."""

    text: str
    delay: float = 0.0
    """Seconds to wait before answering (a slow model). A client that hangs up meanwhile is
    counted in the server's `disconnects`."""


@dataclass
class SpeechReply:
    """A `200` answer to `/v1/audio/speech`: the audio bytes, sent as HTTP chunks one by one.

    Each item of `chunks` is one HTTP chunk (any length: an odd one tests that a client
    carries the odd byte over). Build one with `speech_reply` or `tone_reply`.
    """

    chunks: Sequence[bytes]
    delay: float = 0.0
    """Seconds to wait before each chunk (synthesis speed); a hang-up meanwhile is noticed."""
    drop_after: int | None = None
    """Send this many chunks, then close the connection abruptly (no terminating chunk)."""


@dataclass
class TranscriptionRequest:
    """What a `/v1/audio/transcriptions` request carried (multipart form)."""

    fields: dict[str, str]
    """The text fields: `model`, `language`, `response_format`, ..."""
    filename: str
    """The file part's file name, e.g. `audio.wav`."""
    content_type: str
    """The file part's content type, e.g. `audio/wav`."""
    audio: bytes
    """The uploaded file, byte for byte (open a WAV with `wave.open(io.BytesIO(audio))`)."""


@dataclass
class SpeechRequest:
    """A `/v1/audio/speech` request and how much of its reply went out."""

    body: dict[str, Any]
    """The JSON the client sent: `model`, `input`, `voice`, `response_format`, ..."""
    sent: int = 0
    """Audio bytes written to the client so far."""
    finished: bool = False
    """Whether the whole reply went out (False when the client hung up early)."""
    chunks_sent: int = 0
    """HTTP chunks written so far."""
    total: int = 0
    """Audio bytes the scripted reply holds."""


def tone(
    duration: float,
    *,
    sample_rate: int = SPEECH_SAMPLE_RATE,
    frequency: float = 440.0,
    amplitude: float = 0.3,
) -> bytes:
    """A sine tone as mono s16le PCM: loud enough for a VAD or a level meter to call it sound.

    Args:
        duration: Seconds of audio (rounded to whole samples).
        sample_rate: Samples per second.
        frequency: Hz.
        amplitude: Peak level, 0..1 of full scale.
    """
    count = round(duration * sample_rate)
    step = 2 * math.pi * frequency / sample_rate
    peak = amplitude * 32767
    samples = array("h", (round(peak * math.sin(step * i)) for i in range(count)))
    if sys.byteorder == "big":
        samples.byteswap()  # the wire format is little-endian
    return samples.tobytes()


def speech_reply(
    pcm: bytes, *, pieces: int = 4, delay: float = 0.02, drop_after: int | None = None
) -> SpeechReply:
    """`pcm` streamed in `pieces` HTTP chunks of equal size, `delay` seconds apart."""
    size = max(1, -(-len(pcm) // max(1, pieces)))
    chunks = [pcm[i : i + size] for i in range(0, len(pcm), size)]
    return SpeechReply(chunks, delay=delay, drop_after=drop_after)


def tone_reply(
    duration: float,
    *,
    frequency: float = 440.0,
    pieces: int = 4,
    delay: float = 0.02,
    drop_after: int | None = None,
) -> SpeechReply:
    """A `duration`-second tone at 24 kHz (what `response_format="pcm"` yields), streamed in
    `pieces` chunks `delay` seconds apart."""
    pcm = tone(duration, frequency=frequency)
    return speech_reply(pcm, pieces=pieces, delay=delay, drop_after=drop_after)


# Server side ---------------------------------------------------------------------------


def parse_multipart(content_type: str, body: bytes) -> tuple[dict[str, str], dict[str, Any]]:
    """The text fields and the file parts of a `multipart/form-data` body.

    Returns:
        `(fields, files)`; `files` maps a part's name to `(filename, content_type, data)`.

    Raises:
        ValueError: not multipart, or no boundary.
    """
    boundary = ""
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary":
            boundary = value.strip('"')
    if not content_type.lower().startswith("multipart/form-data") or not boundary:
        raise ValueError(f"not a multipart/form-data body: {content_type!r}")
    fields: dict[str, str] = {}
    files: dict[str, Any] = {}
    delimiter = b"--" + boundary.encode("latin-1")
    for part in body.split(delimiter)[1:]:
        if part.startswith(b"--"):
            break  # the closing delimiter
        head, _, data = part.removeprefix(b"\r\n").partition(b"\r\n\r\n")
        data = data.removesuffix(b"\r\n")  # the CRLF before the next delimiter
        headers: dict[str, str] = {}
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        disposition = _params(headers.get("content-disposition", ""))
        name = disposition.get("name", "")
        if "filename" in disposition:
            kind = headers.get("content-type", "application/octet-stream")
            files[name] = (disposition["filename"], kind, data)
        else:
            fields[name] = data.decode("utf-8")
    return fields, files


def _params(header: str) -> dict[str, str]:
    params = {}
    for item in header.split(";")[1:]:
        key, _, value = item.strip().partition("=")
        params[key.lower()] = value.strip('"')
    return params


async def client_left(stream: SocketStream, seconds: float) -> bool:
    """Wait `seconds`; True as soon as the client closes its side (it sends nothing more
    after its request, so end of stream is how a hang-up shows)."""
    with anyio.move_on_after(seconds):
        try:
            while await stream.receive():
                pass  # stray bytes: ignored
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return True
        except ConnectionError:
            return True
    return False


async def send_transcription(stream: SocketStream, reply: TranscriptionReply) -> bool:
    """Answer with `reply`; False when the client hung up before the answer."""
    if reply.delay and await client_left(stream, reply.delay):
        return False
    body = json.dumps({"text": reply.text}).encode()
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    await stream.send(head.encode() + body)
    return True


async def send_speech(stream: SocketStream, reply: SpeechReply, record: SpeechRequest) -> bool:
    """Stream `reply` with chunked transfer encoding (as OpenAI does), updating `record`;
    False when the client hung up first.

    Raises:
        anyio.BrokenResourceError: the client hung up while a chunk was being sent.
    """
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
        "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    await stream.send(head.encode())
    for index, data in enumerate(reply.chunks):
        if reply.drop_after is not None and index >= reply.drop_after:
            return True  # closes the connection mid-body
        if reply.delay and await client_left(stream, reply.delay):
            return False
        if not data:
            continue  # an empty chunk would end the body
        await stream.send(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        record.sent += len(data)
        record.chunks_sent += 1
    await stream.send(b"0\r\n\r\n")
    record.finished = True
    return True
