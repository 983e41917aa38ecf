"""The parent side of one piper worker process: start, stop, requests, cancels, restarts.

`PiperTTS` (piper.py) pools these; the protocol is documented in `_piper_worker.py`.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from llmrtc.voice.providers._piper_worker import (
    AUDIO,
    CANCEL,
    END,
    ERROR,
    HEADER,
    QUIT,
    READY,
    SPEAK,
    encode,
)
from llmrtc.voice.tts import TTSError

__all__ = ["PiperWorker"]

_LOG = logging.getLogger(__name__)
_START_TIMEOUT = 60.0
"""Seconds a worker may take to start and load the voice (2-4 s measured on a busy 2-core host)."""
_DRAIN_TIMEOUT = 5.0
"""Seconds a cancelled request may take to end before its worker is killed and restarted."""
_STOP_TIMEOUT = 2.0
"""Seconds a worker gets to exit after QUIT before it is killed."""
_SEND_TIMEOUT = 5.0
"""Seconds a request may take to be written to a worker (it reads all the time)."""
_DEAD = (
    anyio.EndOfStream,
    anyio.IncompleteRead,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)


class PiperWorker:
    """One worker process and the state of the request it serves (used by one lease at a time)."""

    def __init__(self, command: list[str]) -> None:
        self._command = command
        self._process: Process | None = None
        self._reader: BufferedByteReceiveStream | None = None
        self._header: tuple[bytes, int, int] | None = None
        self._next_id = 0
        self._broken = False
        """A request could not be written (the worker stopped reading): restart before reuse."""
        self._pending: int | None = None
        """A cancelled request whose END has not been read yet (drained by the next user)."""
        self.closed = False
        """The pool closed: a start racing with the close must not leave a process behind."""

    @property
    def pid(self) -> int | None:
        """The process id while a process runs."""
        return self._process.pid if self._process is not None else None

    async def start(self) -> None:
        """Start the process and wait for READY (the voice is loaded and warmed up)."""
        if self.closed:
            raise TTSError("the PiperTTS pool is closed")
        process = await anyio.open_process(
            self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None
        )
        if self.closed:
            with anyio.CancelScope(shield=True):
                process.kill()
                await process.aclose()
            raise TTSError("the PiperTTS pool is closed")
        assert process.stdout is not None
        self._process, self._reader = process, BufferedByteReceiveStream(process.stdout)
        self._header, self._pending, self._next_id, self._broken = None, None, 0, False
        try:
            with anyio.fail_after(_START_TIMEOUT):
                kind, _, payload = await self._receive()
        except (TimeoutError, *_DEAD) as exc:
            await self.stop()
            raise TTSError(f"the piper worker did not start: {type(exc).__name__}") from exc
        if kind != READY:
            await self.stop()
            raise TTSError(payload.decode("utf-8", "replace") or "the piper worker did not start")

    async def stop(self) -> None:
        """Ask the process to exit, kill it if it does not within `_STOP_TIMEOUT`, reap it."""
        process, self._process, self._reader = self._process, None, None
        if process is None:
            return
        with anyio.CancelScope(shield=True):
            try:
                assert process.stdin is not None
                with anyio.move_on_after(_STOP_TIMEOUT / 4):
                    await process.stdin.send(encode(QUIT, 0))
                await process.stdin.aclose()
            except _DEAD:
                pass
            with anyio.move_on_after(_STOP_TIMEOUT):
                await process.wait()
            if process.returncode is None:
                process.kill()
            await process.aclose()

    async def ready(self) -> None:
        """Make the worker usable: restart a dead process, end a cancelled request."""
        if self._process is None or self._broken or self._process.returncode is not None:
            await self.stop()
            await self.start()
        elif self._pending is not None:
            pending = self._pending
            with anyio.move_on_after(_DRAIN_TIMEOUT):
                try:
                    while True:
                        kind, request_id, _ = await self._receive()
                        if request_id == pending and kind in (END, ERROR):
                            self._pending = None
                            return
                except _DEAD:
                    pass
            _LOG.warning("piper worker %s did not end a cancelled request: restarting", self.pid)
            await self.stop()
            await self.start()

    async def speak(self, text: bytes) -> int:
        """Send a SPEAK request; its id."""
        self._next_id += 1
        await self._send(encode(SPEAK, self._next_id, text))
        return self._next_id

    async def receive(self, request_id: int, text: str) -> bytes | None:
        """The next audio piece of `request_id`, or None at its end.

        Raises:
            TTSError: piper failed on the text, or the worker died (restarted on next use).
        """
        while True:
            try:
                kind, frame_id, payload = await self._receive()
            except _DEAD as exc:
                raise TTSError(await self._died(text)) from exc
            if frame_id != request_id:
                continue  # the tail of an older request (never expected after `ready`)
            if kind == AUDIO:
                return payload
            if kind == END:
                return None
            raise TTSError(payload.decode("utf-8", "replace"))

    async def cancel(self, request_id: int) -> None:
        """Stop `request_id` without waiting for it: the next `ready()` reads its tail."""
        self._pending = request_id
        with contextlib.suppress(TTSError):
            await self._send(encode(CANCEL, request_id))

    async def _send(self, frame: bytes) -> None:
        process = self._process
        if process is None or process.stdin is None:
            raise TTSError("the piper worker is not running")
        # Shielded: a cancel landing half-way through a frame would put the stream out of step.
        # The worker's reader thread always reads, so the write is quick; a cancellation of the
        # caller is delivered at its next await instead (and cancels the request properly).
        with anyio.CancelScope(shield=True):
            try:
                with anyio.fail_after(_SEND_TIMEOUT):
                    await process.stdin.send(frame)
            except TimeoutError:
                self._broken = True
                process.kill()
                raise TTSError("the piper worker stopped reading requests; restarting it") from None
            except _DEAD as exc:
                raise TTSError(await self._died("")) from exc

    async def _receive(self) -> tuple[bytes, int, bytes]:
        """One frame; cancellation-safe (a header read before a cancel is kept)."""
        if self._reader is None:
            raise anyio.EndOfStream
        if self._header is None:
            kind, request_id, length = HEADER.unpack(await self._reader.receive_exactly(9))
            self._header = (kind, request_id, length)
        kind, request_id, length = self._header
        payload = await self._reader.receive_exactly(length) if length else b""
        self._header = None
        return kind, request_id, payload

    async def _died(self, text: str) -> str:
        process = self._process
        code: int | None = None
        if process is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(1.0):
                code = await process.wait()
            if process.returncode is None:
                process.kill()
        await self.stop()
        what = f" while speaking {text[:40]!r}" if text else ""
        if self.closed:
            return f"the PiperTTS pool was closed{what}"
        return f"the piper worker exited (code {code}){what}; it restarts for the next request"
