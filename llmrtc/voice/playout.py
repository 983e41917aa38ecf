"""Playout: the agent's speech as one 20 ms frame every 20 ms, and what the user heard of it.

A clock task produces frame *n* at `start + n * 0.02` s (it sleeps until that absolute time,
so sleep overshoot never accumulates into drift) and hands it to every `frames()` subscriber:
speech while segments are queued, digital silence otherwise. Frames are "played" on schedule
whether or not anyone consumes them, so heard text and speech events stay right headless.

What was heard is estimated per segment (a sentence's audio): its duration is spread over its
words in proportion to their characters, and a word counts as heard once its estimated end has
been played. While a segment's synthesis is still running its total duration is not known yet;
it is taken to be at least `_SLOW_SECONDS_PER_CHAR` per character until a segment has finished,
then the rate measured so far plus `_MEASURED_MARGIN`: erring long under-claims a word or two,
erring short would claim words the user never heard.

A barge-in that may turn out false (a cough) `pause`s the playout instead of clearing it:
silence from the next frame, the queue kept; `resume` goes on from the start of the first
word not yet heard (the word the pause cut is said again, whole, also when it ended the
segment before: speech frames silenced by the pause are unplayed, whichever segment they held).
"""

from __future__ import annotations

import logging
import re
from collections import deque
from collections.abc import Callable

import anyio

from llmrtc.voice._broadcast import Broadcast, Subscription
from llmrtc.voice.frames import FRAME_DURATION, AudioFrame

__all__ = ["Playout", "Segment", "SpokenReply"]

logger = logging.getLogger(__name__)

_MAX_LAG = 0.1
"""A clock this far behind (the event loop stalled) re-anchors instead of bursting frames out."""
_FRAME_BUFFER = 10
"""Frames each `frames()` subscriber may lag (200 ms) before its oldest are dropped."""
_WORD = re.compile(r"\S+")
_SLOW_SECONDS_PER_CHAR = 0.1
"""A slow speaking rate (TTS voices speak ~0.06-0.08 s per character): the least an unfinished
segment is assumed to last, so its heard words are not over-claimed."""
_MEASURED_MARGIN = 1.1
"""Once a segment finished, an unfinished one is assumed 10 % slower than the measured rate."""


class Segment:
    """One piece of text being spoken: its audio arrives with `append` while it plays."""

    def __init__(self, reply: SpokenReply, text: str, *, filler: bool) -> None:
        self.reply = reply
        self.text = text
        self.filler = filler
        """Said while tools run: not part of the reply's heard text."""
        self._pcm = bytearray()
        self._offset = 0  # bytes played
        self.done = False
        """Synthesis finished: no more audio will come."""
        self.finished = False
        """Played to its end."""
        self.cleared = False
        """Dropped by a barge-in before it finished."""
        self._heard: int | None = None  # frozen when cleared: later audio or estimates

    @property
    def samples(self) -> int:
        """Samples received so far."""
        return len(self._pcm) // 2

    @property
    def played(self) -> int:
        """Samples played so far."""
        return self._offset // 2

    def append(self, pcm: bytes) -> None:
        """Add synthesised audio (mono s16le at the playout's rate); ignored once cleared."""
        if not self.cleared and not self.done:
            self._pcm += pcm

    def finish(self) -> None:
        """No more audio will come for this segment."""
        self.done = True

    def _cut(self, seconds_per_char: float, rate: int) -> None:
        """Dropped unfinished: what was heard of it is decided now, once."""
        if not self.cleared:
            self._heard = self.heard_words(seconds_per_char, rate)
            self.cleared = True

    def heard_words(self, seconds_per_char: float, rate: int) -> int:
        """How many of the text's words were heard (see the module docstring); an unfinished
        segment is assumed to last at least `seconds_per_char` per character
        (`Playout.unfinished_seconds_per_char`)."""
        if self._heard is not None:
            return self._heard
        spans = [m.end() for m in _WORD.finditer(self.text)]
        if self.finished:
            return len(spans)
        total = self.samples
        if not self.done:  # `seconds_per_char` is the rate assumed for it: see the module
            total = max(total, round(len(self.text) * seconds_per_char * rate))
        played, length = self.played, len(self.text)
        if not played or not length:
            return 0
        return sum(1 for end in spans if played * length >= end * total)

    def heard_text(self, seconds_per_char: float, rate: int) -> str:
        """The text up to the end of its last heard word."""
        words = self.heard_words(seconds_per_char, rate)
        if not words:
            return ""
        return self.text[: list(_WORD.finditer(self.text))[words - 1].end()]

    def _rewind_to_heard(self, seconds_per_char: float, rate: int) -> None:
        """Play on from the end of the last heard word (the estimate `heard_words` uses), so a
        word cut by a pause is said again whole and nothing heard is said twice."""
        if self.finished or not self._offset or not self.text:
            return
        words = self.heard_words(seconds_per_char, rate)
        total = self.samples
        if not self.done:
            total = max(total, round(len(self.text) * seconds_per_char * rate))
        end = list(_WORD.finditer(self.text))[words - 1].end() if words else 0
        position = 2 * (end * total // len(self.text))
        self._offset = min(self._offset, position, len(self._pcm))


class SpokenReply:
    """Everything one turn says, in order; `played()` returns when it has been heard (or cut)."""

    def __init__(self, playout: Playout) -> None:
        self._playout = playout
        self.segments: list[Segment] = []
        self.started = False
        """Its first audio went out (`AgentSpeechStarted` was due)."""
        self.cleared = False
        """A barge-in dropped what was left of it."""
        self.closed = False
        self._pending = 0
        self._played = anyio.Event()

    def add_segment(self, text: str, *, filler: bool = False) -> Segment:
        """Queue a segment for `text` after everything queued; feed it with `Segment.append`."""
        segment = Segment(self, text, filler=filler)
        self.segments.append(segment)
        if self.cleared or self.closed:
            segment.cleared = True
            return segment
        self._pending += 1
        self._playout._queue.append(segment)
        return segment

    def close(self) -> None:
        """No more segments will be added."""
        self.closed = True
        self._check_played()

    async def played(self) -> None:
        """Wait until the reply is closed and played to its end, or cleared."""
        await self._played.wait()

    def heard_text(self) -> str:
        """What the user heard of the reply's own text (fillers left out), to the word."""
        rate, spc = self._playout.sample_rate, self._playout.unfinished_seconds_per_char
        parts = [s.heard_text(spc, rate) for s in self.segments if not s.filler]
        return " ".join(p for p in parts if p)

    def _segment_done(self) -> None:
        self._pending -= 1
        self._check_played()

    def _clear(self) -> None:
        self.cleared = True
        self._pending = 0
        self._played.set()

    def _check_played(self) -> None:
        if self.closed and self._pending <= 0:
            self._played.set()


class Playout:
    """The outbound audio clock of one `VoiceLoop`.

    Example:
        playout = Playout(48000, on_started=lambda reply, text: print("speaking", text))
        task_group.start_soon(playout.run)
        reply = playout.open_reply()
        segment = reply.add_segment("Hello.")
        segment.append(pcm48k); segment.finish(); reply.close()
        await reply.played()
    """

    def __init__(self, sample_rate: int, *, on_started: Callable[[SpokenReply, str], None]) -> None:
        """A playout at `sample_rate` (mono); `on_started(reply, text)` runs when a reply's
        first audio goes out, in the clock task."""
        self.sample_rate = sample_rate
        self._frame_bytes = 2 * round(sample_rate * FRAME_DURATION)
        self._silence = bytes(self._frame_bytes)
        self._queue: deque[Segment] = deque()
        self._on_started = on_started
        self._frames: Broadcast[AudioFrame] = Broadcast(_FRAME_BUFFER, "audio_out()")
        self.seconds_per_char = 0.07
        """Speaking rate estimate (updated from finished segments) for unfinished segments."""
        self._measured = False  # a finished segment has measured `seconds_per_char`
        self.frames_out = 0
        """Frames produced since the clock started."""
        self.last_frame_speech = False
        """Whether the most recent frame held speech."""
        # The speech frames a subscriber may still hold (its buffer is _FRAME_BUFFER long):
        # `clear()` turns them into silence so a bursty consumer hears nothing after a barge-in.
        # Each with the (segment, bytes) it took, so a silenced frame is not counted as heard.
        self._recent_speech: deque[tuple[AudioFrame, list[tuple[Segment, int]]]] = deque(
            maxlen=_FRAME_BUFFER
        )
        self._parts: list[tuple[Segment, int]] = []  # what the last frame took
        self.paused = False
        """`pause()`d: silence goes out and the queue waits (see the module docstring)."""

    @property
    def unfinished_seconds_per_char(self) -> float:
        """The speaking rate assumed for a segment still being synthesised (its length is
        not known yet): a slow floor until a segment finished, then the measured rate plus a
        margin."""
        if self._measured:
            return self.seconds_per_char * _MEASURED_MARGIN
        return max(self.seconds_per_char, _SLOW_SECONDS_PER_CHAR)

    @property
    def idle(self) -> bool:
        """Nothing queued to play."""
        return not self._queue

    def open_reply(self) -> SpokenReply:
        """A new reply whose segments play after everything queued."""
        return SpokenReply(self)

    def frames(self) -> Subscription[AudioFrame]:
        """Every frame from now on (bounded buffer: a slow consumer loses its oldest frames)."""
        return self._frames.subscribe()

    def pause(self) -> None:
        """Stop playing now, keeping what is queued: the next frame is silence (frames a
        consumer has not taken yet become silence too), until `resume` or `clear`.
        Synchronous, for a barge-in that may turn out false."""
        self.paused = True
        self._silence_recent()

    def resume(self) -> None:
        """Play on after `pause`, from the start of the first word not heard."""
        if not self.paused:
            return
        self.paused = False
        if self._queue:
            self._queue[0]._rewind_to_heard(self.unfinished_seconds_per_char, self.sample_rate)

    def clear(self) -> None:
        """Drop everything queued: the next frame is silence. Synchronous, for barge-in."""
        self.paused = False
        self._silence_recent()
        replies: dict[int, SpokenReply] = {}
        for segment in self._queue:
            segment._cut(self.unfinished_seconds_per_char, self.sample_rate)
            replies[id(segment.reply)] = segment.reply
        self._queue.clear()
        for reply in replies.values():
            reply._clear()

    def _silence_recent(self) -> None:
        """Turn the speech frames subscribers still hold into silence, and count them unplayed
        (see `_recent_speech`)."""
        if not self._recent_speech:
            return
        recent = {id(frame): parts for frame, parts in self._recent_speech}
        self._recent_speech.clear()
        silence = AudioFrame(self._silence, self.sample_rate)
        silenced: list[list[tuple[Segment, int]]] = []

        def to_silence(frame: AudioFrame) -> AudioFrame:
            parts = recent.pop(id(frame), None)
            if parts is None:
                return frame
            silenced.append(parts)
            return silence

        self._frames.replace(to_silence)
        # Speech the user will never get was not played: the segments count their heard words
        # without it (and a paused one plays it again). A segment whose end was in those
        # frames had already finished (left the queue): it goes back to the front, unfinished,
        # so a resume says its cut word again and a clear counts only what was really played.
        # Not one of a reply already played to its end: its turn may be over (only a consumer
        # lagging behind the clock holds such frames; their words stay counted as heard).
        reopened: list[Segment] = []
        for parts in silenced:
            for segment, taken in parts:
                if segment.finished:
                    if segment.reply._played.is_set():
                        continue
                    segment.finished = False
                    segment.reply._pending += 1
                    reopened.append(segment)
                segment._offset -= taken
        self._queue.extendleft(reversed(reopened))

    def drop(self, segments: list[Segment]) -> None:
        """Take `segments` out of the queue unplayed (or cut where they are playing)."""
        for segment in segments:
            if segment in self._queue:
                self._queue.remove(segment)
                segment.reply._segment_done()
            segment._cut(self.unfinished_seconds_per_char, self.sample_rate)

    def close(self) -> None:
        """End the `frames()` iterators."""
        self.clear()
        self._frames.close()

    async def run(self) -> None:
        """The clock: one frame every 20 ms against the monotonic clock, until cancelled."""
        start = anyio.current_time()
        index = 0
        while True:
            deadline = start + index * FRAME_DURATION
            now = anyio.current_time()
            if now - deadline > _MAX_LAG:
                logger.debug("playout clock %.0f ms late: re-anchored", (now - deadline) * 1000)
                start, index, deadline = now, 0, now
            await anyio.sleep_until(deadline)
            frame = AudioFrame(self._next_frame(), self.sample_rate)
            if self.last_frame_speech:
                self._recent_speech.append((frame, self._parts))
            self._frames.publish(frame)
            self.frames_out += 1
            index += 1

    def _next_frame(self) -> bytes:
        """The next 20 ms of audio: queued speech (gapless across segments), silence padded."""
        out = bytearray()
        need = self._frame_bytes
        speech = False
        self._parts = []
        while self._queue and len(out) < need and not self.paused:
            segment = self._queue[0]
            available = len(segment._pcm) - segment._offset
            if available > 0:
                take = min(available, need - len(out))
                out += segment._pcm[segment._offset : segment._offset + take]
                segment._offset += take
                self._parts.append((segment, take))
                speech = True
                reply = segment.reply
                if not reply.started:
                    reply.started = True
                    self._on_started(reply, segment.text)
                continue
            if not segment.done:
                break  # synthesis is behind: an underrun, filled with silence
            self._queue.popleft()
            segment.finished = True
            if segment.samples and segment.text:
                spc = segment.samples / self.sample_rate / len(segment.text)
                # The first measurement replaces the guess; later ones are averaged.
                prior = self.seconds_per_char if self._measured else spc
                self.seconds_per_char = 0.8 * prior + 0.2 * spc
                self._measured = True
            segment.reply._segment_done()
        self.last_frame_speech = speech
        if len(out) < need:
            out += self._silence[: need - len(out)]
        return bytes(out)
