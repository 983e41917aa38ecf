"""The piper worker process: `python -P _piper_worker.py --model VOICE.onnx --threads N`.

piper-tts is GPL-3.0, so the library never imports it: `PiperTTS` starts this file as a
subprocess, and only this process imports piper. Module level holds only the standard library
and the protocol both sides share (the parent imports the constants; piper is imported in
`main`). It is started by path with `-P`, so its own folder (which holds `piper.py`, the
parent's module) is not on `sys.path` and `import piper` finds the real package.

Protocol: frames of a 9-byte header `>cII` (kind, request id, payload length) and the payload.

Parent to worker:
    SPEAK (id, UTF-8 text): synthesize the text; ids increase per worker.
    CANCEL (id, empty): stop request `id` (and any earlier one) at once.
    QUIT (0, empty), or end of input: exit.

Worker to parent:
    READY (0, JSON `{"sample_rate": ...}`): the voice is loaded (first frame, once).
    AUDIO (id, s16le mono PCM): the next piece of the request's audio.
    END (id, empty): the request is finished or was cancelled; nothing more comes for it.
    ERROR (id, UTF-8 message): the request failed (id 0 before READY: loading failed; exit).

Audio goes out sentence by sentence as piper produces it (a run of more than `MAX_PIECE_CHARS`
without a sentence end is cut at a comma or space first), in pieces of `CHUNK_SAMPLES`, so a
cancel also stops the sending between pieces. A cancel that arrives while ONNX runs sets the
run's `terminate` flag, which stops the inference within a few milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import signal
import struct
import sys
import threading
from typing import IO, Any

HEADER = struct.Struct(">cII")
"""Frame header: kind (1 byte), request id, payload length (unsigned 32-bit, big-endian)."""

SPEAK = b"S"
CANCEL = b"C"
QUIT = b"Q"
READY = b"R"
AUDIO = b"A"
END = b"E"
ERROR = b"X"

CHUNK_SAMPLES = 2205
"""Samples per AUDIO frame (100 ms at 22050 Hz): small enough that a cancel stops the sending
quickly, large enough that framing costs nothing."""

MAX_TEXT_BYTES = 1 << 20
"""Longest SPEAK payload the worker accepts (a guard against a corrupt stream)."""


MAX_PIECE_CHARS = 300
"""Longest text piper gets at once without a sentence end in it (~18 s of speech). piper makes
a sentence's audio in one ONNX run, so a long unpunctuated run of words would delay the first
audio by its whole length (400 words: 64 s of speech, first audio after 4-40 s)."""

_SENTENCE_END = re.compile(r"[.!?;:]+[\"')\]]*\s")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def split_long(text: str, limit: int = MAX_PIECE_CHARS) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut after the last sentence end in
    reach, else after the last comma in its second half, else at the last space, else at the
    limit. Text with sentence ends at least every `limit` characters stays as piper would cut
    it; control characters (which espeak refuses) become spaces."""
    rest = _CONTROL.sub(" ", text)
    pieces = []
    while len(rest) > limit:
        window = rest[:limit]
        ends = [match.end() for match in _SENTENCE_END.finditer(window)]
        comma = window.rfind(", ")
        if ends:
            cut = ends[-1]
        elif comma > limit // 2:
            cut = comma + 2
        else:
            cut = window.rfind(" ") + 1 or limit
        pieces.append(rest[:cut])
        rest = rest[cut:]
    pieces.append(rest)
    return [piece for piece in pieces if piece.strip()]


def encode(kind: bytes, request_id: int, payload: bytes = b"") -> bytes:
    """One frame of the protocol."""
    return HEADER.pack(kind, request_id, len(payload)) + payload


class _Requests:
    """What the reader thread shares with the synthesizing thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cancel_upto = 0
        """Every request id at or below this one is cancelled (ids only increase)."""
        self.current = 0
        self.run_options: Any = None
        self.queue: queue.SimpleQueue[tuple[int, str] | None] = queue.SimpleQueue()

    def cancelled(self, request_id: int) -> bool:
        with self.lock:
            return request_id <= self.cancel_upto

    def cancel(self, request_id: int) -> None:
        with self.lock:
            self.cancel_upto = max(self.cancel_upto, request_id)
            if self.run_options is not None and self.current <= request_id:
                self.run_options.terminate = True

    def begin(self, request_id: int, run_options: Any) -> None:
        with self.lock:
            self.current = request_id
            self.run_options = run_options
            if request_id <= self.cancel_upto:
                run_options.terminate = True


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        piece = stream.read(size - len(data))
        if not piece:
            return None
        data += piece
    return data


def _read_requests(stream: IO[bytes], requests: _Requests) -> None:
    """Reader thread: queue SPEAK requests, apply CANCELs at once, stop at QUIT or EOF."""
    try:
        while True:
            header = _read_exactly(stream, HEADER.size)
            if header is None:
                break
            kind, request_id, length = HEADER.unpack(header)
            if length > MAX_TEXT_BYTES:
                break
            payload = _read_exactly(stream, length) if length else b""
            if payload is None or kind == QUIT:
                break
            if kind == SPEAK:
                requests.queue.put((request_id, payload.decode("utf-8", "replace")))
            elif kind == CANCEL:
                requests.cancel(request_id)
    finally:
        # The parent is gone or asked us to go: stop what runs and let the main thread exit.
        requests.cancel(0xFFFFFFFF)
        requests.queue.put(None)


class _CancellableSession:
    """Wraps piper's ONNX session so each run carries the current request's `RunOptions`
    (piper calls `session.run(None, inputs)` without any)."""

    def __init__(self, session: Any, requests: _Requests) -> None:
        self._session = session
        self._requests = requests

    def run(self, output_names: Any, input_feed: Any) -> Any:
        return self._session.run(output_names, input_feed, self._requests.run_options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def _load_voice(model: str, config: str, threads: int, requests: _Requests) -> Any:
    import onnxruntime  # type: ignore[import-untyped]
    from piper.config import PiperConfig
    from piper.voice import PiperVoice

    with open(config, encoding="utf-8") as file:
        piper_config = PiperConfig.from_dict(json.load(file))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Idle ORT threads spin by default: on a machine shared with STT and the LLM that burns
    # cores between sentences for nothing.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(
        model, sess_options=options, providers=["CPUExecutionProvider"]
    )
    return PiperVoice(config=piper_config, session=_CancellableSession(session, requests))


def _speak(out: IO[bytes], voice: Any, requests: _Requests, request_id: int, text: str) -> None:
    import onnxruntime

    requests.begin(request_id, onnxruntime.RunOptions())
    step = 2 * CHUNK_SAMPLES
    try:
        for piece in split_long(text):
            for chunk in voice.synthesize(piece):
                pcm = chunk.audio_int16_bytes
                for start in range(0, len(pcm), step):
                    if requests.cancelled(request_id):
                        break
                    out.write(encode(AUDIO, request_id, pcm[start : start + step]))
                if requests.cancelled(request_id):
                    break
            if requests.cancelled(request_id):
                break
    except Exception as exc:  # any engine failure goes back as an ERROR frame
        if not requests.cancelled(request_id):
            message = f"piper failed on {text[:60]!r}: {type(exc).__name__}: {exc}"
            out.write(encode(ERROR, request_id, message.encode("utf-8")))
            return
    out.write(encode(END, request_id))


def main(argv: list[str] | None = None) -> int:
    """Load the voice, answer READY, then serve SPEAK requests until QUIT or end of input."""
    parser = argparse.ArgumentParser(description="llmrtc's piper TTS worker (see module doc)")
    parser.add_argument("--model", required=True, help="the voice's .onnx file")
    parser.add_argument("--config", required=True, help="the voice's .onnx.json file")
    parser.add_argument("--threads", type=int, default=1, help="ONNX intra-op threads")
    args = parser.parse_args(argv)
    # Ctrl-C in a terminal reaches the whole process group: the parent decides when we stop
    # (QUIT, or its end of the pipe closing), so a keyboard interrupt prints no traceback here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    # The protocol owns the real stdout; anything a library prints goes to stderr instead.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    source = os.fdopen(os.dup(0), "rb", buffering=0)

    requests = _Requests()
    try:
        voice = _load_voice(args.model, args.config, max(1, args.threads), requests)
    except Exception as exc:  # reported to the parent, which raises TTSError
        message = f"loading the piper voice {args.model} failed: {type(exc).__name__}: {exc}"
        out.write(encode(ERROR, 0, message.encode("utf-8")))
        return 1
    for _ in voice.synthesize("Hello."):
        pass  # the first run of a session is twice as slow: pay it before READY, not on a turn
    ready = {"sample_rate": voice.config.sample_rate, "pid": os.getpid()}
    out.write(encode(READY, 0, json.dumps(ready).encode("utf-8")))

    threading.Thread(target=_read_requests, args=(source, requests), daemon=True).start()
    try:
        while (request := requests.queue.get()) is not None:
            _speak(out, voice, requests, *request)
    except BrokenPipeError:
        return 0  # the parent closed its end: nobody is listening any more
    return 0


if __name__ == "__main__":
    sys.exit(main())
