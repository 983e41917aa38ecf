"""Benchmark of ending turns by meaning (Smart Turn v3.2) against the fixed 0.5 s silence.

Run:  .venv/bin/python benchmarks/turn_detection.py [--quick] [--voices piper,espeak]
(piper: ~2.5 min, --quick ~1 min per voice). Needs the voice extra and Smart Turn
(`pip install --no-deps "pipecat-ai==1.14.0"`, done by scripts/setup). A measurement, not a
test: it exits 0 unless it crashes.

Utterances are built at run time: complete sentences, and sentences with a pause mid-way
("I'd like the weather in ... Tokyo.", "My order number is four five ... seven two."). With
piper (the joe voice) the whole sentence is synthesised and cut at the word boundary, so the
first half keeps the intonation of a sentence going on; with espeak-ng the halves are one SSML
sentence with a <break>. Each utterance is 0.5 s of silence, the speech (the pause: 0.8 to
1.2 s), then 2.5 s of silence, cut into Silero's 32 ms windows and pushed *in real time* (the
detector answers on its thread in wall-clock time, as live audio does). Every window's Silero
probability feeds two `Endpointer`s side by side in the same run: the fixed silence
(`turn_detector=None`, `end_of_speech_silence` 0.5 s), Smart Turn with the defaults
(`min_end_silence` 0.2 s, `max_end_silence` 2.0 s; an answer not in by 0.5 s falls back to the
fixed silence) and Smart Turn with `end_of_speech_silence` 1.0 s (more time to answer on a
loaded machine: its decisions, and what they cost in latency).

It prints, per voice and side:
  false cut-offs  paused sentences whose utterance ended before the second half began;
  end latency     median and p90, over the complete sentences (and, apart, the ends of the
                  paused sentences), of the audio time from the last sample of speech to the
                  window that ended the turn;
  decisions       the detector's CPU time per decision (median, p90) and its answers.
Targets (issue 19): false cut-offs <= 5 %; complete utterances end sooner than with the fixed
0.5 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import wave
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llmrtc.voice.audio import resample
from llmrtc.voice.config import VoiceConfig
from llmrtc.voice.endpointing import Endpointer, UtteranceEnded
from llmrtc.voice.providers.piper import PiperTTS
from llmrtc.voice.providers.silero import SileroVAD
from llmrtc.voice.providers.smart_turn import SmartTurnDetector
from llmrtc.voice.turn_detector import TurnJudgement

RATE = 16000
WINDOW = 512
LEAD, TAIL = 0.5, 2.5

COMPLETE = [
    "What is the weather in Tokyo?",
    "Hello there.",
    "Thank you very much.",
    "Can you check the status of my order, please?",
    "I'd like the weather in Tokyo.",
    "My order number is four five seven two.",
    "What can you do?",
    "Is it going to rain in Berlin tomorrow?",
    "How warm is it in Rome right now?",
    "That's all, thanks.",
    "Do you have this jacket in blue?",
    "I want to return the shoes I bought last week.",
]
PAUSED = [
    ("I'd like the weather in", "Tokyo."),
    ("My order number is four five", "seven two."),
    ("Can you tell me about", "the return policy?"),
    ("I want to", "cancel my order."),
    ("What is the weather like in", "Berlin?"),
    ("Could you check the status of", "my last order?"),
    ("I'm looking for", "a cheap hotel near the station."),
    ("The city is", "Oslo."),
    ("Please send it to", "my office address."),
    ("I think I would like", "the blue one."),
    ("What's the temperature in", "Paris today?"),
    ("My phone number is five five five", "one two three four."),
]
PAUSES = (0.8, 1.0, 1.2)


@dataclass
class Utterance:
    text: str
    pcm: bytes  # 16 kHz s16le, lead and tail silence included
    speech_end: float  # seconds: the last sample of speech
    resume_at: float | None = None  # paused sentences: where the second half begins
    probabilities: list[float] = field(default_factory=list)  # Smart Turn's, pause by pause
    ends: dict[str, list[float]] = field(default_factory=dict)  # side: where its turns ended


@dataclass
class Side:
    name: str
    endpointer: Endpointer
    cut_offs: int = 0
    latencies: list[float] = field(default_factory=list)
    paused_latencies: list[float] = field(default_factory=list)
    missed: int = 0
    judgements: list[TurnJudgement] = field(default_factory=list)


def _silence(seconds: float) -> bytes:
    return bytes(2 * round(seconds * RATE))


def _trim(pcm: bytes, level: int = 300) -> bytes:
    import numpy as np

    samples = np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.int32))
    loud = np.nonzero(samples > level)[0]
    return pcm[2 * loud[0] : 2 * (loud[-1] + 1)] if loud.size else b""


def _quietest(pcm: bytes, around: float, before: float = 0.15, after: float = 0.1) -> int:
    """The sample index of the quietest 10 ms within the span around `around` s (a word
    boundary: the closure before a stop, or the gap between words)."""
    import numpy as np

    samples = np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.float64))
    step = RATE // 100
    lo = max(0, round((around - before) * RATE))
    hi = min(samples.size - step, round((around + after) * RATE))
    energies = [(samples[i : i + step].mean(), i) for i in range(lo, hi, step // 2)]
    return min(energies)[1] + step // 2


async def piper_utterances(quick: bool) -> list[Utterance]:
    out = []
    async with PiperTTS(workers=1) as tts:

        async def say(text: str) -> bytes:
            pcm = b"".join([chunk async for chunk in tts.synthesize(text)])
            return _trim(resample(pcm, tts.sample_rate, RATE))

        for text in COMPLETE[: 6 if quick else None]:
            speech = await say(text)
            out.append(
                Utterance(
                    text, _silence(LEAD) + speech + _silence(TAIL), LEAD + len(speech) / 2 / RATE
                )
            )
        for index, (head, rest) in enumerate(PAUSED[: 6 if quick else None]):
            whole = await say(f"{head} {rest}")
            # Where the head ends inside the whole sentence: the head said alone is longer
            # (a sentence's last word is drawn out), the rest said alone too; the mean of the
            # two estimates falls at the boundary, then the quietest 10 ms around it.
            seconds = len(whole) / 2 / RATE
            by_head = len(await say(head)) / 2 / RATE
            by_rest = seconds - len(await say(rest)) / 2 / RATE
            boundary = _quietest(whole, (by_head + by_rest) / 2, before=0.2, after=0.2)
            gap = PAUSES[index % len(PAUSES)]
            first, second = _trim(whole[: 2 * boundary]), _trim(whole[2 * boundary :])
            if min(len(first), len(second)) < 2 * round(0.25 * RATE):
                # No clean cut found: the halves said apart (the head then sounds finished,
                # which makes the detector's task harder, never easier).
                print(f"  ({head!r}: halves synthesised apart)")
                first, second = await say(head), await say(rest)
            pcm = _silence(LEAD) + first + _silence(gap) + second + _silence(TAIL)
            resume = LEAD + (len(first) / 2 + gap * RATE) / RATE
            out.append(Utterance(f"{head} … {rest}", pcm, len(pcm) / 2 / RATE - TAIL, resume))
    return out


def _espeak(text: str) -> bytes:
    result = subprocess.run(
        ["espeak-ng", "-v", "en-us", "-m", "--stdout", text], capture_output=True, check=True
    )
    with wave.open(BytesIO(result.stdout)) as wav:
        rate = wav.getframerate()
        pcm = wav.readframes(2**31 - 1)
    return resample(pcm, rate, RATE)


def espeak_utterances(quick: bool) -> list[Utterance]:
    out = []
    for text in COMPLETE[: 6 if quick else None]:
        speech = _trim(_espeak(text))
        out.append(
            Utterance(text, _silence(LEAD) + speech + _silence(TAIL), LEAD + len(speech) / 2 / RATE)
        )
    for index, (head, rest) in enumerate(PAUSED[: 6 if quick else None]):
        gap = PAUSES[index % len(PAUSES)]
        first = _trim(_espeak(head + f" <break time='{round(gap * 1000)}ms'/> " + rest))
        second = _trim(_espeak(rest))
        pcm = _silence(LEAD) + first + _silence(TAIL)
        resume = LEAD + (len(first) - len(second)) / 2 / RATE
        out.append(Utterance(f"{head} … {rest}", pcm, len(pcm) / 2 / RATE - TAIL, resume))
    return out


def run(utterances: list[Utterance], vad: SileroVAD, detector: SmartTurnDetector) -> list[Side]:
    fixed = Side(
        "fixed 0.5 s",
        Endpointer(VoiceConfig(turn_detector=None), sample_rate=RATE, window_samples=WINDOW),
    )
    smart = Side(
        "Smart Turn",
        Endpointer(
            VoiceConfig(turn_detector=detector),
            sample_rate=RATE,
            window_samples=WINDOW,
            turn_detector=detector,
        ),
    )
    # The same detector with more time to answer (the fallback at 1.0 s instead of 0.5 s): its
    # decisions where a loaded machine makes it slower than the default deadline.
    patient = Side(
        "ST, 1 s limit",
        Endpointer(
            VoiceConfig(turn_detector=detector, end_of_speech_silence=1.0),
            sample_rate=RATE,
            window_samples=WINDOW,
            turn_detector=detector,
        ),
    )
    sides = [fixed, smart, patient]
    for utterance in utterances:
        stream = vad.stream()
        ended: dict[str, list[float]] = {side.name: [] for side in sides}
        windows = len(utterance.pcm) // (2 * WINDOW)
        base = {side.name: side.endpointer.audio_time for side in sides}  # this utterance's 0
        start = time.perf_counter()
        for index in range(windows):
            window = utterance.pcm[2 * WINDOW * index : 2 * WINDOW * (index + 1)]
            probability = stream.speech_probability(window)
            for side in sides:
                seen = side.endpointer.last_judgement
                if isinstance(side.endpointer.push(window, probability), UtteranceEnded):
                    ended[side.name].append(side.endpointer.audio_time - base[side.name])
                judgement = side.endpointer.last_judgement
                if judgement is not seen and judgement is not None:
                    side.judgements.append(judgement)
                    utterance.probabilities.append(judgement.probability)
            # Real time: the next window is due 32 ms after this one.
            delay = start + (index + 1) * WINDOW / RATE - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        utterance.ends = ended
        for side in sides:
            ends = ended[side.name]
            if not ends:
                side.missed += 1
                continue
            if utterance.resume_at is not None and ends[0] < utterance.resume_at:
                side.cut_offs += 1
            final = ends[-1] - utterance.speech_end
            (side.paused_latencies if utterance.resume_at is not None else side.latencies).append(
                final
            )
    return sides


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.0f}"


def report(voice: str, utterances: list[Utterance], sides: list[Side]) -> None:
    paused = sum(u.resume_at is not None for u in utterances)
    complete = len(utterances) - paused
    print(f"\n{voice}: {complete} complete sentences, {paused} with a pause mid-way")
    header = ("side", "false cut-offs", "end p50 ms", "end p90 ms", "paused end p50", "missed")
    print(f"{header[0]:<14}" + "".join(f"{h:>16}" for h in header[1:]))
    for side in sides:
        share = 100 * side.cut_offs / max(paused, 1)
        cells = (
            f"{side.cut_offs}/{paused} ({share:.0f} %)",
            _ms(side.latencies, 0.5),
            _ms(side.latencies, 0.9),
            _ms(side.paused_latencies, 0.5),
            str(side.missed),
        )
        print(f"{side.name:<14}" + "".join(f"{c:>16}" for c in cells))
    for side in sides[1:]:
        judged = side.judgements
        if not judged:
            continue
        cpu = [j.cpu_seconds for j in judged]
        wall = [j.wall_seconds for j in judged]
        print(
            f"{side.name} decisions: {len(judged)} ({sum(j.complete for j in judged)} complete); "
            f"CPU per decision p50 {_ms(cpu, 0.5)} ms, p90 {_ms(cpu, 0.9)} ms; "
            f"wall p50 {_ms(wall, 0.5)} ms, p90 {_ms(wall, 0.9)} ms"
        )


async def main(args: argparse.Namespace) -> None:
    vad = SileroVAD.load()
    detector = SmartTurnDetector.load()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    for voice in args.voices.split(","):
        utterances = (
            await piper_utterances(args.quick)
            if voice == "piper"
            else espeak_utterances(args.quick)
        )
        sides = await anyio.to_thread.run_sync(run, utterances, vad, detector)
        report(voice, utterances, sides)
        if args.verbose:
            for u in utterances:
                ends = "; ".join(
                    f"{name}: " + ", ".join(f"{t - u.speech_end:+.2f}" for t in times)
                    for name, times in u.ends.items()
                )
                resume = f" resumes {u.resume_at - u.speech_end:+.2f}" if u.resume_at else ""
                p = ", ".join(f"{x:.2f}" for x in u.probabilities)
                print(f"  {u.text:<55} p=[{p}] ends (s from the end){resume}: {ends}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 + 6 utterances per voice")
    parser.add_argument("--voices", default="piper,espeak", help="piper, espeak or both")
    parser.add_argument("--verbose", action="store_true")
    anyio.run(main, parser.parse_args())
