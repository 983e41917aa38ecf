"""`IncrementalTranscription`: passes while the user speaks, and a final that reuses them."""

from __future__ import annotations

import anyio
import pytest

from llmrtc.testing import FakeSTT
from llmrtc.voice.stt import STTError
from llmrtc.voice.transcription import IncrementalTranscription

pytestmark = pytest.mark.anyio

RATE = 16000
WORDS = b"\x10\x00" * (RATE // 10)  # 0.1 s of (pretend) speech
QUIET = bytes(2 * RATE // 10)  # 0.1 s of silence


class GatedSTT(FakeSTT):
    """A FakeSTT whose passes each wait until the test lets them finish."""

    def __init__(self, transcripts: list[str]) -> None:
        super().__init__(transcripts)
        self.started = 0
        self.gates: list[anyio.Event] = []

    async def transcribe(self, pcm: bytes) -> str:
        gate = anyio.Event()
        self.gates.append(gate)
        self.started += 1
        await gate.wait()
        return await super().transcribe(pcm)


async def settle() -> None:
    for _ in range(20):
        await anyio.sleep(0)


async def test_a_pass_at_the_pause_is_the_final_when_only_silence_follows() -> None:
    stt = FakeSTT(["what is the weather in Oslo"])
    async with IncrementalTranscription(stt) as transcription:
        for _ in range(10):
            transcription.push(WORDS, voiced=True)
        transcription.pause()
        await settle()
        for _ in range(5):  # the closing silence the endpointer waits for
            transcription.push(QUIET, voiced=False)
        assert transcription.partial == "what is the weather in Oslo"
        assert await transcription.final() == "what is the weather in Oslo"
    assert transcription.reused
    assert transcription.passes == 1
    assert len(stt.utterances) == 1
    assert len(stt.utterances[0]) == 10 * len(WORDS)


async def test_words_after_the_pause_make_a_final_pass_over_everything() -> None:
    stt = FakeSTT(["I'd like the weather in", "I'd like the weather in Tokyo"])
    async with IncrementalTranscription(stt) as transcription:
        transcription.push(WORDS * 5, voiced=True)
        transcription.pause()
        await settle()
        transcription.push(WORDS * 3, voiced=True)  # the user went on
        transcription.push(QUIET * 5, voiced=False)
        assert await transcription.final() == "I'd like the weather in Tokyo"
    assert not transcription.reused
    assert [len(pcm) for pcm in stt.utterances] == [5 * len(WORDS), 8 * len(WORDS) + 5 * len(QUIET)]


async def test_final_waits_for_a_running_pass_that_covers_every_word() -> None:
    stt = GatedSTT(["see you tomorrow"])
    async with IncrementalTranscription(stt) as transcription:
        transcription.push(WORDS * 4, voiced=True)
        transcription.pause()
        await settle()
        assert stt.started == 1
        transcription.push(QUIET * 5, voiced=False)
        result: list[str] = []

        async def take_final() -> None:
            result.append(await transcription.final())

        async with anyio.create_task_group() as group:
            group.start_soon(take_final)
            await settle()
            assert result == []  # the pass is still running
            stt.gates[0].set()
    assert result == ["see you tomorrow"]
    assert stt.started == 1
    assert transcription.reused  # begun before final() was called: no pass after it


async def test_final_runs_after_a_running_pass_that_missed_the_last_words() -> None:
    stt = GatedSTT(["my order is four five", "my order is four five seven two"])
    async with IncrementalTranscription(stt) as transcription:
        transcription.push(WORDS * 4, voiced=True)
        transcription.pause()
        await settle()
        transcription.push(WORDS * 2, voiced=True)
        transcription.push(QUIET * 5, voiced=False)
        result: list[str] = []

        async def take_final() -> None:
            result.append(await transcription.final())

        async with anyio.create_task_group() as group:
            group.start_soon(take_final)
            await settle()
            assert stt.started == 1  # never two passes at once
            stt.gates[0].set()
            await settle()
            assert stt.started == 2
            stt.gates[1].set()
    assert result == ["my order is four five seven two"]
    assert len(stt.utterances[1]) == 6 * len(WORDS) + 5 * len(QUIET)


async def test_min_new_audio_gives_partials_while_the_user_speaks() -> None:
    stt = FakeSTT(["", "what is", "what is", "what is the weather"])
    partials: list[str] = []
    async with IncrementalTranscription(
        stt, min_new_audio=0.3, on_partial=partials.append
    ) as transcription:
        for _ in range(12):
            transcription.push(WORDS, voiced=True)
            await settle()
        assert transcription.passes == 4  # every 0.3 s of new audio
        assert await transcription.final() == "what is the weather"
    # Empty and repeated texts are not partials; the final pass covered it all.
    assert partials == ["what is", "what is the weather"]
    assert transcription.reused


async def test_no_pass_without_new_words() -> None:
    stt = FakeSTT(["hello"])
    async with IncrementalTranscription(stt, min_new_audio=0.1) as transcription:
        transcription.push(QUIET * 5, voiced=False)
        transcription.pause()
        await settle()
        assert transcription.passes == 0
        transcription.push(WORDS * 3, voiced=True)
        transcription.pause()
        await settle()
        transcription.pause()  # a second pause with nothing said since
        transcription.push(QUIET * 3, voiced=False)
        await settle()
        assert transcription.passes == 1
        assert await transcription.final() == "hello"


async def test_a_failed_partial_pass_does_not_stop_the_final() -> None:
    stt = FakeSTT([STTError("engine hiccup"), "thanks a lot"])
    async with IncrementalTranscription(stt) as transcription:
        transcription.push(WORDS * 3, voiced=True)
        transcription.pause()
        await settle()
        assert transcription.partial == ""
        assert await transcription.final() == "thanks a lot"


async def test_a_failed_final_pass_raises() -> None:
    stt = FakeSTT([STTError("engine crashed")])
    async with IncrementalTranscription(stt) as transcription:
        transcription.push(WORDS * 3, voiced=True)
        with pytest.raises(STTError, match="engine crashed"):
            await transcription.final()


async def test_leaving_the_block_cancels_a_running_pass() -> None:
    stt = GatedSTT(["never"])
    with anyio.fail_after(5):
        async with IncrementalTranscription(stt) as transcription:
            transcription.push(WORDS * 3, voiced=True)
            transcription.pause()
            await settle()
            assert stt.started == 1
    assert stt.utterances == []  # the pass never finished


async def test_bad_use_is_refused_precisely() -> None:
    stt = FakeSTT(["x"])
    for bad in (0, -1.0, float("inf"), float("nan"), True, "1"):
        with pytest.raises(ValueError, match="min_new_audio"):
            IncrementalTranscription(stt, min_new_audio=bad)  # type: ignore[arg-type]
    transcription = IncrementalTranscription(stt)
    with pytest.raises(RuntimeError, match="async with"):
        await transcription.final()
    async with transcription:
        with pytest.raises(ValueError, match="whole s16 samples"):
            transcription.push(b"\x00", voiced=True)
        transcription.push(WORDS, voiced=True)
        await transcription.final()
        with pytest.raises(RuntimeError, match="after final"):
            transcription.push(WORDS, voiced=True)
