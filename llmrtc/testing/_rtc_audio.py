"""The test client's microphone: a paced source of 20 ms frames (queued audio, else silence),
and the conversion of whatever a test sends (frames, a WAV file, TTS output) into its frames."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import anyio

from llmrtc.rtc.errors import RTCError
from llmrtc.voice.audio import Resampler, split_frames
from llmrtc.voice.frames import FRAME_DURATION, AudioFrame
from llmrtc.voice.tts import TTS
from llmrtc.voice.wav import read_wav

__all__ = ["MIC_RATE", "AudioInput", "Microphone", "default_tts", "mic_frames", "synthesize"]

MIC_RATE = 48000
"""The rate the microphone sends at (Opus's own: the encoder takes it as it is)."""
_RESYNC_AFTER = 0.1
"""A source read this late (seconds) restarts its clock instead of bursting to catch up."""

AudioInput = AudioFrame | Iterable[AudioFrame] | str | os.PathLike[str]
"""What `RTCTestClient.send_audio` takes: frames (any rate and channels) or a WAV path."""


def mic_frames(audio: AudioInput) -> list[AudioFrame]:
    """`audio` as mono 48 kHz 20 ms frames (the last one padded with silence).

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: a file that is not a 16-bit PCM WAV.
        TypeError: anything else than frames or a path.
    """
    if isinstance(audio, str | os.PathLike):
        frames: Iterable[AudioFrame] = [read_wav(Path(audio))]
    elif isinstance(audio, AudioFrame):
        frames = [audio]
    else:
        frames = audio
    resampler = Resampler(MIC_RATE)
    pcm = bytearray()
    for frame in frames:
        if not isinstance(frame, AudioFrame):
            raise TypeError(
                "send_audio takes an AudioFrame, an iterable of AudioFrames or a WAV path, "
                f"got an iterable holding {type(frame).__name__}"
            )
        pcm += resampler.convert(frame)
    pcm += resampler.flush()
    return split_frames(bytes(pcm), MIC_RATE) if pcm else []


def default_tts() -> TTS:
    """`say`'s voice when the test gives none: espeak-ng, en-us at 150 words per minute (what
    Whisper transcribes well)."""
    from llmrtc.voice.providers.espeak import EspeakTTS

    return EspeakTTS(voice="en-us", words_per_minute=150)


async def synthesize(tts: TTS, text: str) -> AudioFrame:
    """All of `text`'s speech from `tts`, as one frame at the TTS's rate."""
    pcm = bytearray()
    chunks = tts.synthesize(text)
    try:
        async for chunk in chunks:
            pcm += chunk
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    if not pcm:
        raise ValueError(f"{tts.name} produced no audio for {text!r}")
    return AudioFrame(bytes(pcm), tts.sample_rate)


class Microphone:
    """An endless async iterator of mono 48 kHz 20 ms frames, one per 20 ms of the clock:
    queued frames first, silence when the queue is empty (a live microphone never stops).

    It is read by aiortc's RTP sender task (through `OutboundAudio`), so it keeps no task of
    its own: when the peer connection closes, nothing reads it any more (`close` only releases
    whoever waits in `sent`).
    """

    def __init__(self) -> None:
        """An idle microphone (silence until `queue` is called)."""
        self._queue: deque[AudioFrame] = deque()
        self._queued = 0  # frames ever queued
        self._sent = 0  # queued frames handed to the sender
        self._clock: float | None = None
        self._ticks = 0
        self._waiters: list[tuple[int, anyio.Event]] = []
        self._closed = False
        self._silence = AudioFrame.silence(FRAME_DURATION, MIC_RATE)

    def __aiter__(self) -> AsyncIterator[AudioFrame]:
        return self

    async def __anext__(self) -> AudioFrame:
        now = anyio.current_time()
        if self._clock is None or now - self._deadline() > _RESYNC_AFTER:
            # The first read, or a reader that stalled: start the clock here rather than
            # send a burst of frames to catch up (a real microphone's audio is not early).
            self._clock, self._ticks = now, 0
        await anyio.sleep_until(self._deadline())
        self._ticks += 1
        if not self._queue:
            return self._silence
        frame = self._queue.popleft()
        self._sent += 1
        self._wake()
        return frame

    def _deadline(self) -> float:
        assert self._clock is not None
        return self._clock + self._ticks * FRAME_DURATION

    def queue(self, frames: Iterable[AudioFrame]) -> int:
        """Queue mono 48 kHz 20 ms `frames` after what is queued; returns the mark to pass
        to `sent` (the count of queued frames once these are out)."""
        for frame in frames:
            self._queue.append(frame)
            self._queued += 1
        return self._queued

    async def sent(self, mark: int) -> None:
        """Wait until the frames up to `mark` (from `queue`) went to the sender.

        Raises:
            RTCError: the microphone was closed first (the client closed).
        """
        if self._sent < mark and not self._closed:
            event = anyio.Event()
            self._waiters.append((mark, event))
            await event.wait()
        if self._sent < mark:
            raise RTCError("connection_closed", "the client closed before its audio was sent")

    def close(self) -> None:
        """Nothing more will be sent: release every `sent` waiter (they raise)."""
        self._closed = True
        for _, event in self._waiters:
            event.set()
        self._waiters.clear()

    def _wake(self) -> None:
        done = [(mark, event) for mark, event in self._waiters if self._sent >= mark]
        for item in done:
            self._waiters.remove(item)
            item[1].set()
