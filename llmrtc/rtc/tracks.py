"""Audio tracks between aiortc and the voice floor: `InboundAudio` turns a remote track into
llmrtc `AudioFrame`s; `OutboundAudio` is an aiortc track fed by `AudioFrame`s (a
`VoiceLoop.audio_out()`).

What aiortc hands over and expects, measured with aiortc 1.16 / PyAV 18:
- A decoded Opus frame is packed s16 *stereo* at 48 kHz, 960 samples (20 ms). Its
  `planes[0]` buffer is padded past the samples, so the samples are read with
  `to_ndarray()`. The channel count is kept: the voice loop's `Resampler` mixes to mono.
- The Opus encoder takes s16 mono or stereo at any rate and cuts 960-sample frames itself, but
  it upmixes mono to stereo at 0.707 (-3 dB), so mono 48 kHz 20 ms frames go to it as stereo
  with two equal channels (`to_av_frame`), which it passes through at full level.
- The RTP sender reads `recv()` as fast as it returns: pacing is the track's job, and
  `audio_out()` is already paced by the playout clock (one frame per 20 ms against the
  monotonic clock), so `OutboundAudio` adds no sleep of its own; a second clock here would
  drift against that one and grow a queue.
"""

from __future__ import annotations

import fractions
import logging
from collections.abc import AsyncIterable, AsyncIterator
from typing import TYPE_CHECKING

from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from llmrtc.voice.audio import Resampler
from llmrtc.voice.frames import AudioFrame

if TYPE_CHECKING:
    import av

__all__ = [
    "SAMPLE_RATE",
    "InboundAudio",
    "OutboundAudio",
    "from_av_frame",
    "to_av_frame",
]

logger = logging.getLogger(__name__)

SAMPLE_RATE = 48000
"""The rate `OutboundAudio` sends at (Opus's native rate; its RTP clock)."""
_TIME_BASE = fractions.Fraction(1, SAMPLE_RATE)


def from_av_frame(frame: av.AudioFrame) -> AudioFrame:
    """A decoded PyAV frame as an llmrtc `AudioFrame`, interleaved s16le, channels kept.

    Raises:
        ValueError: the frame's sample format is not s16 (packed) or s16p (planar), the
            formats aiortc's decoders (Opus, G.711) produce.
    """
    name = frame.format.name
    if name not in ("s16", "s16p"):
        raise ValueError(
            f"inbound audio frames must be s16 or s16p (what aiortc's decoders produce), got {name}"
        )
    # to_ndarray() cuts the padding planes carry; planar (channels, samples) is transposed to
    # interleave, packed (1, channels * samples) already is.
    array = frame.to_ndarray()
    if frame.format.is_planar:
        array = array.T
    return AudioFrame(
        array.astype("<i2", copy=False).tobytes(), frame.sample_rate, frame.layout.nb_channels
    )


def to_av_frame(pcm: bytes, pts: int) -> av.AudioFrame:
    """Mono s16le at 48 kHz as a *stereo* PyAV frame (each sample in both channels) stamped
    `pts` (in 1/48000 s), for aiortc's encoder.

    aiortc's Opus encoder resamples everything to stereo first; given mono, swresample's
    upmix puts 0.707 x the signal in each channel, and the receiver (mixing back to mono, as
    a browser's single-channel Opus never needed) heard speech 3 dB low. Two equal channels
    pass the encoder's resampler untouched, so what arrives is what was sent, as from a
    browser.

    Raises:
        ValueError: `pcm` is empty or has an odd byte count.
    """
    if not pcm or len(pcm) % 2:
        raise ValueError(f"mono s16 audio needs a positive even byte count, got {len(pcm)}")
    import av
    import numpy as np

    samples = np.repeat(np.frombuffer(pcm, dtype="<i2"), 2).reshape(1, -1)  # interleaved L R
    frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="stereo")
    frame.sample_rate = SAMPLE_RATE
    frame.pts = pts
    frame.time_base = _TIME_BASE
    return frame


class InboundAudio:
    """The audio of a remote aiortc track as llmrtc `AudioFrame`s (20 ms, s16 at the decoded
    rate and channel count: 48 kHz stereo for Opus).

    Example:
        @pc.on("track")
        def on_track(track):
            if track.kind == "audio":
                inbound = InboundAudio(track)       # then, in the session's task group:

        async for frame in inbound:
            await loop.push_audio(frame)

    Iteration ends when the track ends (the peer connection closed or the remote sender
    stopped). To stop reading earlier, cancel the reading task: a read waiting for the next
    frame is safe to cancel (aiortc's `track.stop()` would not wake it).

    Raises:
        ValueError: the track is not an audio track.
    """

    def __init__(self, track: MediaStreamTrack) -> None:
        """Wrap `track` (a remote track from the peer connection's ``"track"`` event)."""
        if track.kind != "audio":
            raise ValueError(f"InboundAudio needs an audio track, got a {track.kind!r} track")
        self.track = track
        """The aiortc track read from."""
        self.frames = 0
        """Frames received so far."""

    def __aiter__(self) -> AsyncIterator[AudioFrame]:
        return self

    async def __anext__(self) -> AudioFrame:
        try:
            frame = await self.track.recv()
        except MediaStreamError:
            raise StopAsyncIteration from None
        self.frames += 1
        return from_av_frame(frame)  # type: ignore[arg-type]  # an audio track's frames


class OutboundAudio(MediaStreamTrack):
    """An aiortc audio track that sends the `AudioFrame`s of an async iterator, e.g. a
    `VoiceLoop.audio_out()` (already paced at one 20 ms frame per 20 ms).

    Each frame is converted to mono s16 at 48 kHz (other rates and channel counts through one
    streaming `Resampler`, so the filter joins frames without clicks), sent as two equal
    channels (the encoder would upmix mono at -3 dB: `to_av_frame`) and stamped with the
    running sample count as `pts` (time base 1/48000: a stalled source shows as late
    packets, never as a gap in the RTP timestamps). `recv()` waits for the iterator's next
    frame and never sleeps on its own: the source sets the pace. When the iterator ends (or
    fails: the error is logged), the track ends, and aiortc's sender stops.

    Example:
        pc.addTrack(OutboundAudio(loop.audio_out()))

    Subscribe (`audio_out()`) when the track is made: the subscription buffers at most 10
    frames until the sender starts reading (once the connection is up), so at most 200 ms of
    queued silence go out in a burst then, and none of it later.
    """

    kind = "audio"

    def __init__(self, frames: AsyncIterable[AudioFrame]) -> None:
        """Send the frames of `frames` (any rate and channels; 20 ms frames keep one Opus
        packet per frame)."""
        super().__init__()
        self._source: AsyncIterator[AudioFrame] | None = aiter(frames)
        self._resampler = Resampler(SAMPLE_RATE)
        self.samples_sent = 0
        """Samples (at 48 kHz) handed to the encoder so far: the next frame's `pts`."""

    async def recv(self) -> av.AudioFrame:
        """The next frame for aiortc's encoder, as soon as the source has it.

        Raises:
            MediaStreamError: the track has ended (aiortc's signal to stop sending).
        """
        while True:
            source = self._source
            if source is None or self.readyState != "live":
                raise MediaStreamError
            try:
                frame = await anext(source)
            except StopAsyncIteration:
                self.stop()
                raise MediaStreamError from None
            except Exception as exc:
                logger.exception("OutboundAudio: the audio source failed; the track ends")
                self.stop()
                raise MediaStreamError from exc
            pcm = self._resampler.convert(frame)
            if pcm:  # empty only when a tiny frame was all held back by the filter
                break
        out = to_av_frame(pcm, self.samples_sent)
        self.samples_sent += len(pcm) // 2
        return out

    def stop(self) -> None:
        """End the track; the source iterator is dropped (a `VoiceLoop.audio_out()`
        subscription unsubscribes when dropped)."""
        self._source = None
        super().stop()
