"""Endpointing: where a user's utterance starts and ends, decided from VAD windows in *audio*
time (samples), so audio pushed faster than real time endpoints exactly as live audio does.

The real frame arithmetic with the defaults (`VoiceConfig`) and Silero at 16 kHz:

- a 20 ms input frame at 48 kHz is 960 samples; resampled to 16 kHz it is 320 samples, so a
  512-sample (32 ms) VAD window is complete after every 1.6 frames on average;
- `min_speech` 0.1 s = 1 600 samples: an utterance starts after 4 voiced windows (128 ms);
- `barge_in_min_speech` 0.2 s = 3 200 samples: a barge-in after 7 voiced windows (224 ms);
- `end_of_speech_silence` 0.5 s = 8 000 samples = 15.6 windows: the utterance ends after 16
  unvoiced windows (512 ms) in a row;
- `max_utterance` 30 s = 480 000 samples: the utterance is cut there (938 windows).

A window counts as voiced when its speech probability is above `VoiceConfig.vad_threshold`.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from llmrtc.voice.config import VoiceConfig

__all__ = ["Endpointer", "UtteranceEnded", "UtteranceStarted"]

PRE_ROLL = 0.3
"""Seconds of audio kept from before the detected start, so the first word is not clipped
(the VAD needs a few windows of a word before it is sure)."""


@dataclass(frozen=True, slots=True)
class UtteranceStarted:
    """`min_speech` of voiced audio: the user started speaking."""

    audio_time: float
    """Where speech started (its first voiced window), seconds of audio since the stream began."""


@dataclass(frozen=True, slots=True)
class UtteranceEnded:
    """The utterance is over: `end_of_speech_silence` of unvoiced audio, or `max_utterance`."""

    pcm: bytes
    """Its audio (mono s16le at the VAD's rate): the pre-roll, the speech, the closing silence."""
    audio_time: float
    """Where speech started, as in `UtteranceStarted`."""
    duration: float
    """Seconds from the start of speech to the end of its last voiced window."""
    cut: bool = False
    """True when `max_utterance` cut it (the user may still be speaking)."""


class Endpointer:
    """The endpointing state machine of one audio stream, fed one VAD window at a time.

    Example:
        endpointer = Endpointer(VoiceConfig(), sample_rate=16000, window_samples=512)
        for window in windows:
            event = endpointer.push(window, stream.speech_probability(window))
            if isinstance(event, UtteranceEnded):
                text = await stt.transcribe(event.pcm)
    """

    def __init__(self, config: VoiceConfig, *, sample_rate: int, window_samples: int) -> None:
        """Count `config`'s durations in samples at `sample_rate`, windows of `window_samples`."""
        if sample_rate <= 0 or window_samples <= 0:
            raise ValueError(
                f"Endpointer needs a positive sample_rate and window_samples, got "
                f"{sample_rate!r} and {window_samples!r}"
            )
        self.sample_rate = sample_rate
        self.window_samples = window_samples
        self.threshold = config.vad_threshold
        self._min_speech = round(config.min_speech * sample_rate)
        self._end_silence = round(config.end_of_speech_silence * sample_rate)
        self._max_utterance = round(config.max_utterance * sample_rate)
        # A voiced run being considered dies after this much unvoiced audio (a click, a cough).
        self._candidate_gap = max(self._min_speech, window_samples)
        self._pre_roll: deque[bytes] = deque(
            maxlen=max(1, math.ceil(PRE_ROLL * sample_rate / window_samples))
        )
        self._position = 0  # samples seen so far
        self._in_speech = False
        self._windows: list[bytes] = []  # the candidate run, then the utterance
        self._start = 0  # sample where the voiced run started
        self._voiced = 0  # voiced samples in the run / utterance
        self._silence = 0  # unvoiced samples since the last voiced window
        self._last_voiced_end = 0

    @property
    def in_speech(self) -> bool:
        """True between `UtteranceStarted` and `UtteranceEnded`."""
        return self._in_speech

    @property
    def voiced_seconds(self) -> float:
        """Voiced audio in the current utterance so far (0 outside one): the barge-in debounce."""
        return self._voiced / self.sample_rate if self._in_speech else 0.0

    @property
    def audio_time(self) -> float:
        """Seconds of audio seen so far."""
        return self._position / self.sample_rate

    def push(self, window: bytes, probability: float) -> UtteranceStarted | UtteranceEnded | None:
        """Feed the next window and its speech probability; returns what it decided, if anything.

        Raises:
            ValueError: `window` is not `window_samples` samples long.
        """
        if len(window) != 2 * self.window_samples:
            raise ValueError(
                f"Endpointer window has {len(window)} bytes, expected "
                f"{2 * self.window_samples} ({self.window_samples} s16 samples)"
            )
        voiced = probability > self.threshold
        start_of_window = self._position
        self._position += self.window_samples
        if self._in_speech:
            return self._in_utterance(window, voiced)
        if voiced:
            if not self._windows:
                self._start = start_of_window
            self._windows.append(window)
            self._voiced += self.window_samples
            self._silence = 0
            self._last_voiced_end = self._position
            if self._voiced >= self._min_speech:
                self._in_speech = True
                self._windows = [*self._pre_roll, *self._windows]
                self._pre_roll.clear()
                return UtteranceStarted(self._start / self.sample_rate)
            return None
        if self._windows:
            self._windows.append(window)
            self._silence += self.window_samples
            if self._silence >= self._candidate_gap:
                for held in self._windows:  # too short to count: it becomes pre-roll
                    self._pre_roll.append(held)
                self._reset()
            return None
        self._pre_roll.append(window)
        return None

    def _in_utterance(self, window: bytes, voiced: bool) -> UtteranceEnded | None:
        self._windows.append(window)
        if voiced:
            self._voiced += self.window_samples
            self._silence = 0
            self._last_voiced_end = self._position
        else:
            self._silence += self.window_samples
        if self._silence >= self._end_silence:
            return self._end(cut=False)
        if self._position - self._start >= self._max_utterance:
            return self._end(cut=True)
        return None

    def _end(self, *, cut: bool) -> UtteranceEnded:
        ended = UtteranceEnded(
            pcm=b"".join(self._windows),
            audio_time=self._start / self.sample_rate,
            duration=(self._last_voiced_end - self._start) / self.sample_rate,
            cut=cut,
        )
        self._reset()
        return ended

    def _reset(self) -> None:
        self._in_speech = False
        self._windows = []
        self._voiced = 0
        self._silence = 0
