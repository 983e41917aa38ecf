"""open_default_speech: the offline engines (or OpenAI's), loaded once per process and shared."""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import anyio
import pytest

from llmrtc.voice import STT, TTS, VAD, Speech, open_default_speech
from llmrtc.voice.providers._whisper_model import VoiceModelError

pytestmark = pytest.mark.anyio


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


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LLMRTC_SPEECH"):
        monkeypatch.delenv(name, raising=False)


async def hear_back(speech: Speech, text: str) -> str:
    from llmrtc.voice.audio import resample

    pcm = b"".join([chunk async for chunk in speech.tts.synthesize(text)])
    return (await speech.stt.transcribe(resample(pcm, speech.tts.sample_rate, 16000))).lower()


@pytest.mark.requires("voice_model")
@pytest.mark.usefixtures("offline")
async def test_offline_engines_satisfy_the_protocols_and_work_together() -> None:
    async with open_default_speech() as speech:
        assert isinstance(speech.vad, VAD)
        assert isinstance(speech.stt, STT)
        assert isinstance(speech.tts, TTS)
        assert (speech.stt.name, speech.tts.name) == ("faster-whisper/base", "piper/joe-us")
        assert (speech.vad.sample_rate, speech.vad.window_samples) == (16000, 512)
        stream = speech.vad.stream()
        assert 0.0 <= stream.speech_probability(bytes(1024)) < 0.5
        heard = await hear_back(speech, "Please book a table for two.")
        assert "table" in heard and "two" in heard, heard


@pytest.mark.requires("voice_model")
@pytest.mark.usefixtures("offline")
async def test_a_second_open_shares_the_engines_until_the_last_exit() -> None:
    before = children()
    async with open_default_speech() as first:
        workers = set(first.tts.pids)  # type: ignore[attr-defined]
        assert workers and workers <= children()
        async with open_default_speech() as second:
            assert second is first
            assert children() - before == workers  # no second pool was started
        # The inner exit closed nothing: the outer user still speaks.
        assert set(first.tts.pids) == workers  # type: ignore[attr-defined]
        assert [chunk async for chunk in first.tts.synthesize("Still here.")]
    assert children() == before
    async with open_default_speech() as third:  # after the last exit: loaded afresh
        assert third is not first


@pytest.mark.requires("voice_model")
@pytest.mark.usefixtures("offline")
async def test_concurrent_opens_in_tasks_load_once_and_any_task_may_close_last() -> None:
    before = children()
    seen: list[Speech] = []
    first_done = anyio.Event()

    async def user(hold: float) -> None:
        async with open_default_speech() as speech:
            seen.append(speech)
            await anyio.sleep(hold)
            if hold < 1:
                first_done.set()
            else:
                await first_done.wait()  # the first opener (maybe the loader) has left
                assert "second" in await hear_back(speech, "The second user is still here.")

    async with anyio.create_task_group() as group:
        group.start_soon(user, 0.1)
        group.start_soon(user, 1.0)
    assert len(seen) == 2 and seen[0] is seen[1]
    assert children() == before


@pytest.mark.requires("voice_model")
@pytest.mark.usefixtures("offline")
async def test_a_cancelled_loader_hands_over_to_a_waiting_opener() -> None:
    before = children()
    got: list[Speech] = []

    async def loader() -> None:
        with anyio.move_on_after(0.3):  # cancelled while the engines load
            async with open_default_speech():
                pytest.fail("the loader should have been cancelled before the engines were up")

    async def waiter() -> None:
        await anyio.sleep(0.05)  # opens while the loader loads
        async with open_default_speech(tts_workers=1) as speech:
            got.append(speech)
            assert "still" in await hear_back(speech, "I am still speaking.")

    async with anyio.create_task_group() as group:
        group.start_soon(loader)
        group.start_soon(waiter)
    assert len(got) == 1
    assert children() == before


@pytest.mark.requires("voice_model")
@pytest.mark.usefixtures("offline")
async def test_options_reach_the_engines_and_conflicts_are_refused(tmp_path: Path) -> None:
    stages: list[str] = []
    async with open_default_speech(
        cache_dir=tmp_path, stt_workers=2, tts_workers=1, progress=lambda s, _: stages.append(s)
    ) as speech:
        assert (tmp_path / "whisper-base" / "model.bin").is_file()
        assert speech.stt.workers == 2  # type: ignore[attr-defined]
        assert len(speech.tts.pids) == 1  # type: ignore[attr-defined]
        assert {"joining model", "loading model", "starting TTS"} <= set(stages)
        async with open_default_speech(tts_workers=1, stt_workers=2) as same:
            assert same is speech
        async with open_default_speech() as defaults:
            assert defaults is speech
        with pytest.raises(ValueError, match="already open with tts_workers=1"):
            async with open_default_speech(tts_workers=3):
                pass


async def test_bad_options_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="tts_workers"):
            async with open_default_speech(tts_workers=bad):  # type: ignore[arg-type]
                pass
        with pytest.raises(ValueError, match="stt_workers"):
            async with open_default_speech(stt_workers=bad):  # type: ignore[arg-type]
                pass
    monkeypatch.setenv("LLMRTC_SPEECH", "cloud")
    with pytest.raises(ValueError, match="LLMRTC_SPEECH='cloud'"):
        async with open_default_speech():
            pass


@pytest.mark.usefixtures("offline")
async def test_missing_packages_are_named_in_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.distribution
    gone = {"piper-tts", "faster-whisper"}

    def distribution(name: str) -> importlib.metadata.Distribution:
        if name in gone:
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", distribution)
    before = children()
    with pytest.raises(VoiceModelError) as caught:
        async with open_default_speech():
            pass
    message = str(caught.value)
    assert "faster-whisper" in message and "piper-tts" in message
    assert 'pip install "llmrtc[voice]"' in message
    assert children() == before


@pytest.mark.requires("voice_model")
async def test_openai_environment_selects_openai_stt_and_tts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LLMRTC_SPEECH", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    before = children()
    async with open_default_speech() as speech:
        assert speech.stt.name.startswith("openai/") and speech.tts.name.startswith("openai/")
        assert speech.vad.sample_rate == 16000  # Silero in both modes
        assert children() == before  # no piper workers
        clients = [speech.stt.client, speech.tts.client]  # type: ignore[attr-defined]
    assert all(client.is_closed() for client in clients)

    monkeypatch.setenv("LLMRTC_SPEECH", "offline")  # forces offline despite the key
    async with open_default_speech() as speech:
        assert speech.tts.name == "piper/joe-us"

    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("LLMRTC_SPEECH", "openai")  # forced, but nothing to talk to
    with pytest.raises(ValueError, match="no API key"):
        async with open_default_speech():
            pass
