"""`EspeakTTS`: the instant, robotic fallback voice, Debian's `espeak-ng` binary in a subprocess."""

from __future__ import annotations

import logging
import shutil
import struct
import subprocess
from collections.abc import AsyncIterator

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from llmrtc.voice.tts import TTSError

__all__ = ["EspeakTTS"]

logger = logging.getLogger(__name__)

ESPEAK_SAMPLE_RATE = 22050
"""espeak-ng's own voices all speak at 22050 Hz (mbrola voices, at other rates, are refused)."""

_READ_SIZE = 8820
"""Bytes per chunk yielded (200 ms of audio)."""

_CLOSE_TIMEOUT = 5.0
"""Seconds a stopped espeak-ng may take to be reaped (it exits at once when killed)."""


class EspeakTTS:
    """Offline TTS through `espeak-ng --stdout`: robotic but instant (a few ms to first audio)
    and nearly free, for tests and machines without piper.

    Each `synthesize` runs one `espeak-ng` process (text on its stdin, so no text is ever read
    as an option), parses the WAV header it writes and streams the samples as espeak produces
    them. Closing the iterator kills the process.

    Example:
        tts = EspeakTTS(words_per_minute=200)
        async for pcm in tts.synthesize("Hello there."):   # mono s16le at 22050 Hz
            ...

    Args:
        voice: An espeak-ng voice (`espeak-ng --voices` lists them), default `en-us`.
        words_per_minute: Speaking rate, 80 to 450 (espeak's default is 175).

    Raises:
        FileNotFoundError: `espeak-ng` is not on PATH (Debian/Ubuntu: `apt install espeak-ng`).
        ValueError: `words_per_minute` is out of range or `voice` is empty.
    """

    def __init__(self, *, voice: str = "en-us", words_per_minute: int = 175) -> None:
        executable = shutil.which("espeak-ng")
        if executable is None:
            raise FileNotFoundError(
                "EspeakTTS needs the espeak-ng program on PATH "
                "(Debian/Ubuntu: apt install espeak-ng)"
            )
        if not isinstance(voice, str) or not voice.strip() or voice.startswith("-"):
            raise ValueError(f"EspeakTTS(voice=...) must name an espeak-ng voice, got {voice!r}")
        if isinstance(words_per_minute, bool) or not isinstance(words_per_minute, int):
            raise ValueError(
                f"EspeakTTS(words_per_minute=...) must be an int, got {words_per_minute!r}"
            )
        if not 80 <= words_per_minute <= 450:
            raise ValueError(
                f"EspeakTTS(words_per_minute={words_per_minute}): espeak-ng allows 80 to 450"
            )
        self._voice = voice
        self._command = [
            *(executable, "--stdout", "--stdin", "-b", "1"),
            *("-v", voice, "-s", str(words_per_minute)),
        ]

    @property
    def sample_rate(self) -> int:
        """22050: espeak-ng's rate."""
        return ESPEAK_SAMPLE_RATE

    @property
    def name(self) -> str:
        """`espeak-ng/<voice>`."""
        return f"espeak-ng/{self._voice}"

    async def synthesize(self, text: str) -> AsyncIterator[bytes]:
        """Stream `text` as mono s16le chunks at 22050 Hz.

        Raises:
            TTSError: espeak-ng failed (an unknown voice, a crash) or wrote no WAV audio.
        """
        if not text.strip():
            return
        process = await anyio.open_process(
            self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            # espeak reads all of stdin before it speaks; a sentence fits the pipe's buffer.
            await process.stdin.send(text.encode("utf-8"))
            await process.stdin.aclose()
            reader = BufferedByteReceiveStream(process.stdout)
            await self._read_header(reader, process)
            carry = b""
            while True:
                try:
                    data = carry + await reader.receive(_READ_SIZE)
                except anyio.EndOfStream:
                    break
                cut = len(data) - len(data) % 2  # whole samples only
                carry = data[cut:]
                if cut:
                    yield data[:cut]
            if await process.wait() != 0:
                raise TTSError(await self._failure(process))
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                # Bounded: a killed child's exit that the event loop never notices (seen once
                # on a loaded machine) must not freeze the reply that closes this stream.
                with anyio.move_on_after(_CLOSE_TIMEOUT) as closing:
                    await process.aclose()
                if closing.cancelled_caught:
                    logger.warning(
                        "espeak-ng (pid %s) did not exit within %.0f s of being stopped",
                        process.pid,
                        _CLOSE_TIMEOUT,
                    )

    async def _read_header(self, reader: BufferedByteReceiveStream, process: Process) -> None:
        """Skip the RIFF/WAVE header up to the `data` chunk, checking the format."""
        try:
            riff = await reader.receive_exactly(12)
            if riff[:4] != b"RIFF" or riff[8:12] != b"WAVE":
                raise TTSError(f"espeak-ng wrote no WAV audio (starts {riff[:12]!r})")
            while True:
                chunk_id, size = struct.unpack("<4sI", await reader.receive_exactly(8))
                if chunk_id == b"data":
                    return
                body = await reader.receive_exactly(size + size % 2)
                if chunk_id == b"fmt ":
                    _, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
                    if (channels, rate, bits) != (1, ESPEAK_SAMPLE_RATE, 16):
                        raise TTSError(
                            f"espeak-ng voice {self._voice!r} speaks {channels} ch {rate} Hz "
                            f"{bits}-bit; EspeakTTS needs mono 22050 Hz 16-bit"
                        )
        except (anyio.IncompleteRead, anyio.EndOfStream):
            await process.wait()
            raise TTSError(await self._failure(process)) from None

    async def _failure(self, process: Process) -> str:
        message = b""
        if process.stderr is not None:
            with anyio.move_on_after(1.0):
                async for piece in process.stderr:
                    message += piece
        detail = message.decode("utf-8", "replace").strip() or "no message"
        return f"espeak-ng (voice {self._voice!r}) failed with code {process.returncode}: {detail}"
