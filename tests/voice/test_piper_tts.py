"""PiperTTS on the real piper-tts and joe voice: speech out, streaming, barge-in, dead workers,
the shared pool and its processes. Timings are causal or generous, never tight."""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from llmrtc.voice import TTS, TTSError
from llmrtc.voice.providers.piper import PiperTTS, default_piper_voice

if TYPE_CHECKING:
    from llmrtc.voice.providers.whisper import WhisperSTT

pytestmark = [pytest.mark.anyio, pytest.mark.requires("voice_model")]

LONG = " ".join(
    f"This is sentence number {n}, spoken so that the reply runs on for a good while."
    for n in range(1, 9)
)
"""Eight sentences (about 35 s of speech): piper sends each sentence's audio as it is made."""


def children() -> set[int]:
    """Process ids whose parent is this process (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.add(int(entry))
    return found


def seconds(pcm: bytes, rate: int = 22050) -> float:
    return len(pcm) / 2 / rate


def peak(pcm: bytes) -> int:
    import numpy as np

    return int(np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.int32)).max())


async def speak(tts: TTS, text: str) -> bytes:
    chunks = [chunk async for chunk in tts.synthesize(text)]
    assert all(len(chunk) % 2 == 0 and chunk for chunk in chunks)
    return b"".join(chunks)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # one event loop for the module: the shared pool's pipes belong to it


@pytest.fixture(scope="module")
def _voice() -> Path:
    return default_piper_voice()


@pytest.fixture(scope="module")
async def shared_tts(_voice: Path) -> AsyncIterator[PiperTTS]:
    """One pool of two workers for the tests that only speak."""
    async with PiperTTS(workers=2) as tts:
        yield tts


async def test_speaks_a_sentence_at_the_voice_rate(
    shared_tts: PiperTTS, whisper_stt: WhisperSTT
) -> None:
    from llmrtc.voice.audio import resample

    assert isinstance(shared_tts, TTS)
    assert (shared_tts.sample_rate, shared_tts.name) == (22050, "piper/joe-us")
    pcm = await speak(shared_tts, "What is the weather in Tokyo today?")
    # ~2 s of speech at a normal pace; a broken rate or a truncated stream falls far outside.
    assert 1.0 < seconds(pcm) < 4.0
    assert peak(pcm) > 3000
    heard = await whisper_stt.transcribe(resample(pcm, 22050, 16000))
    assert "weather" in heard.lower() and "tokyo" in heard.lower(), heard


async def test_empty_text_is_silence(shared_tts: PiperTTS) -> None:
    assert await speak(shared_tts, "  \n") == b""


async def test_streams_sentence_by_sentence(shared_tts: PiperTTS) -> None:
    started = time.monotonic()
    first_at = first_bytes = None
    total = b""
    async for chunk in shared_tts.synthesize(LONG):
        if first_at is None:
            first_at, first_bytes = time.monotonic() - started, len(chunk)
        total += chunk
    elapsed = time.monotonic() - started
    assert first_at is not None and first_bytes is not None
    # The first piece came after one sentence was made, long before all eight were.
    assert first_at < elapsed / 3
    assert first_bytes < len(total) / 10
    assert seconds(total) > 20


async def test_pool_serves_concurrent_requests(shared_tts: PiperTTS) -> None:
    texts = [f"Request number {n} has its own reply." for n in range(5)]
    results: dict[int, bytes] = {}

    async def one(n: int) -> None:
        results[n] = await speak(shared_tts, texts[n])

    async with anyio.create_task_group() as group:
        for n in range(len(texts)):
            group.start_soon(one, n)
    assert sorted(results) == list(range(len(texts)))
    for pcm in results.values():
        assert 1.0 < seconds(pcm) < 5.0 and peak(pcm) > 3000
    assert len(shared_tts.pids) == 2 and set(shared_tts.pids) <= children()


async def test_barge_in_cancels_and_the_worker_serves_the_next_request(_voice: Path) -> None:
    async with PiperTTS(workers=1) as tts:
        [pid] = tts.pids
        started = time.monotonic()
        async with aclosing(tts.synthesize(LONG)) as chunks:
            async for _ in chunks:
                break  # barge-in: the listener talks over the first sentence
        after = await speak(tts, "Okay.")
        recovered = time.monotonic() - started
        # The same worker answered (cancelled, not killed), with its own audio only, well
        # before the eight cancelled sentences could have been made (~2 s and more).
        assert tts.pids == [pid]
        assert 0.2 < seconds(after) < 2.0
        full = time.monotonic()
        await speak(tts, LONG)
        assert recovered < time.monotonic() - full


async def test_cancelled_consumer_leaves_the_worker_usable(_voice: Path) -> None:
    async with PiperTTS(workers=1) as tts:
        [pid] = tts.pids
        # Cancelled at once (while sending the request), then while the first sentence is made.
        for delay in (0.0, 0.05):
            with anyio.move_on_after(delay):
                await speak(tts, LONG)
            assert 0.2 < seconds(await speak(tts, "Okay.")) < 2.0
            assert tts.pids == [pid]


async def test_killed_worker_fails_its_request_and_restarts(_voice: Path) -> None:
    async with PiperTTS(workers=1) as tts:
        [pid] = tts.pids
        with pytest.raises(TTSError, match="exited"):
            async for _ in tts.synthesize(LONG):
                if tts.pids == [pid]:
                    os.kill(pid, signal.SIGKILL)  # mid-request: audio was already flowing
        pcm = await speak(tts, "Still here.")
        assert 0.3 < seconds(pcm) < 3.0
        [new_pid] = tts.pids
        assert new_pid != pid


async def test_worker_killed_while_idle_is_replaced(_voice: Path) -> None:
    async with PiperTTS(workers=1) as tts:
        [pid] = tts.pids
        os.kill(pid, signal.SIGKILL)
        await anyio.sleep(0.5)  # the exit is noticed before the next request
        assert 0.3 < seconds(await speak(tts, "Still here.")) < 3.0
        assert tts.pids != [pid]


async def test_no_process_outlives_the_pool(_voice: Path) -> None:
    before = children()
    tts = PiperTTS(workers=2)
    async with tts:
        pids = set(tts.pids)
        assert len(pids) == 2 and pids <= children()
        os.kill(tts.pids[0], signal.SIGKILL)
        await anyio.sleep(0.3)
        await speak(tts, "One.")  # a restarted worker is also stopped at the end
    assert children() == before
    assert tts.pids == []
    with pytest.raises(RuntimeError, match="not running"):
        await speak(tts, "Too late.")


async def test_closing_the_pool_fails_a_request_in_flight(_voice: Path) -> None:
    before = children()
    async with PiperTTS(workers=1) as tts:
        with pytest.raises(TTSError, match="pool was closed while speaking"):
            async for _ in tts.synthesize(LONG):
                await tts.aclose()
    assert children() == before


async def test_threads_sets_each_worker_onnx_threads(_voice: Path) -> None:
    def threads_of(pid: int) -> int:
        return len(os.listdir(f"/proc/{pid}/task"))

    counts = []
    for threads in (1, 3):
        async with PiperTTS(workers=1, threads=threads) as tts:
            await speak(tts, "Hello.")  # every thread the worker has exists by now
            counts.append(threads_of(tts.pids[0]))
    assert counts[1] - counts[0] == 2  # an ONNX pool of n threads has n - 1 of its own


async def test_other_voice_file_and_its_name(_voice: Path, tmp_path: Path) -> None:
    model = tmp_path / "custom-voice.onnx"
    shutil.copy(_voice, model)
    shutil.copy(_voice.with_name(_voice.name + ".json"), tmp_path / "custom-voice.onnx.json")
    async with PiperTTS(workers=1, voice=model) as tts:
        assert tts.name == "piper/custom-voice"
        assert seconds(await speak(tts, "Hello.")) > 0.2


async def test_broken_voice_fails_to_start_and_leaves_no_process(
    _voice: Path, tmp_path: Path
) -> None:
    model = tmp_path / "broken.onnx"
    model.write_bytes(b"not an onnx model")
    shutil.copy(_voice.with_name(_voice.name + ".json"), tmp_path / "broken.onnx.json")
    before = children()
    with pytest.raises(TTSError, match=r"loading the piper voice .*broken\.onnx failed"):
        async with PiperTTS(workers=2, voice=model):
            pass
    assert children() == before


async def test_bad_options_are_refused(_voice: Path, tmp_path: Path) -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="workers"):
            PiperTTS(workers=bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="threads"):
            PiperTTS(threads=bad)  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match=r"nothing\.onnx"):
        PiperTTS(voice=tmp_path / "nothing.onnx")
    with pytest.raises(RuntimeError, match="not running"):
        await speak(PiperTTS(workers=1), "Not started.")


async def test_the_library_never_imports_piper(shared_tts: PiperTTS) -> None:
    import sys

    await speak(shared_tts, "Hello.")
    assert "piper" not in sys.modules  # GPL-3.0: only the worker processes load it


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_works_under_trio(_voice: Path) -> None:
    async with PiperTTS(workers=1) as tts:
        async with aclosing(tts.synthesize(LONG)) as chunks:
            async for _ in chunks:
                break
        assert 0.3 < seconds(await speak(tts, "Hello there.")) < 3.0
        assert len(tts.pids) == 1


def test_long_unpunctuated_text_is_cut_for_piper() -> None:
    from llmrtc.voice.providers._piper_worker import MAX_PIECE_CHARS, split_long

    punctuated = "Hello there. How are you? " * 30
    assert "".join(split_long(punctuated)) == punctuated  # nothing lost, cut at sentence ends
    assert all(piece.endswith(("? ", ". ")) for piece in split_long(punctuated)[:-1])
    words = "word " * 400
    pieces = split_long(words)
    assert "".join(pieces) == words and all(len(p) <= MAX_PIECE_CHARS for p in pieces)
    clauses = ("one two three four five six seven eight nine ten " * 4 + ", ") * 4
    assert all(piece.endswith(", ") for piece in split_long(clauses)[:-1])
    assert split_long("x" * 700) == ["x" * 300, "x" * 300, "x" * 100]
    assert split_long("a\x00b\x07c\nd") == ["a b c\nd"]  # espeak refuses control characters
    assert split_long(" \n ") == []


async def test_long_unpunctuated_text_starts_speaking_early(shared_tts: PiperTTS) -> None:
    started = time.monotonic()
    first_at = None
    total = b""
    async for chunk in shared_tts.synthesize("and then we went on " * 60):  # 1200 chars
        first_at = first_at or time.monotonic() - started
        total += chunk
    assert first_at is not None and first_at < (time.monotonic() - started) / 2
    assert seconds(total) > 30
