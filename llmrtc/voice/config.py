"""`VoiceConfig`: the knobs of turn-taking, barge-in and output."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from llmrtc.voice.turn_detector import TurnDetector

__all__ = ["VoiceConfig"]


@dataclass(frozen=True, kw_only=True)
class VoiceConfig:
    """How a `VoiceLoop` takes turns. All durations are seconds of *audio* time where they
    measure the input (so audio pushed faster than real time behaves the same).

    Example:
        VoiceConfig(end_of_speech_silence=0.7, filler_text="Let me check.")
    """

    end_of_speech_silence: float = 0.5
    """Silence after speech that ends the user's turn (without a turn detector, or when the
    detector did not answer in time)."""
    turn_detector: TurnDetector | Literal["speech"] | None = "speech"
    """Ends turns by meaning: at each pause of `min_end_silence`, an end-of-turn model judges
    the utterance's last seconds; complete ends the turn there, incomplete waits up to
    `max_end_silence`. "speech": the detector of the speech stack the loop's VAD belongs to
    (`open_default_speech()`: Smart Turn v3.2, when its package is installed), else the fixed
    silence (logged). None: always the fixed `end_of_speech_silence`."""
    min_end_silence: float = 0.2
    """The shortest pause that may end a turn. With a turn detector: the pause after which it
    is asked, and after which a turn it judges complete ends. Without a detector, with
    `preemptive_generation`: the pause at which the answer starts."""
    max_end_silence: float = 2.0
    """With a turn detector: the longest pause inside a turn it judges incomplete."""
    barge_in_min_speech: float = 0.2
    """User speech needed, while the agent speaks or a turn runs, to pause it at once (see
    `false_interruption_timeout`). Shorter sounds do not: a cough or a click goes unnoticed,
    and words in them ("No") cut the reply once transcribed (said over its last sentence,
    they are answered once it ends)."""
    min_speech: float = 0.1
    """Voiced audio needed to start an utterance at all."""
    vad_threshold: float = 0.5
    """Speech probability above which a VAD window counts as voiced."""
    max_utterance: float = 30.0
    """An utterance is cut (and transcribed) after this much speech, however it goes on."""
    filler_after: float = 2.0
    """A tool batch running this long while nothing plays makes the agent say `filler_text`
    (once per turn)."""
    filler_text: str = "One moment, please."
    """Said while slow tools run; empty: never."""
    apology_text: str = "Sorry, I didn't catch that. Could you say it again?"
    """Said when the STT fails on an utterance (the user's words were not understood)."""
    error_text: str = "Sorry, something went wrong. Could you say that again?"
    """Said when the TTS fails during a reply or the handler's turn raises (model failures the
    handler recovers from use its own apology)."""
    output_sample_rate: int = 48000
    """Rate of `audio_out()` frames (mono)."""
    max_queued_texts: int = 8
    """Typed turns (`send_text`) that may wait behind the turn running; one more is refused
    with `TurnQueueFull` (the session goes on). Each waits its turn, so a client sending
    faster than the agent answers would otherwise grow memory and latency without end."""
    false_interruption_timeout: float | None = 1.5
    """Speech over the agent pauses its reply (silence from the next frame) and holds its turn
    (no new model output or tool batch is taken; running tools go on) until the speech is
    transcribed: words make it a real barge-in (the turn is aborted, "cancel" tools are
    cancelled, the history keeps what was heard); no words (a cough, a door: an empty
    transcript, or only fillers such as "hmm") or only `backchannels` resume the reply from
    the word where it stopped. This is how long (wall time: it waits for the STT) after that
    speech ended the reply stays paused: past it, the user being quiet, the reply resumes
    (words transcribed later still cut it while it plays). None: every barge-in is real at
    once (no pause, no resume)."""
    preemptive_generation: bool = True
    """Start answering at a pause that may end the turn, before its end is decided (at
    `min_end_silence`; with a turn detector, once it judged the utterance unfinished, so the
    turn waits up to `max_end_silence`): the utterance so far is transcribed and the handler's
    first model request is sent (a `PreemptingHandler`: `TurnRunner`, `PlaybookOrchestrator`).
    If the user goes on, the request is aborted; if the turn ends at that pause, the answer is
    already under way and no second STT pass runs. An early answer never runs a tool and is
    never played: only the turn that takes it does either, and only if its first request is
    exactly the one started. Only while the agent is idle. Each time the user pauses and goes
    on, it costs an STT pass over the utterance so far (per audio second, on a paid STT API) and
    a discarded model request (its tokens, on a paid API); False: answer only once the turn has
    ended."""
    speak_progress: bool = False
    """Speak what a running tool reports (`ToolContext.progress`) when nothing else plays and
    the user is silent: during a slow tool batch of the turn, or while a background call runs
    and the agent is idle. At most one every `progress_interval`; the rest are only shown
    (hooks, the client's timeline). Off: progress is never spoken (the messages are written for
    screens and logs first; turn it on when your tools' messages read well aloud)."""
    progress_interval: float = 5.0
    """With `speak_progress`: the least time (s) between two spoken progress messages."""
    backchannels: tuple[str, ...] = ("uh-huh", "mm-hmm", "yeah", "okay", "right")
    """Phrases that, said over the agent (alone or repeated: "yeah, yeah"), neither interrupt
    it nor make a turn. Said over its closing question (the reply's last sentence ends with
    "?") or after the reply, they answer it: words, a turn. Matched ignoring case and
    punctuation, a hyphen counting as a space and "ok" as "okay". Empty: every word said over
    the agent is a turn."""

    def __post_init__(self) -> None:
        for name in (
            "end_of_speech_silence",
            "min_end_silence",
            "max_end_silence",
            "barge_in_min_speech",
            "min_speech",
            "max_utterance",
            "filler_after",
            "progress_interval",
        ):
            value = getattr(self, name)
            # inf would silently mean "never" (no endpoint, no cut, no filler): refuse it.
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value < 0
            ):
                raise ValueError(
                    f"VoiceConfig.{name} must be a finite number of seconds >= 0, got {value!r}"
                )
        if self.end_of_speech_silence <= 0:
            # 0 would end an utterance at its first unvoiced window: every pause a turn.
            raise ValueError(
                "VoiceConfig.end_of_speech_silence must be > 0 seconds (0.3 to 1.0 is usual), "
                f"got {self.end_of_speech_silence!r}"
            )
        if self.min_end_silence <= 0 or self.max_end_silence < self.min_end_silence:
            raise ValueError(
                "VoiceConfig needs 0 < min_end_silence <= max_end_silence (the turn detector "
                f"asks after the first and waits at most the second), got "
                f"{self.min_end_silence!r} and {self.max_end_silence!r}"
            )
        detector = self.turn_detector
        if detector is not None and detector != "speech" and not isinstance(detector, TurnDetector):
            raise ValueError(
                "VoiceConfig.turn_detector must be a TurnDetector (sample_rate and "
                'completion_probability), "speech" (the speech stack\'s) or None (a fixed '
                f"silence), got {detector!r}"
            )
        # Checked for a detector given here; the default "speech" may resolve to none, so a
        # short fixed silence stays valid with it (resolve_turn_detector falls back, logged).
        if (
            detector is not None
            and detector != "speech"
            and self.end_of_speech_silence <= self.min_end_silence
        ):
            # The fixed silence is the detector's deadline: it would never get to answer.
            raise ValueError(
                "VoiceConfig.end_of_speech_silence must be longer than min_end_silence while a "
                "turn detector is on (it is the fallback when the detector has not answered); "
                f"got {self.end_of_speech_silence!r} and {self.min_end_silence!r}: pass "
                "turn_detector=None for a fixed silence this short"
            )
        for name in ("apology_text", "error_text", "filler_text"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"VoiceConfig.{name} must be a str, got {getattr(self, name)!r}")
        threshold = self.vad_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ValueError(f"VoiceConfig.vad_threshold must be a number, got {threshold!r}")
        if not 0.0 < self.vad_threshold < 1.0:
            raise ValueError(
                f"VoiceConfig.vad_threshold must be between 0 and 1, got {self.vad_threshold!r}"
            )
        if self.max_utterance <= self.min_speech:
            raise ValueError("VoiceConfig.max_utterance must be longer than min_speech")
        limit = self.max_queued_texts
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(
                "VoiceConfig.max_queued_texts must be an int >= 1 (typed turns that may wait; "
                f"a few is plenty), got {limit!r}"
            )
        rate = self.output_sample_rate
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 8000 or rate % 50:
            raise ValueError(
                "VoiceConfig.output_sample_rate must be an int >= 8000 divisible by 50 (whole "
                f"20 ms frames), e.g. 16000, 24000 or 48000; got {rate!r}"
            )
        wait = self.false_interruption_timeout
        if wait is not None and (
            isinstance(wait, bool)
            or not isinstance(wait, int | float)
            or not math.isfinite(wait)
            or wait <= 0
        ):
            raise ValueError(
                "VoiceConfig.false_interruption_timeout must be a finite number of seconds > 0 "
                f"(1 to 2 is usual) or None (every barge-in is real at once), got {wait!r}"
            )
        if not isinstance(self.speak_progress, bool):
            raise ValueError(
                f"VoiceConfig.speak_progress must be True or False, got {self.speak_progress!r}"
            )
        if not isinstance(self.preemptive_generation, bool):
            raise ValueError(
                "VoiceConfig.preemptive_generation must be True or False, got "
                f"{self.preemptive_generation!r}"
            )
        phrases = self.backchannels
        if not isinstance(phrases, tuple) or not all(
            isinstance(p, str) and any(c.isalnum() for c in p) for p in phrases
        ):
            raise ValueError(
                "VoiceConfig.backchannels must be a tuple of phrases with letters in them, "
                f'e.g. ("uh-huh", "yeah"), or () for none; got {phrases!r}'
            )
