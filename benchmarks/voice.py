"""Benchmark of the voice loop on the offline stack: turn latency and framework overhead, pacing
drift, barge-in latency, sessions sharing one speech stack, peak memory.

Run:  .venv/bin/python benchmarks/voice.py [--quick] [--llm offline|scripted]
(full run ~4 min with the offline LLM; --quick ~1.5 min). It is a measurement, not a test: it
exits 0 unless it crashes. Spoken input is synthesised with Debian's espeak-ng and pushed as
20 ms frames at 48 kHz in real time (one frame every 20 ms, as a browser sends them).

What it prints, and how to read it:

1. A turn's latency, from the last voiced input frame to the first non-silent outbound frame,
   cut at: end of speech decided (`UserSpeechEnded`), final transcript, first model token,
   first TTS audio (the synthesiser's first chunk), first non-silent frame out. The providers'
   own times are measured by thin timing wrappers around them in the same run: STT
   (`transcribe` call to return), the model (request to the delta that completed the first
   sentence: the segmenter cannot speak earlier), TTS (`synthesize` call to first chunk).
   Framework overhead = (first frame out - end of speech decided) - STT - model - TTS.
   Target <= 30 ms. Part of it is inherent to a 20 ms frame clock: audio waits for the next tick
   (0-20 ms, 10 on average). The wait before the end of speech is decided (the "eos" column) is
   the setting `end_of_speech_silence` (0.5 s) plus the VAD's own judgement of where speech
   ended (Silero hears trailing sounds that the RMS threshold here calls silence) plus whole
   32 ms VAD windows; it is printed, not counted as overhead.
2. Pacing: `audio_out()` consumed for 60 s (10 s with --quick); drift = |frames x 20 ms -
   elapsed| / elapsed, beside a naive `await anyio.sleep(0.02)` loop run at the same time in
   the same event loop (the baseline whose drift accumulates). Target < 0.5 %.
3. Barge-in, on the real speech stack: (a) during a long spoken reply, from the VAD's decision
   (the `on_barge_in` hook) to the last speech frame out; (b) during a slow `"cancel"` tool,
   from the decision to the tool's `aborted` result (`on_tool_end`). Targets <= 20 ms.
4. Four loops sharing one `open_default_speech()` (one Whisper, one piper pool): the same
   utterance pushed into all four at once; each turn's latency (last voiced frame in -> first
   speech frame out) against a single loop's, measured first in the same run. A scripted model
   answers instantly so the figure is the speech stack's sharing.
5. Peak RSS: this process (Whisper, Silero, the LLM server's threads and weights when
   `--llm offline`) and the piper worker processes, after everything ran.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import time
import wave
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from io import BytesIO
from typing import Any

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.types import LLMRequest
from llmrtc.telemetry.events import BargeInEvent, ToolEndEvent
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.tools import ToolCall, ToolContext, ToolRegistry, tool
from llmrtc.voice import AudioFrame, Speech, VoiceConfig, VoiceLoop, open_default_speech
from llmrtc.voice.audio import resample, rms, split_frames
from llmrtc.voice.events import AgentSpeechEnded, AgentSpeechStarted, Transcript, UserSpeechEnded

RATE = 48000
VOICED_RMS = 300.0
"""A 20 ms frame louder than this (about -40 dBFS) holds speech."""


def espeak(text: str) -> AudioFrame:
    """`text` spoken by espeak-ng, at 48 kHz mono."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SystemExit("espeak-ng is not installed (apt-get install espeak-ng)")
    wav_bytes = subprocess.run(
        [exe, "-v", "en-us", "-s", "160", "--stdout", text], capture_output=True, check=True
    ).stdout
    with wave.open(BytesIO(wav_bytes)) as wav:
        rate = wav.getframerate()
        pcm = wav.readframes(wav.getnframes())
    return AudioFrame(resample(pcm, rate, RATE), RATE)


# Timing wrappers: the providers' own times, measured in the same run -------------------------


class TimedSTT:
    """An STT that records how long each `transcribe` took."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sample_rate = inner.sample_rate
        self.name = inner.name
        self.durations: list[float] = []

    async def transcribe(self, pcm: bytes) -> str:
        start = time.monotonic()
        try:
            return str(await self.inner.transcribe(pcm))
        finally:
            self.durations.append(time.monotonic() - start)


class TimedTTS:
    """A TTS that records when each `synthesize` was called and yielded its first chunk."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sample_rate = inner.sample_rate
        self.name = inner.name
        self.calls: list[tuple[float, float | None]] = []  # (called, first chunk)

    async def synthesize(self, text: str) -> AsyncIterator[bytes]:
        called = time.monotonic()
        first: float | None = None
        try:
            async for chunk in self.inner.synthesize(text):
                if first is None:
                    first = time.monotonic()
                yield chunk
        finally:
            self.calls.append((called, first))


class TimedLLM:
    """An LLM provider that records each request's start and the time of every delta."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.requests: list[tuple[float, list[float]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def stream(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[Any]:
        deltas: list[float] = []
        self.requests.append((time.monotonic(), deltas))
        async for event in self.inner.stream(request, abort_signal=abort_signal):
            deltas.append(time.monotonic())
            yield event

    async def complete(
        self, request: LLMRequest, *, abort_signal: AbortSignal | None = None
    ) -> Any:
        return await self.inner.complete(request, abort_signal=abort_signal)


class TimeHooks(Hooks):
    """Records when barge-ins and tool ends happen."""

    def __init__(self) -> None:
        self.barge_ins: list[float] = []
        self.tool_ends: list[tuple[float, str]] = []

    def on_barge_in(self, event: BargeInEvent) -> None:
        self.barge_ins.append(time.monotonic())

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.tool_ends.append((time.monotonic(), event.status))


# Running a loop ---------------------------------------------------------------------------------


class Session:
    """A running `VoiceLoop` with its events and outbound frames time-stamped."""

    def __init__(self, loop: VoiceLoop) -> None:
        self.loop = loop
        self.events: list[tuple[float, Any]] = []
        self.frames: list[tuple[float, bool]] = []  # (time, voiced)

    async def watch_events(self) -> None:
        async for event in self.loop.events():
            self.events.append((time.monotonic(), event))

    async def watch_audio(self) -> None:
        async for frame in self.loop.audio_out():
            self.frames.append((time.monotonic(), rms(frame.pcm) > 0))  # silence is digital zero

    def first(self, kind: type, after: float = 0.0) -> float | None:
        return next((t for t, e in self.events if isinstance(e, kind) and t >= after), None)

    async def wait_for(self, kind: type, after: float, timeout: float) -> float:
        with anyio.fail_after(timeout):
            while (found := self.first(kind, after)) is None:
                await anyio.sleep(0.01)
        return found

    def first_voiced_out(self, after: float) -> float | None:
        return next((t for t, voiced in self.frames if voiced and t >= after), None)


async def push_realtime(loop: VoiceLoop, speech: AudioFrame, silence: float) -> float:
    """Push speech then silence as 20 ms frames on a 20 ms clock; returns when the last voiced
    frame was pushed."""
    frames = split_frames(speech.pcm + bytes(2 * round(silence * RATE)), RATE)
    # The last frame with speech in it (espeak's output ends with its own quiet tail).
    voiced_frames = 1 + max(i for i, f in enumerate(frames) if rms(f.pcm) > VOICED_RMS)
    start = time.monotonic()
    last_voiced = start
    for n, frame in enumerate(frames):
        await loop.push_audio(frame)
        if n == voiced_frames - 1:
            last_voiced = time.monotonic()
        await anyio.sleep_until(start + (n + 1) * 0.02)
    return last_voiced


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# 1. Turn latency ----------------------------------------------------------------------------


async def turn_latency(speech: Speech, llm: Any, turns: int, label: str) -> None:
    stt, tts, model = TimedSTT(speech.stt), TimedTTS(speech.tts), TimedLLM(llm)
    runner = TurnRunner(
        model, ToolExecutor(ToolRegistry()), system_prompt="Answer in one short sentence."
    )
    config = VoiceConfig()
    question = espeak("What is a good name for a small black cat?")
    rows = []
    async with VoiceLoop(runner, stt=stt, tts=tts, vad=speech.vad, config=config) as loop:
        session = Session(loop)
        async with anyio.create_task_group() as group:
            group.start_soon(session.watch_events)
            group.start_soon(session.watch_audio)
            await anyio.sleep(0.2)
            for _ in range(turns):
                n_stt, n_tts, n_llm = len(stt.durations), len(tts.calls), len(model.requests)
                last_voiced = await push_realtime(loop, question, silence=1.0)
                await session.wait_for(AgentSpeechEnded, last_voiced, timeout=180)
                eos = session.first(UserSpeechEnded, last_voiced - 0.1)
                transcript = session.first(Transcript, last_voiced)
                out = session.first_voiced_out(last_voiced)
                request_start, deltas = model.requests[n_llm]
                tts_called, tts_first = tts.calls[n_tts]
                first_token = deltas[0] if deltas else request_start
                # the delta that completed the first sentence: the last one before TTS began
                sentence_done = max((d for d in deltas if d <= tts_called), default=first_token)
                assert eos and transcript and out and tts_first
                stt_s = stt.durations[n_stt]
                llm_s = sentence_done - request_start
                tts_s = tts_first - tts_called
                total = out - last_voiced
                # After the end of speech is decided, everything is STT, model, TTS, or ours.
                overhead = (out - eos) - stt_s - llm_s - tts_s
                rows.append(
                    {
                        "eos": eos - last_voiced,
                        "transcript": transcript - last_voiced,
                        "first_token": first_token - last_voiced,
                        "first_tts_audio": tts_first - last_voiced,
                        "first_out": total,
                        "stt": stt_s,
                        "llm": llm_s,
                        "tts": tts_s,
                        "overhead": overhead,
                    }
                )
                await anyio.sleep(0.5)
            group.cancel_scope.cancel()
    print(f"\n1. Turn latency ({label} model), ms after the last voiced input frame")
    print(
        "   turn  eos  transcript  1st token  1st TTS audio  1st frame out |  stt  llm  tts"
        "  overhead"
    )
    for i, r in enumerate(rows, 1):
        print(
            f"   {i:4d} {r['eos'] * 1e3:5.0f} {r['transcript'] * 1e3:10.0f} "
            f"{r['first_token'] * 1e3:10.0f} {r['first_tts_audio'] * 1e3:14.0f} "
            f"{r['first_out'] * 1e3:14.0f} | {r['stt'] * 1e3:4.0f} {r['llm'] * 1e3:4.0f} "
            f"{r['tts'] * 1e3:4.0f} {r['overhead'] * 1e3:9.1f}"
        )
    overheads = [r["overhead"] * 1e3 for r in rows]
    verdict = "OK" if statistics.median(overheads) <= 30 else "MISS"
    print(
        f"   framework overhead median {statistics.median(overheads):.1f} ms "
        f"(max {max(overheads):.1f}); target <= 30 ms: {verdict}"
    )


# 2. Pacing ----------------------------------------------------------------------------------


async def pacing(seconds: float) -> None:
    runner = TurnRunner(ScriptedLLM([]), ToolExecutor(ToolRegistry()), system_prompt="x")
    tts = FakeTTS()
    async with VoiceLoop(runner, stt=FakeSTT(tts=tts), tts=tts, vad=FakeVAD()) as loop:
        counts = {"ours": 0, "naive": 0}

        async def ours() -> None:
            async for _ in loop.audio_out():
                counts["ours"] += 1

        async def naive() -> None:
            while True:
                await anyio.sleep(0.02)
                counts["naive"] += 1

        async with anyio.create_task_group() as group:
            group.start_soon(ours)
            group.start_soon(naive)
            await anyio.sleep(0.5)  # both running
            start_counts = dict(counts)
            start = time.monotonic()
            await anyio.sleep(seconds)
            elapsed = time.monotonic() - start
            group.cancel_scope.cancel()
    print(f"\n2. Pacing over {elapsed:.1f} s (frames x 20 ms vs elapsed)")
    for name in ("ours", "naive"):
        frames = counts[name] - start_counts[name]
        drift = abs(frames * 0.02 - elapsed) / elapsed * 100
        note = (
            "target < 0.5 %: " + ("OK" if drift < 0.5 else "MISS") if name == "ours" else "baseline"
        )
        print(f"   {name:6s} {frames:5d} frames, drift {drift:.2f} %  ({note})")


# 3. Barge-in --------------------------------------------------------------------------------


async def barge_in(speech: Speech, rounds: int) -> None:
    interruption = espeak("Wait, stop please.")
    speech_gaps: list[float] = []
    tool_gaps: list[float] = []

    @tool(timeout=60.0)
    async def slow_search(query: str, ctx: ToolContext) -> str:
        """Search slowly.

        Args:
            query: What to look for.
        """
        await anyio.sleep(30)
        return "found"

    long_reply = (
        "Let me tell you a long story about the sea. The waves come in slowly from the west. "
        "Boats rest on the sand while the tide goes out. Gulls circle above the harbour walls."
    )
    for _ in range(rounds):
        for case in ("speech", "tool"):
            hooks = TimeHooks()
            if case == "speech":
                script: list[Any] = [long_reply, "Yes?"]
            else:
                script = [[ToolCall("c1", "slow_search", '{"query": "x"}')], "Yes?"]
            runner = TurnRunner(
                ScriptedLLM(script),
                ToolExecutor(ToolRegistry([slow_search])),
                system_prompt="x",
                hooks=hooks,
            )
            async with VoiceLoop(
                runner, stt=speech.stt, tts=speech.tts, vad=speech.vad, hooks=hooks
            ) as loop:
                session = Session(loop)
                async with anyio.create_task_group() as group:
                    group.start_soon(session.watch_events)
                    group.start_soon(session.watch_audio)
                    await anyio.sleep(0.2)
                    started = time.monotonic()
                    await loop.send_text("Go on.")
                    if case == "speech":
                        await session.wait_for(AgentSpeechStarted, started, timeout=60)
                        await anyio.sleep(1.0)
                    else:
                        await anyio.sleep(1.0)  # the tool is running
                    await push_realtime(loop, interruption, silence=0.6)
                    with anyio.fail_after(30):
                        while not hooks.barge_ins:
                            await anyio.sleep(0.01)
                    await anyio.sleep(0.5)
                    group.cancel_scope.cancel()
            decided = hooks.barge_ins[0]
            if case == "speech":
                last = max(
                    (t for t, voiced in session.frames if voiced and t <= decided + 1),
                    default=decided,
                )
                speech_gaps.append(max(0.0, last - decided))
            else:
                aborted = next(t for t, status in hooks.tool_ends if status == "aborted")
                tool_gaps.append(aborted - decided)
    print("\n3. Barge-in latency from the VAD's decision (real Silero, Whisper, piper)")
    for name, gaps in (
        ("last speech frame out", speech_gaps),
        ('"cancel" tool aborted', tool_gaps),
    ):
        ms = [g * 1e3 for g in gaps]
        verdict = "OK" if max(ms) <= 20 else "MISS"
        print(
            f"   {name:24s} p50 {statistics.median(ms):5.1f} ms  max {max(ms):5.1f} ms "
            f"(n={len(ms)}); target <= 20 ms: {verdict}"
        )


# 4. Sessions sharing one speech stack --------------------------------------------------------


async def shared_sessions(speech: Speech, rounds: int) -> None:
    utterance = espeak("What time does the shop open tomorrow?")

    async def run(count: int) -> list[float]:
        latencies: list[float] = []
        loops = [
            VoiceLoop(
                TurnRunner(
                    ScriptedLLM(["It opens at nine in the morning."] * rounds),
                    ToolExecutor(ToolRegistry()),
                    system_prompt="x",
                ),
                stt=speech.stt,
                tts=speech.tts,
                vad=speech.vad,
            )
            for _ in range(count)
        ]
        sessions = [Session(loop) for loop in loops]
        async with AsyncExitStack() as stack:
            for loop in loops:
                await stack.enter_async_context(loop)
            async with anyio.create_task_group() as group:
                for session in sessions:
                    group.start_soon(session.watch_events)
                    group.start_soon(session.watch_audio)
                await anyio.sleep(0.2)
                for _ in range(rounds):
                    ends: list[float] = [0.0] * count

                    async def push(i: int, ends: list[float]) -> None:
                        ends[i] = await push_realtime(loops[i], utterance, silence=1.0)

                    async with anyio.create_task_group() as pushers:
                        for i in range(count):
                            pushers.start_soon(push, i, ends)
                    for i, session in enumerate(sessions):
                        await session.wait_for(AgentSpeechEnded, ends[i], timeout=120)
                        out = session.first_voiced_out(ends[i])
                        assert out is not None
                        latencies.append(out - ends[i])
                    await anyio.sleep(0.3)
                group.cancel_scope.cancel()
        return latencies

    single = await run(1)
    four = await run(4)
    s50, f50 = statistics.median(single), statistics.median(four)
    print("\n4. Turn latency (last voiced frame in -> first speech frame out), shared speech")
    print(f"   1 loop : p50 {s50 * 1e3:6.0f} ms  max {max(single) * 1e3:6.0f} ms (n={len(single)})")
    print(
        f"   4 loops: p50 {f50 * 1e3:6.0f} ms  max {max(four) * 1e3:6.0f} ms (n={len(four)})"
        f"  = {f50 / s50:.2f}x a single loop's p50"
    )


# 5. Memory ------------------------------------------------------------------------------------


def children_rss_mib() -> float:
    total = 0.0
    me = str(os.getpid())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[1] != me:
                    continue
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) / 1024
        except (OSError, IndexError):
            continue
    return total


async def main(args: argparse.Namespace) -> None:
    print(f"voice benchmark ({'quick' if args.quick else 'full'}), llm={args.llm}")
    started = time.monotonic()
    async with open_default_speech() as speech:
        print(
            f"speech stack loaded in {time.monotonic() - started:.1f} s: "
            f"{speech.stt.name}, {speech.tts.name}"
        )
        turns = 2 if args.quick else 4
        if args.llm == "offline":
            from llmrtc.llm.default import open_default_provider

            async with open_default_provider() as llm:
                await turn_latency(speech, llm, turns, "offline Qwen 1.5B")
                piper_mib = children_rss_mib()
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        else:
            await turn_latency(
                speech, ScriptedLLM(["It could be Shadow."] * turns), turns, "scripted"
            )
            piper_mib = children_rss_mib()
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        await pacing(10.0 if args.quick else 60.0)
        await barge_in(speech, 2 if args.quick else 4)
        await shared_sessions(speech, 2 if args.quick else 3)
    print("\n5. Peak RSS with the whole offline stack loaded")
    print(
        f"   this process {peak:.0f} MiB (Whisper, Silero"
        f"{', the LLM' if args.llm == 'offline' else ''}); piper workers {piper_mib:.0f} MiB"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    parser.add_argument("--llm", choices=("offline", "scripted"), default="offline")
    anyio.run(main, parser.parse_args())
