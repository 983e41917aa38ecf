"""Benchmark of the voice loop on the offline stack: turn latency and framework overhead, pacing
drift, barge-in latency, sessions sharing one speech stack, peak memory.

Run:  .venv/bin/python benchmarks/voice.py [--quick] [--llm offline|scripted] [--turns N]
      [--sections stages,overlap,pacing,barge-in,shared]
(the stages alone, `--sections stages`, take ~4 min with the offline LLM). It is a measurement,
not a test: it exits 0 unless it crashes. Spoken input is synthesised with Debian's espeak-ng
and pushed as 20 ms frames at 48 kHz in real time (one frame every 20 ms, as a browser sends
them). It prints the load average first: on a shared machine, read the stages as ratios.

What it prints, and how to read it:

1. Every stage of a turn on the served weather playbook (`llmrtc serve playbooks/weather.yaml`'s
   orchestrator, one conversation), medians over `--turns` small-talk questions (no tool) and
   `--turns`+2 weather questions (kind decided by what the model did: one `lookupWeather` call
   or none), in ms after the last voiced input frame: end of speech decided (`UserSpeechEnded`),
   STT called / its inference starting (the wait for a free Whisper worker) / ending / back on
   the event loop, `Transcript` emitted, `on_turn_start`, `on_llm_start`,
   `on_llm_first_token`, the first `TextDelta` / `ToolCallStarted`, the tool's start and end,
   the follow-up request and its first token, the first sentence handed to TTS, TTS's first
   audio, the first non-silent frame out. Targets: no-tool first audio <= 1.5 s, one-tool
   <= 3.0 s. Then the gaps between stages and the prompt tokens per request. Run twice in
   the same run: without preemptive generation (the baseline), then with it (the default),
   where "LLM request sent" is when the turn took the early request and "early request sent"
   when the model was actually asked (at the user's pause); the STT stages are the pass whose
   transcript the turn used.
1b. The issue's live case: a question spoken while the answer to the one before is still
   being generated (a barge-in), with the same stages, when the interrupted request ended,
   and the STT inference time beside section 1's (same run).
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
import math
import os
import resource
import shutil
import statistics
import subprocess
import time
import wave
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack
from io import BytesIO
from pathlib import Path
from typing import Any

import anyio

from llmrtc.agent.events import TextDelta, ToolCallStarted
from llmrtc.agent.runner import TurnRunner
from llmrtc.execution.executor import ToolExecutor
from llmrtc.telemetry.events import (
    BargeInEvent,
    LLMEndEvent,
    LLMFirstTokenEvent,
    LLMStartEvent,
    STTEndEvent,
    ToolEndEvent,
    ToolStartEvent,
    TTSStartEvent,
    TurnEndEvent,
    TurnStartEvent,
)
from llmrtc.telemetry.hooks import Hooks
from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
from llmrtc.tools import ToolCall, ToolContext, ToolRegistry, tool
from llmrtc.voice import AudioFrame, Speech, VoiceConfig, VoiceLoop, open_default_speech
from llmrtc.voice.audio import resample, rms, split_frames
from llmrtc.voice.events import AgentSpeechEnded, AgentSpeechStarted, Transcript, UserSpeechEnded

PLAYBOOK = Path(__file__).resolve().parent.parent / "playbooks" / "weather.yaml"
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
    """An STT that records, for each `transcribe`, when it was called, when the engine's own
    inference started and ended (WhisperSTT only: its worker thread's `_infer`, so the wait
    for a free worker shows apart), and when it returned to the event loop."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sample_rate = inner.sample_rate
        self.name = inner.name
        self.calls: list[dict[str, float]] = []
        self._inference: list[tuple[float, float]] = []
        infer = getattr(inner, "_infer", None)
        if infer is not None:  # a benchmark-only wrap: the library has no hook inside a worker

            def timed_infer(pcm: bytes, *rest: Any) -> str:
                began = time.monotonic()
                try:
                    return str(infer(pcm, *rest))
                finally:
                    self._inference.append((began, time.monotonic()))

            inner._infer = timed_infer

    async def transcribe(self, pcm: bytes, *, hints: Sequence[str] = ()) -> str:
        call: dict[str, float] = {"called": time.monotonic(), "audio": len(pcm) / 2 / 16000}
        self.calls.append(call)
        seen = len(self._inference)
        try:
            return str(await self.inner.transcribe(pcm, hints=hints))
        finally:
            call["returned"] = time.monotonic()
            if len(self._inference) > seen:
                call["infer_start"], call["infer_end"] = self._inference[seen]


class TimedLLM:
    """A model provider that records when each request was sent (`sent`: (time, last user
    words)), early ones included (they reach no hook until a turn takes them)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model = inner.model
        self.provider_name = inner.provider_name
        self.sent: list[tuple[float, str]] = []

    def stream(self, request: Any, *, abort_signal: Any = None) -> Any:
        users = [m for m in request.messages if type(m).__name__ == "UserMessage"]
        self.sent.append((time.monotonic(), users[-1].content if users else ""))
        return self.inner.stream(request, abort_signal=abort_signal)

    async def complete(self, request: Any, *, abort_signal: Any = None) -> Any:
        return await self.inner.complete(request, abort_signal=abort_signal)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class TimedTTS:
    """A TTS that records when each `synthesize` was called and yielded its first chunk."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.sample_rate = inner.sample_rate
        self.name = inner.name
        self.calls: list[list[Any]] = []  # [called, first chunk or None, text], in call order

    async def synthesize(self, text: str) -> AsyncIterator[bytes]:
        call: list[Any] = [time.monotonic(), None, text]
        self.calls.append(call)
        async for chunk in self.inner.synthesize(text):
            if call[1] is None:
                call[1] = time.monotonic()
            yield chunk


class TimeHooks(Hooks):
    """Records when each hook event happened (`events`: (time, event)), and barge-ins and
    tool ends for section 3."""

    def __init__(self) -> None:
        self.events: list[tuple[float, Any]] = []
        self.barge_ins: list[float] = []
        self.tool_ends: list[tuple[float, str]] = []

    def _record(self, event: Any) -> None:
        self.events.append((time.monotonic(), event))

    def on_barge_in(self, event: BargeInEvent) -> None:
        self.barge_ins.append(time.monotonic())
        self._record(event)

    def on_tool_end(self, event: ToolEndEvent) -> None:
        self.tool_ends.append((time.monotonic(), event.status))
        self._record(event)

    def on_tool_start(self, event: ToolStartEvent) -> None:
        self._record(event)

    def on_turn_start(self, event: TurnStartEvent) -> None:
        self._record(event)

    def on_llm_start(self, event: LLMStartEvent) -> None:
        self._record(event)

    def on_llm_first_token(self, event: LLMFirstTokenEvent) -> None:
        self._record(event)

    def on_llm_end(self, event: LLMEndEvent) -> None:
        self._record(event)

    def on_stt_end(self, event: STTEndEvent) -> None:
        self._record(event)

    def on_tts_start(self, event: TTSStartEvent) -> None:
        self._record(event)

    def on_turn_end(self, event: TurnEndEvent) -> None:
        self._record(event)

    def of_turn(self, kind: type, turn_id: str | None) -> list[tuple[float, Any]]:
        """This turn's events of `kind`, in order."""
        return [
            (t, e)
            for t, e in self.events
            if isinstance(e, kind) and getattr(e, "turn_id", None) == turn_id
        ]


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

    def first(self, kind: type | tuple[type, ...], after: float = 0.0) -> float | None:
        return next((t for t, e in self.events if isinstance(e, kind) and t >= after), None)

    async def wait_for(self, kind: type, after: float, timeout: float) -> float:
        with anyio.fail_after(timeout):
            while (found := self.first(kind, after)) is None:
                await anyio.sleep(0.01)
        return found

    def first_voiced_out(self, after: float) -> float | None:
        return next((t for t, voiced in self.frames if voiced and t >= after), None)


# Silence pushed after a question: a browser sends frames all the time, and a turn the detector
# judged incomplete ends only after `VoiceConfig.max_end_silence` (2.0 s) of it.
TAIL = 2.5


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


async def turn_done(session: Session, hooks: TimeHooks, after: float) -> bool:
    """Wait until the turn answering what was said after `after` has ended and its speech has
    played out (the turn ends when the model's stream does; synthesis and playout go on);
    False when no turn came (nothing was heard)."""
    with anyio.fail_after(60):
        while (heard := session.first(Transcript, after)) is None:
            await anyio.sleep(0.01)
    if not next(e.text for t, e in session.events if t == heard and isinstance(e, Transcript)):
        return False
    with anyio.fail_after(300):
        while not (
            ends := [e for t, e in hooks.events if isinstance(e, TurnEndEvent) and t >= after]
        ):
            await anyio.sleep(0.01)
    if any(c.isalnum() for c in ends[0].text):  # something to say: wait until it was played
        with anyio.move_on_after(300):
            await session.wait_for(AgentSpeechEnded, after, timeout=300)
    return True


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# 1. Turn stages -------------------------------------------------------------------------------

NO_TOOL_QUESTIONS = (
    "Hi there, how are you today?",
    "What can you help me with?",
    "Thanks a lot for your help so far.",
    "Can you tell me a short joke?",
    "What is your name?",
    "Is it a good idea to drink water every day?",
)
"""Small talk for the weather playbook: answered without its tool."""
TOOL_QUESTIONS = (
    "What is the weather in Tokyo right now?",
    "How warm is it in Lima today?",
    "Is it raining in Oslo at the moment?",
    "What is the weather like in Paris?",
    "Do I need a jacket in Berlin today?",
    "Please look up the weather in Rome.",
    "How cold is it in Madrid right now?",
    "What is the temperature in London today?",
)
"""Weather questions: the playbook's stage asks for `lookupWeather` on each."""

STAGES = (
    ("eos", "end of speech decided (UserSpeechEnded)"),
    ("stt_call", "STT called (transcribe)"),
    ("stt_infer_start", "STT inference starts (worker free)"),
    ("stt_infer_end", "STT inference ends"),
    ("stt_return", "STT back on the event loop"),
    ("transcript", "Transcript event emitted"),
    ("turn_start", "turn starts (on_turn_start)"),
    ("early_request", "early request sent (preemptive)"),
    ("llm_request", "LLM request sent (on_llm_start)"),
    ("first_token", "first token (on_llm_first_token)"),
    ("first_delta", "first text delta / tool call event"),
    ("tool_start", "tool starts"),
    ("tool_end", "tool ends"),
    ("followup_request", "follow-up request sent"),
    ("followup_token", "follow-up first token"),
    ("sentence_ready", "first sentence ready (TTS called)"),
    ("tts_first_audio", "TTS first audio"),
    ("first_out", "first audio frame out"),
)
"""Every stage of a turn, in the order they happen, with what marks it."""


def stage_times(
    turn_id: str | None,
    last_voiced: float,
    session: Session,
    hooks: TimeHooks,
    stt_call: dict[str, float],
    tts: TimedTTS,
    n_tts: int,
) -> dict[str, float]:
    """One turn's stages, in seconds after the last voiced input frame (missing: not reached)."""
    marks: dict[str, float | None] = {}
    marks["eos"] = session.first(UserSpeechEnded, last_voiced - 0.2)
    marks["stt_call"] = stt_call.get("called")
    marks["stt_infer_start"] = stt_call.get("infer_start")
    marks["stt_infer_end"] = stt_call.get("infer_end")
    marks["stt_return"] = stt_call.get("returned")
    marks["transcript"] = session.first(Transcript, last_voiced)
    starts = hooks.of_turn(TurnStartEvent, turn_id)
    marks["turn_start"] = starts[0][0] if starts else None
    requests = hooks.of_turn(LLMStartEvent, turn_id)
    tokens = hooks.of_turn(LLMFirstTokenEvent, turn_id)
    first_token_of = {e.request_id: t for t, e in tokens}
    if requests:
        marks["llm_request"] = requests[0][0]
        marks["first_token"] = first_token_of.get(requests[0][1].request_id)
    if len(requests) > 1:
        marks["followup_request"] = requests[1][0]
        marks["followup_token"] = first_token_of.get(requests[1][1].request_id)
    marks["first_delta"] = session.first((TextDelta, ToolCallStarted), last_voiced)
    tool_starts = hooks.of_turn(ToolStartEvent, turn_id)
    tool_ends = hooks.of_turn(ToolEndEvent, turn_id)
    marks["tool_start"] = tool_starts[0][0] if tool_starts else None
    marks["tool_end"] = tool_ends[0][0] if tool_ends else None
    calls = tts.calls[n_tts:]
    if calls:
        marks["sentence_ready"], marks["tts_first_audio"] = calls[0][0], calls[0][1]
    marks["first_out"] = session.first_voiced_out(last_voiced)
    return {k: v - last_voiced for k, v in marks.items() if v is not None}


def early_request(llm: Any, last_voiced: float, transcript: str) -> float | None:
    """When the model was asked `transcript` before the turn's end (preemptive generation),
    in seconds after the last voiced frame; None if it was not."""
    sent = getattr(llm, "sent", [])
    early = [t for t, text in sent if text == transcript and last_voiced - 5 <= t]
    return early[0] - last_voiced if early else None


async def turn_stages(
    speech: Speech, llm: Any, handler_for: Any, turns: int, label: str, *, preemptive: bool
) -> dict[str, list[dict[str, float]]]:
    """Speak each question to a fresh loop around the weather playbook and time every stage;
    returns the rows by the kind of turn the model made ("no-tool" / "one-tool" / "other")."""
    stt, tts, hooks = TimedSTT(speech.stt), TimedTTS(speech.tts), TimeHooks()
    questions = [*NO_TOOL_QUESTIONS[:turns], *TOOL_QUESTIONS[: max(turns, 2) + 2]]
    rows: dict[str, list[dict[str, float]]] = {"no-tool": [], "one-tool": [], "other": []}
    prompt_tokens: dict[str, list[int]] = {"no-tool": [], "one-tool": [], "other": []}
    timed = TimedLLM(llm) if llm is not None else None
    handler = handler_for(timed, hooks)
    if llm is not None:  # as `llmrtc serve` does: the first prompt is read before the call
        await handler.warm()
    config = VoiceConfig(preemptive_generation=preemptive)
    label = f"{label}, preemptive generation {'on' if preemptive else 'off'}"
    async with VoiceLoop(
        handler, stt=stt, tts=tts, vad=speech.vad, hooks=hooks, config=config
    ) as loop:
        session = Session(loop)
        async with anyio.create_task_group() as group:
            group.start_soon(session.watch_events)
            group.start_soon(session.watch_audio)
            await anyio.sleep(0.2)
            for question in questions:
                n_stt, n_tts = len(stt.calls), len(tts.calls)
                last_voiced = await push_realtime(loop, espeak(question), silence=TAIL)
                if not await turn_done(session, hooks, last_voiced):
                    print(f"   (nothing heard in {question!r}: skipped)")
                    continue
                transcript = next(
                    (
                        e
                        for t, e in session.events
                        if t >= last_voiced and isinstance(e, Transcript)
                    ),
                    None,
                )
                stt_end = [
                    e for t, e in hooks.events if isinstance(e, STTEndEvent) and t >= last_voiced
                ]
                if not stt_end or transcript is None or len(stt.calls) <= n_stt:
                    print(f"   (no turn for {question!r}: skipped)")
                    continue
                turn_id = stt_end[0].turn_id
                tools = len(hooks.of_turn(ToolStartEvent, turn_id))
                kind = "no-tool" if tools == 0 else "one-tool" if tools == 1 else "other"
                # The pass whose transcript the turn used: the last one (earlier ones were
                # pauses the user spoke on after).
                row = stage_times(turn_id, last_voiced, session, hooks, stt.calls[-1], tts, n_tts)
                early = early_request(timed, last_voiced, transcript.text)
                if preemptive and early is not None:
                    row["early_request"] = early
                rows[kind].append(row)
                ends = hooks.of_turn(LLMEndEvent, turn_id)
                prompt_tokens[kind].extend(e.input_tokens or 0 for _, e in ends)
                said = " ".join(c[2] for c in tts.calls[n_tts:])[:70]
                print(
                    f"   {kind:8s} {row.get('first_out', math.nan) * 1e3:6.0f} ms  "
                    f"heard {transcript.text!r} -> {said!r}"
                )
                await anyio.sleep(0.5)
            group.cancel_scope.cancel()
    print_stages(rows, label, prompt_tokens)
    return rows


def print_stages(
    rows: dict[str, list[dict[str, float]]], label: str, prompt_tokens: dict[str, list[int]]
) -> None:
    targets = {"no-tool": 1.5, "one-tool": 3.0}
    print(f"\n1. Turn stages ({label}), median ms after the last voiced input frame")
    print(f"   {'stage':44s} {'no-tool':>9s} {'one-tool':>9s}")
    for key, name in STAGES:
        cells = []
        for kind in ("no-tool", "one-tool"):
            values = [r[key] for r in rows[kind] if key in r]
            cells.append(f"{statistics.median(values) * 1e3:9.0f}" if values else f"{'-':>9s}")
        print(f"   {name:44s} {cells[0]} {cells[1]}")
    for kind in ("no-tool", "one-tool"):
        found = rows[kind]
        if not found:
            print(f"   {kind}: no turn of this kind happened")
            continue
        gaps = {
            "STT queue wait": [
                r["stt_infer_start"] - r["stt_call"] for r in found if "stt_infer_start" in r
            ],
            "STT inference": [
                r["stt_infer_end"] - r["stt_infer_start"] for r in found if "stt_infer_end" in r
            ],
            "STT return to loop": [
                r["stt_return"] - r["stt_infer_end"] for r in found if "stt_infer_end" in r
            ],
            "transcript after eos": [r["transcript"] - r["eos"] for r in found],
            "turn start after transcript": [
                r["turn_start"] - r["transcript"] for r in found if "turn_start" in r
            ],
            "model to first sentence": [
                r["sentence_ready"] - r["llm_request"]
                for r in found
                if "sentence_ready" in r and "llm_request" in r
            ],
            "TTS to first audio": [
                r["tts_first_audio"] - r["sentence_ready"] for r in found if "tts_first_audio" in r
            ],
            # After the end of speech is decided, everything is STT, model, TTS, or ours.
            "framework overhead": [
                (r["first_out"] - r["eos"])
                - (r["stt_return"] - r["stt_call"])
                - (r["sentence_ready"] - r["llm_request"])
                - (r["tts_first_audio"] - r["sentence_ready"])
                for r in found
                if all(
                    k in r for k in ("first_out", "stt_return", "llm_request", "tts_first_audio")
                )
            ],
            "first audio to frame out": [
                r["first_out"] - r["tts_first_audio"]
                for r in found
                if "first_out" in r and "tts_first_audio" in r
            ],
        }
        print(
            f"   {kind} (n={len(found)}), median gaps: "
            + ", ".join(f"{name} {statistics.median(v) * 1e3:.0f}" for name, v in gaps.items() if v)
        )
        outs = [r["first_out"] for r in found if "first_out" in r]
        verdict = "OK" if statistics.median(outs) <= targets[kind] else "MISS"
        tokens = prompt_tokens[kind]
        print(
            f"   {kind}: first agent audio p50 {statistics.median(outs) * 1e3:.0f} ms "
            f"(max {max(outs) * 1e3:.0f}); target <= {targets[kind] * 1e3:.0f} ms: {verdict}; "
            f"prompt tokens per request p50 {statistics.median(tokens) if tokens else 0:.0f}"
        )


async def overlap(speech: Speech, llm: Any, handler_for: Any, rounds: int) -> None:
    """The issue's live case: the user's next question comes while the answer to the last one
    is still being generated and played (a barge-in). Its STT inference is compared with the
    same utterances' in section 1 (same run), and the aborted request's end is timed."""
    stt, tts, hooks = TimedSTT(speech.stt), TimedTTS(speech.tts), TimeHooks()
    first_q = espeak("Tell me about the weather in Tokyo and what I should wear there.")
    rows: list[dict[str, float]] = []
    handler = handler_for(llm, hooks)
    async with VoiceLoop(handler, stt=stt, tts=tts, vad=speech.vad, hooks=hooks) as loop:
        session = Session(loop)
        async with anyio.create_task_group() as group:
            group.start_soon(session.watch_events)
            group.start_soon(session.watch_audio)
            await anyio.sleep(0.2)
            for i in range(rounds):
                question = espeak(NO_TOOL_QUESTIONS[i % len(NO_TOOL_QUESTIONS)])
                first_end = await push_realtime(loop, first_q, silence=TAIL)
                # Speak again once the first answer is under way (its first token is out).
                with anyio.fail_after(120):
                    while not [
                        e
                        for t, e in hooks.events
                        if t >= first_end and isinstance(e, LLMFirstTokenEvent)
                    ]:
                        await anyio.sleep(0.01)
                n_stt, n_tts = len(stt.calls), len(tts.calls)
                pushed = time.monotonic()
                last_voiced = await push_realtime(loop, question, silence=TAIL)
                if not await turn_done(session, hooks, last_voiced):
                    continue
                stt_end = [
                    e for t, e in hooks.events if isinstance(e, STTEndEvent) and t >= last_voiced
                ]
                if not stt_end or len(stt.calls) <= n_stt:
                    continue
                row = stage_times(
                    stt_end[0].turn_id, last_voiced, session, hooks, stt.calls[n_stt], tts, n_tts
                )
                # When the interrupted answer's request ended (the model stopped generating).
                ended = [t for t, e in hooks.events if isinstance(e, LLMEndEvent) and pushed <= t]
                barged = [t for t in hooks.barge_ins if t >= pushed]
                if barged:
                    row["barge_in"] = barged[0] - last_voiced
                    if ended:
                        row["aborted_llm_end"] = ended[0] - last_voiced
                rows.append(row)
                await anyio.sleep(1.0)
            group.cancel_scope.cancel()
    print(
        "\n1b. A question over the answer still being generated (barge-in), ms after its last "
        f"voiced frame (n={len(rows)})"
    )
    for key, name in (
        *STAGES[:9],
        ("barge_in", "barge-in decided (before the eos)"),
        ("aborted_llm_end", "interrupted request ended"),
        STAGES[-1],
    ):
        values = [r[key] for r in rows if key in r]
        if values:
            print(f"   {name:44s} {statistics.median(values) * 1e3:9.0f}")
    infer = [r["stt_infer_end"] - r["stt_infer_start"] for r in rows if "stt_infer_end" in r]
    if infer:
        print(
            f"   STT inference p50 {statistics.median(infer) * 1e3:.0f} ms "
            "(section 1's turns are the idle baseline)"
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
                        ends[i] = await push_realtime(loops[i], utterance, silence=TAIL)

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


def weather_handler(llm: Any, hooks: Hooks) -> Any:
    """The served weather playbook's orchestrator, as `llmrtc serve playbooks/weather.yaml`
    builds it."""
    from llmrtc.playbook import PlaybookOrchestrator, load_playbook
    from llmrtc.playbook.loading import load_playbook_tools

    playbook = load_playbook(PLAYBOOK)
    return PlaybookOrchestrator(playbook, llm, load_playbook_tools(playbook), hooks=hooks)


def scripted_weather(turns: int) -> ScriptedLLM:
    """Answers as the questions of section 1 need: text, then a call and its answer."""
    call = ToolCall("c1", "lookupWeather", '{"city": "Tokyo"}')
    script: list[Any] = ["It could be Shadow."] * turns
    for _ in range(max(turns, 2) + 2):
        script += [[call], "It is sunny in Tokyo."]
    return ScriptedLLM(script)


async def main(args: argparse.Namespace) -> None:
    print(f"voice benchmark ({'quick' if args.quick else 'full'}), llm={args.llm}")
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    sections = set(args.sections.split(","))
    started = time.monotonic()
    turns = 2 if args.quick else args.turns
    async with AsyncExitStack() as stack:
        speech = await stack.enter_async_context(open_default_speech())
        print(
            f"speech stack loaded in {time.monotonic() - started:.1f} s: "
            f"{speech.stt.name}, {speech.tts.name}"
        )
        if args.llm == "offline":
            from llmrtc.llm.default import open_default_provider

            llm = await stack.enter_async_context(open_default_provider())
            label = "offline Qwen 1.5B, weather playbook"
            handler_for: Any = weather_handler
        else:
            label = "scripted model, weather playbook"
            llm = None

            def handler_for(_: Any, hooks: Hooks) -> Any:
                return weather_handler(scripted_weather(turns), hooks)

        if "stages" in sections:
            for preemptive in (False, True):
                await turn_stages(speech, llm, handler_for, turns, label, preemptive=preemptive)
        if "overlap" in sections:
            await overlap(speech, llm, handler_for, 2 if args.quick else 4)
        piper_mib = children_rss_mib()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        if "pacing" in sections:
            await pacing(10.0 if args.quick else 60.0)
        if "barge-in" in sections:
            await barge_in(speech, 2 if args.quick else 4)
        if "shared" in sections:
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
    parser.add_argument(
        "--turns", type=int, default=6, help="questions per kind of turn in section 1 (>= 6)"
    )
    parser.add_argument(
        "--sections",
        default="stages,overlap,pacing,barge-in,shared",
        help="comma-separated: stages, overlap, pacing, barge-in, shared",
    )
    anyio.run(main, parser.parse_args())
