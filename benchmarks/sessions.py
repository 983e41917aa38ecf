"""Benchmark of concurrent WebRTC sessions: is the agent's audio on time with 5, 10 and 15
sessions per server process while tools run, and with two server processes sharing the port?

Run:  .venv/bin/python benchmarks/sessions.py [--quick] [--seconds S]
(full run ~4 minutes; --quick, ~40 s, 2 sessions). It is a measurement, not a test: it exits 0
unless it crashes.

Every setup runs in fresh processes, so the server's event loop is what is measured:
- server: `RTCServer` with a `TurnRunner` per session on `ScriptedLLM` (each turn calls the
  tool `lookup`, which sleeps 0.3 s, then answers with a sentence) and `FakeVAD`/`FakeSTT`/
  `FakeTTS` (its sentences rendered once: see `RenderedTTS`), so the agent's audio is real
  Opus with speech in it, and no model time hides the loop's own. "2 processes" starts two
  such servers bound to one port with SO_REUSEPORT (`ServerConfig(reuse_port=True)`, what
  `llmrtc serve --workers 2` does); the kernel spreads the sessions over them.
- clients: `RTCTestClient`s, at most 5 per client process (a client loop as loaded as the
  server's would measure itself). Each sends a typed turn every 4 s (a tool call and about 2 s
  of spoken answer each), its microphone sends 20 ms frames throughout, and it pings over the
  data channel every 0.25 s.
- baseline: two bare aiortc peers on loopback in their own process, one sending a paced tone
  and answering pings on a data channel: what aiortc itself delivers on this machine now.

Figures, over the same measurement window for every session of a setup (after all connected
and a warm-up): received frames per second per session (50 is on time; mean and the worst
session), p99 of |inter-frame arrival gap - 20 ms| over all sessions' frames (ms), data-channel
round trip p50/p99 (ms) and pings lost (no pong within 5 s), turns completed and tool calls ok,
each server process's event-loop lag p99 (a 10 ms sleep's overshoot, ms; with 2 processes, how
the kernel spread the sessions over them is printed after the row), and the machine's
1-minute load average when the setup ended (other work on the cores shows there, and in the
baseline). "on time" = no session failed, every session >= 48 frames/s, jitter p99 <= 20 ms.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(Path(__file__).resolve())
PER_CLIENT_PROCESS = 5
TURN_EVERY = 4.0
PING_EVERY = 0.25
PING_TIMEOUT = 5.0
FRAME = 0.02


# Figures ----------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def figures(arrivals: list[float], rtts: list[float], start: float, end: float) -> dict[str, Any]:
    """One session's figures over [start, end): frames/s, arrival gaps' deviation, RTTs."""
    inside = [t for t in arrivals if start <= t < end]
    gaps = [abs(b - a - FRAME) * 1000 for a, b in itertools.pairwise(inside)]
    return {"fps": len(inside) / (end - start), "jitter": gaps, "rtt": [r * 1000 for r in rtts]}


# Server process ---------------------------------------------------------------------------------


async def serve(port: int, reuse_port: bool, max_sessions: int) -> None:
    from llmrtc.agent.runner import TurnRunner
    from llmrtc.execution.executor import ToolExecutor
    from llmrtc.rtc.config import ServerConfig
    from llmrtc.rtc.server import RTCServer
    from llmrtc.testing import FakeSTT, FakeTTS, FakeVAD, ScriptedLLM
    from llmrtc.testing.scripted import ScriptedResponse
    from llmrtc.tools import ToolCall, ToolRegistry, tool
    from llmrtc.voice.speech import Speech

    @tool
    async def lookup(query: str) -> str:
        """Look something up (slowly)."""
        await anyio.sleep(0.3)
        return f"all good with {query}"

    def agent() -> TurnRunner:
        script: list[Any] = []
        for i in range(200):
            call = ToolCall(f"c{i}", "lookup", {"query": "status"})
            script += [ScriptedResponse(tool_calls=[call]), "Everything is fine, thank you."]
        return TurnRunner(
            ScriptedLLM(script), ToolExecutor(ToolRegistry([lookup])), system_prompt="Brief."
        )

    class RenderedTTS:
        """FakeTTS's voice, each sentence rendered once: FakeTTS renders sample by sample in
        Python on the event loop (tens of ms a sentence), where a real engine runs in a
        subprocess; left as is, it would be the loop lag measured."""

        name = "fake-tts-rendered"
        sample_rate = 24000

        def __init__(self) -> None:
            self.voice = FakeTTS(sample_rate=self.sample_rate)
            self.rendered: dict[str, bytes] = {}

        async def synthesize(self, text: str) -> AsyncIterator[bytes]:
            if text not in self.rendered:
                self.rendered[text] = self.voice.render(text)
            pcm = self.rendered[text]
            for at in range(0, len(pcm), 4800):  # 0.1 s chunks, as FakeTTS yields
                await anyio.sleep(0)
                yield pcm[at : at + 4800]

    tts = RenderedTTS()
    speech = Speech(vad=FakeVAD(), stt=FakeSTT(tts=tts.voice), tts=tts)
    config = ServerConfig(
        port=port, reuse_port=reuse_port, max_sessions=max_sessions, shutdown_grace=2.0
    )
    lags: list[float] = []
    peak = 0

    async def measure_lag() -> None:
        nonlocal peak
        while True:
            started = time.perf_counter()
            await anyio.sleep(0.01)
            lags.append((time.perf_counter() - started - 0.01) * 1000)
            peak = max(peak, server.active_sessions)

    async with RTCServer(agent, speech=speech, config=config) as server:
        print(json.dumps({"port": server.port}), flush=True)
        async with anyio.create_task_group() as group:
            group.start_soon(measure_lag)
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    break
            group.cancel_scope.cancel()
    print(json.dumps({"lag_p99": percentile(lags, 0.99), "sessions": peak}))


# Client process ---------------------------------------------------------------------------------


async def clients(url: str, count: int, seconds: float, warmup: float) -> None:
    from llmrtc.testing import RTCTestClient

    connected = 0
    all_in = anyio.Event()
    window: list[float] = []
    results: list[dict[str, Any]] = []

    def open_window() -> None:
        if not window:
            start = time.monotonic() + warmup
            window[:] = [start, start + seconds]
            all_in.set()

    async def one(index: int) -> None:
        nonlocal connected
        rtts: list[float] = []
        lost = 0
        try:
            async with RTCTestClient(url, timeout=60) as client:
                connected += 1
                if connected == count:
                    open_window()
                await all_in.wait()
                start, end = window
                next_turn = time.monotonic() + TURN_EVERY * index / count  # staggered turns
                while (now := time.monotonic()) < end:
                    if now >= next_turn:
                        await client.send_text("How is everything?")
                        next_turn += TURN_EVERY
                    try:
                        rtt = await client.ping(timeout=PING_TIMEOUT)
                    except TimeoutError:
                        lost += 1
                    else:
                        if now >= start:
                            rtts.append(rtt)
                    await anyio.sleep(PING_EVERY)
        except Exception as exc:  # a session that failed is a figure too, not a crash
            results.append({"error": f"{type(exc).__name__}: {exc}"})
            open_window()  # the others do not wait for this one
            return
        result = figures(client.received_at, rtts, start, end)
        result["lost_pings"] = lost
        result["turns"] = sum(e["type"] == "turn_completed" for e in client.events)
        result["tools_ok"] = sum(
            e["type"] == "tool_call_finished" and e["status"] == "ok" for e in client.events
        )
        results.append(result)

    async with anyio.create_task_group() as group:
        for index in range(count):
            group.start_soon(one, index)
    print(json.dumps(results))


# Baseline process -------------------------------------------------------------------------------


async def baseline(seconds: float, warmup: float) -> None:
    import numpy as np

    from llmrtc.rtc.peer import (
        accept_answer,
        accept_offer,
        create_offer,
        create_peer,
        remote_audio_track,
        wait_connected,
    )
    from llmrtc.rtc.tracks import InboundAudio, OutboundAudio
    from llmrtc.testing._rtc_audio import Microphone, mic_frames
    from llmrtc.voice.frames import AudioFrame

    sender, receiver = create_peer(loopback=True), create_peer(loopback=True)
    mic = Microphone()  # the same paced source as RTCTestClient's
    t = np.arange(48000 * int(seconds + warmup + 5)) / 48000
    mic.queue(
        mic_frames(AudioFrame((8000 * np.sin(2 * np.pi * 440 * t)).astype("<i2").tobytes(), 48000))
    )
    sender.addTrack(OutboundAudio(mic))
    channel = sender.createDataChannel("events")
    receiver.on("datachannel", lambda ch: ch.on("message", lambda m: ch.send(m)))
    pongs: dict[str, anyio.Event] = {}
    channel.on("message", lambda m: pongs[m].set())
    arrivals: list[float] = []
    opened = anyio.Event()
    channel.on("open", opened.set)
    try:
        answer = await accept_offer(receiver, await create_offer(sender))
        await accept_answer(sender, answer)
        await wait_connected(sender, 30)
        await opened.wait()
        track = remote_audio_track(receiver)
        assert track is not None
        start = time.monotonic() + warmup
        end = start + seconds
        rtts: list[float] = []

        async def receive() -> None:
            async for _ in InboundAudio(track):
                arrivals.append(time.monotonic())

        async with anyio.create_task_group() as group:
            group.start_soon(receive)
            n = 0
            while (now := time.monotonic()) < end:
                n += 1
                pongs[str(n)] = done = anyio.Event()
                sent = time.perf_counter()
                channel.send(str(n))
                await done.wait()
                if now >= start:
                    rtts.append(time.perf_counter() - sent)
                await anyio.sleep(PING_EVERY)
            group.cancel_scope.cancel()
    finally:
        await sender.close()
        await receiver.close()
    result = figures(arrivals, rtts, start, end)
    print(json.dumps([result | {"turns": 0, "tools_ok": 0, "lost_pings": 0}]))


# Orchestration ----------------------------------------------------------------------------------


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )


def shared_port() -> socket.socket:
    """A port held with SO_REUSEPORT (bound, not listening) for the servers to share."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind(("127.0.0.1", 0))
    return holder


def run_setup(sessions: int, processes: int, seconds: float, warmup: float) -> dict[str, Any]:
    holder = shared_port() if processes > 1 else None
    port = holder.getsockname()[1] if holder else 0
    servers = []
    for _ in range(processes):
        args = ["--serve", str(port), "--max-sessions", str(sessions)]
        servers.append(spawn(*args, *(["--reuse-port"] if holder else [])))
    try:
        for server in servers:
            assert server.stdout is not None
            port = json.loads(server.stdout.readline())["port"]
        url = f"http://127.0.0.1:{port}/"
        counts = [PER_CLIENT_PROCESS] * (sessions // PER_CLIENT_PROCESS)
        if sessions % PER_CLIENT_PROCESS:
            counts.append(sessions % PER_CLIENT_PROCESS)
        # every client process measures the same length of window after its warm-up
        workers = [
            spawn("--clients", url, str(n), "--seconds", str(seconds), "--warmup", str(warmup))
            for n in counts
        ]
        results: list[dict[str, Any]] = []
        for worker, count in zip(workers, counts, strict=True):
            out, _ = worker.communicate(timeout=seconds + warmup + 180)
            lines = out.strip().splitlines()
            if lines:
                results += json.loads(lines[-1])
            else:  # the client process crashed (its traceback is on stderr)
                results += [{"error": f"client process exit status {worker.returncode}"}] * count
    finally:
        lags, split = [], []
        for server in servers:
            server.send_signal(signal.SIGTERM)
            out, _ = server.communicate(timeout=60)
            stats = json.loads(out.strip().splitlines()[-1])
            lags.append(stats["lag_p99"])
            split.append(stats["sessions"])
        if holder is not None:
            holder.close()
    return summary(results) | {"lag": lags, "split": split}


def run_baseline(seconds: float, warmup: float) -> dict[str, Any]:
    worker = spawn("--baseline", "--seconds", str(seconds), "--warmup", str(warmup))
    out, _ = worker.communicate(timeout=seconds + warmup + 120)
    return summary(json.loads(out.strip().splitlines()[-1])) | {"lag": [], "split": []}


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    failed = [r["error"] for r in results if "error" in r]
    done = [r for r in results if "error" not in r]
    jitter = [gap for r in done for gap in r["jitter"]]
    rtt = [value for r in done for value in r["rtt"]]
    fps = [r["fps"] for r in done] or [math.nan]
    for error in sorted(set(failed)):
        print(f"    a session failed: {error}")
    return {
        "sessions": len(results),
        "failed": len(failed),
        "fps_mean": statistics.fmean(fps),
        "fps_min": min(fps),
        "jitter_p99": percentile(jitter, 0.99),
        "rtt_p50": percentile(rtt, 0.5),
        "rtt_p99": percentile(rtt, 0.99),
        "lost": sum(r.get("lost_pings", 0) for r in done),
        "turns": sum(r["turns"] for r in done),
        "tools_ok": sum(r["tools_ok"] for r in done),
        "load": os.getloadavg()[0],
    }


def row(name: str, s: dict[str, Any], base: dict[str, Any]) -> str:
    on_time = s["failed"] == 0 and s["fps_min"] >= 48 and s["jitter_p99"] <= 20
    lag = "/".join(f"{v:.0f}" for v in s["lag"]) or "-"
    spread = "+".join(map(str, s["split"]))
    return (
        f"{name:<20}{s['sessions']:>3}  {s['fps_mean']:5.1f} ({s['fps_min']:4.1f})"
        f"  {s['jitter_p99']:6.1f} ({s['jitter_p99'] / max(base['jitter_p99'], 0.01):4.1f}x)"
        f"  {s['rtt_p50']:6.1f} /{s['rtt_p99']:7.1f} {s['lost']:>4}"
        f"  {s['turns']:>5} {s['tools_ok']:>5}  {lag:>9}  {s['load']:4.1f}"
        + ("  yes" if on_time else "  NO")
        + (f" ({s['failed']} failed)" if s["failed"] else "")
        + (f"  (sessions per process: {spread})" if len(s["split"]) > 1 else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 sessions, short windows")
    parser.add_argument("--seconds", type=float, default=None, help="measurement window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--max-sessions", type=int, default=20, help=argparse.SUPPRESS)
    parser.add_argument("--clients", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    seconds = args.seconds or (6.0 if args.quick else 20.0)
    if args.serve is not None:
        anyio.run(serve, args.serve, args.reuse_port, args.max_sessions)
        return
    if args.clients is not None:
        url, count = args.clients
        anyio.run(clients, url, int(count), seconds, args.warmup)
        return
    if args.baseline:
        anyio.run(baseline, seconds, args.warmup)
        return

    setups = [(2, 1), (2, 2)] if args.quick else [(5, 1), (10, 1), (15, 1), (10, 2), (15, 2)]
    print(f"{os.cpu_count()} cores; window {seconds:.0f} s after a {args.warmup:.0f} s warm-up\n")
    print(
        f"{'setup':<20}{'n':>3}  {'frames/s (min)':<14}  {'jitter p99 ms':<15}"
        f"  {'RTT p50 / p99 ms':<15} {'lost':>4}  {'turns':>5} {'tools':>5}  {'lag p99':>9}"
        "  load  on time"
    )
    base = run_baseline(seconds, args.warmup)
    print(row("bare aiortc pair", base, base), flush=True)
    for sessions, processes in setups:
        name = f"{processes} server process" + ("es" if processes > 1 else "")
        print(row(name, run_setup(sessions, processes, seconds, args.warmup), base), flush=True)


if __name__ == "__main__":
    main()
