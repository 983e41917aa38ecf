"""Benchmark of Whisper's trimmed encoder input: word error rate and seconds per utterance of
`WhisperSTT` decoding only the audio plus a short silence pad, beside faster-whisper's own
`transcribe` (every utterance padded to a 30 s window), on the same utterances in the same run.

Run:  .venv/bin/python benchmarks/whisper_trim.py [--repeats N] [--pads 1,2,3] [--mins 0,5]
(~3 min on 2 cores, loaded). It is a measurement, not a test: it exits 0 unless it crashes.

Utterances: the sentences of tests/rtc/test_recognition.py and of benchmarks/voice.py (no-tool
and tool questions), each spoken by espeak-ng (en-us, 150 wpm) and piper (joe) when installed,
16 kHz mono with 0.3 s of silence either side (what the VAD hands over); the sentences of
benchmarks/turn_detection.py with a pause mid-way (1 s of silence between the halves, the
"paused" column: what a turn detector that waits through a pause hands over); plus one long
utterance (> 30 s, several sentences) that takes the windowed path either way.

Rows: `untrimmed` is faster-whisper's `transcribe` with the options `WhisperSTT` used before
trimming (beam 1, temperature 0, no timestamps, no conditioning); `trimmed pad P min M` is
`decode_trimmed` with P seconds of trailing silence and at least M seconds of input; `WhisperSTT`
is the shipped default. A trimmed decoding that may be no speech, loops, or ends more than 0.5 s
before the speech does, is decoded again in the full window, as `WhisperSTT` does; "full
window" counts those. WER = word edits / reference words over the set, after lower-casing,
dropping punctuation and expanding English contractions ("where's" = "where is"). Time = median
wall seconds per utterance (threads = the CPU count).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
import numpy as np
from turn_detection import PAUSED

from llmrtc.voice.audio import resample
from llmrtc.voice.providers.espeak import EspeakTTS
from llmrtc.voice.providers.whisper import WhisperSTT, decode_trimmed

RATE = 16000

RECOGNITION = [  # tests/rtc/test_recognition.py
    "What is the weather in Tokyo?",
    "Is it raining in Lima today?",
    "Please give me the temperature in Celsius.",
    "Where is my order?",
    "I would like to speak with a human agent.",
    "Thank you, that is all for today.",
]
VOICE = [  # benchmarks/voice.py: NO_TOOL_QUESTIONS and TOOL_QUESTIONS
    "Hi there, how are you today?",
    "What can you help me with?",
    "Thanks a lot for your help so far.",
    "Can you tell me a short joke?",
    "What is your name?",
    "Is it a good idea to drink water every day?",
    "What is the weather in Tokyo right now?",
    "How warm is it in Lima today?",
    "Is it raining in Oslo at the moment?",
    "What is the weather like in Paris?",
    "Do I need a jacket in Berlin today?",
    "Please look up the weather in Rome.",
    "How cold is it in Madrid right now?",
    "What is the temperature in London today?",
]
IRREGULAR = {"won't": "will not", "can't": "can not", "cannot": "can not", "let's": "let us"}
SUFFIXES = (
    ("n't", "not"),
    ("'re", "are"),
    ("'ve", "have"),
    ("'ll", "will"),
    ("'d", "would"),
    ("'m", "am"),
    ("'s", "is"),
)  # the same normalisation as tests/rtc/test_recognition.py


PAUSE_SECONDS = 1.0


@dataclass
class Utterance:
    text: str
    voice: str
    pcm: bytes
    paused: bool = False


def words(text: str) -> list[str]:
    """Lower-case words without punctuation, English contractions expanded, "ok" as "okay"."""
    out: list[str] = []
    for word in re.findall(r"[a-z0-9']+", text.lower().replace("\u2019", "'").replace("-", " ")):
        word = word.strip("'")
        if word in IRREGULAR:
            out += IRREGULAR[word].split()
            continue
        for suffix, full in SUFFIXES:
            if word.endswith(suffix) and len(word) > len(suffix):
                out += [word[: -len(suffix)], full]
                break
        else:
            out.append("okay" if word == "ok" else word.replace("'", ""))
    return [w for w in out if w]


def edits(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Word-level Levenshtein distance."""
    row = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        prev, row[0] = row[0], i
        for j, hyp in enumerate(hypothesis, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ref != hyp))
    return row[-1]


async def speak(tts: object, text: str) -> bytes:
    pcm = bytearray()
    async for chunk in tts.synthesize(text):  # type: ignore[attr-defined]
        pcm += chunk
    margin = bytes(2 * round(0.3 * RATE))
    return margin + resample(bytes(pcm), tts.sample_rate, RATE) + margin  # type: ignore[attr-defined]


async def utterances(
    texts: Sequence[str], paused: Sequence[tuple[str, str]] = ()
) -> list[Utterance]:
    """Each of `texts`, and each (head, rest) of `paused` with a pause between, in each voice."""

    async def voice(tts: object, name: str) -> list[Utterance]:
        out = [Utterance(t, name, await speak(tts, t)) for t in texts]
        pause = bytes(2 * round((PAUSE_SECONDS - 0.6) * RATE))  # 0.3 s margins either side
        for head, rest in paused:
            pcm = await speak(tts, head) + pause + await speak(tts, rest)
            out.append(Utterance(f"{head} {rest}", name, pcm, paused=True))
        return out

    out = await voice(EspeakTTS(voice="en-us", words_per_minute=150), "espeak")
    try:
        from llmrtc.voice.providers.piper import PiperTTS

        async with PiperTTS(workers=1) as piper:
            out += await voice(piper, "piper")
    except Exception as exc:  # piper not installed: one voice only
        print(f"(piper unavailable: {exc}; espeak only)")
    return out


def measure(
    transcribe: Callable[[bytes], str], items: Sequence[Utterance], repeats: int
) -> tuple[list[str], list[float]]:
    texts, times = [], []
    for item in items:
        for _ in range(repeats):
            start = time.perf_counter()
            text = transcribe(item.pcm)
            times.append(time.perf_counter() - start)
        texts.append(text)
    return texts, times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="decodings per utterance")
    parser.add_argument("--pads", default="1,2,3", help="trailing silence pads (seconds)")
    parser.add_argument("--mins", default="0", help="minimum input lengths (seconds)")
    parser.add_argument("--show", action="store_true", help="print every transcript that differs")
    args = parser.parse_args()

    items = anyio.run(utterances, RECOGNITION + VOICE, PAUSED)
    long_text = " ".join(RECOGNITION + VOICE[:8])
    long = anyio.run(utterances, [long_text])[0]
    print(
        f"utterances: {len(items)}; long one {len(long.pcm) / 2 / RATE:.1f} s; "
        f"CPUs {os.cpu_count()}"
    )
    print("load before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())

    stt = WhisperSTT.load()
    model = stt._shared.model

    def audio(pcm: bytes) -> np.ndarray:
        return np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0

    def untrimmed(pcm: bytes) -> str:
        segments, _ = model.transcribe(
            audio(pcm),
            language="en",
            beam_size=1,
            best_of=1,
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
        )
        return " ".join(part for s in segments if (part := s.text.strip()))

    loops: dict[str, int] = {}

    def trimmed(label: str, pad: float, minimum: float) -> Callable[[bytes], str]:
        def run(pcm: bytes) -> str:
            text = decode_trimmed(
                model, audio(pcm), language="en", pad_seconds=pad, min_seconds=minimum
            )
            if text is None:  # unsure, a loop or cut short: WhisperSTT decodes the full window
                loops[label] = loops.get(label, 0) + 1
                return untrimmed(pcm)
            return text

        return run

    def shipped(pcm: bytes) -> str:
        return stt._infer(pcm)

    conditions: list[tuple[str, Callable[[bytes], str]]] = [("untrimmed (30 s window)", untrimmed)]
    for minimum in (float(m) for m in args.mins.split(",")):
        for pad in (float(p) for p in args.pads.split(",")):
            label = f"trimmed pad {pad:g} s min {minimum:g} s"
            conditions.append((label, trimmed(label, pad, minimum)))
    conditions.append(("WhisperSTT (shipped default)", shipped))

    untrimmed(items[0].pcm)  # warm up
    results: dict[str, tuple[list[str], list[float]]] = {}
    for label, run in conditions:
        results[label] = measure(run, items, args.repeats)
    reference_words = sum(len(words(i.text)) for i in items)
    base_texts, base_times = results[conditions[0][0]]
    base_median = statistics.median(base_times)
    print(
        f"\n{'condition':<32} {'WER':>6} {'espeak':>7} {'piper':>7} {'paused':>7}  "
        "median s/utt  speed-up  same text"
    )
    for label, (texts, times) in results.items():
        errors = {"espeak": 0, "piper": 0, "paused": 0}
        totals = {"espeak": 0, "piper": 0, "paused": 0}
        for item, text in zip(items, texts, strict=True):
            group = "paused" if item.paused else item.voice
            errors[group] += edits(words(item.text), words(text))
            totals[group] += len(words(item.text))
        per_group = [
            errors[g] / totals[g] if totals[g] else float("nan")
            for g in ("espeak", "piper", "paused")
        ]
        same = sum(words(a) == words(b) for a, b in zip(texts, base_texts, strict=True))
        median = statistics.median(times)
        print(
            f"{label:<32} {sum(errors.values()) / reference_words:6.3f} {per_group[0]:7.3f} "
            f"{per_group[1]:7.3f} {per_group[2]:7.3f}  {median:12.3f}  "
            f"{base_median / median:7.1f}x  "
            f"{same}/{len(items)}  full window {loops.get(label, 0)}"
        )
    if args.show:
        for label, (texts, _) in list(results.items())[1:]:
            for item, text, base in zip(items, texts, base_texts, strict=True):
                if words(text) != words(base):
                    print(
                        f"  {label}: [{item.voice}] {item.text!r}: untrimmed {base!r} -> {text!r}"
                    )
    # The long utterance (> one window) takes faster-whisper's windowed loop in WhisperSTT.
    start = time.perf_counter()
    text = stt._infer(long.pcm)
    print(
        f"\nlong utterance ({len(long.pcm) / 2 / RATE:.1f} s) through WhisperSTT: "
        f"WER {edits(words(long.text), words(text)) / len(words(long.text)):.3f}, "
        f"{time.perf_counter() - start:.1f} s"
    )
    print("load after:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
