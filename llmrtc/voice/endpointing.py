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

With a turn detector (`VoiceConfig.turn_detector`, resolved by
`llmrtc.voice.speech.resolve_turn_detector`), a pause is judged by meaning instead: at
`min_end_silence` (0.2 s: 7 windows) the utterance's last seconds go to the detector on its
worker thread, and each later window looks whether the answer is in. Complete: the turn ends at
that window. Incomplete: it ends after `max_end_silence` (2.0 s: 63 windows) unless speech
resumes. No answer by `end_of_speech_silence` (the detector slow or busy) or a failed one: that
pause ends by the fixed silence, as without a detector (logged once per stream). Speech resuming
drops the question. The answer arrives in wall-clock time while the rest counts audio time: live
audio keeps coming, so an answer is applied at the window after it arrives.

A pause that may last is also reported (`UtterancePaused`), and speech after it
(`UtteranceResumed`): the moment a voice loop may start answering before the turn's end is
decided (preemptive generation). Without a detector that is at `min_end_silence`; with one,
once it judged the utterance unfinished or could not judge it (never while it judges: on two
cores a Whisper pass started then delayed its answer past `end_of_speech_silence`, and the
pause in "the weather in ... Lisbon" ended the turn).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass

from llmrtc.voice.config import VoiceConfig
from llmrtc.voice.turn_detector import JUDGED_AUDIO, TurnDetector, TurnJudgement, judge_later

__all__ = [
    "Endpointer",
    "UtteranceEnded",
    "UtterancePaused",
    "UtteranceResumed",
    "UtteranceStarted",
]

logger = logging.getLogger(__name__)

PRE_ROLL = 0.3
"""Seconds of audio kept from before the detected start, so the first word is not clipped
(the VAD needs a few windows of a word before it is sure)."""


@dataclass(frozen=True, slots=True)
class UtteranceStarted:
    """`min_speech` of voiced audio: the user started speaking."""

    audio_time: float
    """Where speech started (its first voiced window), seconds of audio since the stream began."""


@dataclass(frozen=True, slots=True)
class UtterancePaused:
    """A pause inside an utterance that may last: `min_end_silence` of silence and, with a
    turn detector, its verdict "unfinished" (or none it could give). Reported once per pause;
    a voice loop starts its preemptive answer here. Speech resuming is an
    `UtteranceResumed`."""

    pcm: bytes
    """The utterance's audio so far, as `UtteranceEnded.pcm` would hold it now."""
    duration: float
    """Seconds from the start of speech to the end of its last voiced window: an
    `UtteranceEnded` with the same duration has no speech after this pause."""


@dataclass(frozen=True, slots=True)
class UtteranceResumed:
    """Speech again after an `UtterancePaused`: the utterance goes on."""


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

    def __init__(
        self,
        config: VoiceConfig,
        *,
        sample_rate: int,
        window_samples: int,
        turn_detector: TurnDetector | None = None,
    ) -> None:
        """Count `config`'s durations in samples at `sample_rate`, windows of `window_samples`.

        `turn_detector` judges each pause (see the module docstring); None: the fixed
        `end_of_speech_silence`. It is the detector `config.turn_detector` resolves to
        (`llmrtc.voice.speech.resolve_turn_detector`); the config's own value is not read here.
        """
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
        self._detector = turn_detector
        self._min_end_silence = round(config.min_end_silence * sample_rate)
        self._max_end_silence = round(config.max_end_silence * sample_rate)
        self._judged_windows = max(1, math.ceil(JUDGED_AUDIO * sample_rate / window_samples))
        self._question: Future[TurnJudgement] | None = None  # asked about this pause
        self._stale: Future[TurnJudgement] | None = None  # an earlier pause's, still running
        self._answer: TurnJudgement | None = None  # the detector's answer about this pause
        self._asked = False  # this pause was asked about (or could not be)
        self._warned: set[str] = set()
        self.last_judgement: TurnJudgement | None = None
        """The detector's latest answer (its probability and CPU time), None before one."""
        # A voiced run being considered dies after this much unvoiced audio (a click, a cough).
        self._candidate_gap = max(self._min_speech, window_samples)
        self._pre_roll: deque[bytes] = deque(
            maxlen=max(1, math.ceil(PRE_ROLL * sample_rate / window_samples))
        )
        self._position = 0  # samples seen so far
        self._in_speech = False
        self._paused = False  # an UtterancePaused was reported and speech has not resumed
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

    def push(
        self, window: bytes, probability: float
    ) -> UtteranceStarted | UtterancePaused | UtteranceResumed | UtteranceEnded | None:
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

    def _in_utterance(
        self, window: bytes, voiced: bool
    ) -> UtterancePaused | UtteranceResumed | UtteranceEnded | None:
        self._windows.append(window)
        resumed = False
        if voiced:
            self._voiced += self.window_samples
            self._silence = 0
            self._last_voiced_end = self._position
            self._forget_question()
            resumed, self._paused = self._paused, False
        else:
            self._silence += self.window_samples
        if self._pause_over():
            return self._end(cut=False)
        if self._position - self._start >= self._max_utterance:
            return self._end(cut=True)
        if resumed:
            return UtteranceResumed()
        if not self._paused and self._silence >= self._min_end_silence and self._may_wait():
            self._paused = True
            return UtterancePaused(
                b"".join(self._windows), (self._last_voiced_end - self._start) / self.sample_rate
            )
        return None

    def _pause_over(self) -> bool:
        """Whether the silence so far ends the turn (by the fixed rule or by the detector)."""
        if self._detector is None or self._silence == 0:
            return self._silence >= self._end_silence
        if not self._asked and self._silence >= self._min_end_silence:
            self._ask(self._detector)
        question = self._question
        if self._answer is None and question is not None and question.done():
            self._question = None
            self._take_answer(question)
        if self._answer is not None:
            limit = self._min_end_silence if self._answer.complete else self._max_end_silence
            return self._silence >= limit
        if self._silence < self._end_silence:
            return False
        if self._question is not None:
            self._warn_once(
                "slow",
                "the turn detector had not answered after %.2f s of silence (slow or busy); "
                "this pause ends by the fixed end_of_speech_silence",
                self._end_silence / self.sample_rate,
            )
        return True

    def _may_wait(self) -> bool:
        """Whether this pause may last (so it is worth answering early): without a detector,
        from `min_end_silence` on (the fixed silence is longer); with one, once it judged the
        utterance unfinished (the turn waits up to `max_end_silence`) or could not judge it
        (busy or failed: the fixed silence). Not while it judges: Whisper started then would
        share the two cores with it, and its answer would come too late to count."""
        if self._detector is None:
            return True
        if self._answer is not None:
            return not self._answer.complete
        return self._asked and self._question is None

    def _ask(self, detector: TurnDetector) -> None:
        self._asked = True
        if self._stale is not None and not self._stale.done():
            # The last pause's question still runs: one in flight per stream bounds the
            # worker's queue; this pause ends by the fixed silence.
            self._warn_once(
                "busy",
                "the turn detector was still judging the previous pause; this pause ends by "
                "the fixed end_of_speech_silence",
            )
            return
        self._stale = None
        pcm = b"".join(self._windows[-self._judged_windows :])
        self._question = judge_later(detector, pcm, self.sample_rate)

    def _take_answer(self, question: Future[TurnJudgement]) -> None:
        try:
            self._answer = question.result()
        except Exception as exc:  # a model failure must not end the session: fixed silence
            self._warn_once(
                "failed",
                "the turn detector failed (%s: %s); this pause ends by the fixed "
                "end_of_speech_silence",
                type(exc).__name__,
                exc,
            )
            return
        self.last_judgement = self._answer
        logger.debug(
            "turn judged %s (p=%.3f) in %.1f ms CPU, %.1f ms wall",
            "complete" if self._answer.complete else "incomplete",
            self._answer.probability,
            1000 * self._answer.cpu_seconds,
            1000 * self._answer.wall_seconds,
        )

    def _forget_question(self) -> None:
        """Speech resumed (or the utterance ended): this pause's question no longer matters."""
        question, self._question = self._question, None
        if question is not None and not question.cancel():  # started: let it finish unread
            self._stale = question
        self._answer = None
        self._asked = False

    def _warn_once(self, kind: str, message: str, *args: object) -> None:
        if kind in self._warned:
            logger.debug(message, *args)
        else:
            self._warned.add(kind)
            logger.warning(message + " (said once per stream)", *args)

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
        self._paused = False
        self._windows = []
        self._voiced = 0
        self._silence = 0
        self._forget_question()
