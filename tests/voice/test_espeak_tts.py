"""EspeakTTS: the espeak-ng fallback voice (a Debian binary, no model to load)."""

from __future__ import annotations

import os
import struct
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from llmrtc.voice import TTS, TTSError
from llmrtc.voice.providers import espeak
from llmrtc.voice.providers.espeak import EspeakTTS

if TYPE_CHECKING:
    from llmrtc.voice.providers.whisper import WhisperSTT

pytestmark = [pytest.mark.anyio, pytest.mark.requires("espeak")]


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


async def speak(tts: TTS, text: str) -> bytes:
    chunks = [chunk async for chunk in tts.synthesize(text)]
    assert all(chunk and len(chunk) % 2 == 0 for chunk in chunks)
    return b"".join(chunks)


def seconds(pcm: bytes) -> float:
    return len(pcm) / 2 / 22050


async def test_speaks_a_sentence() -> None:
    tts = EspeakTTS()
    assert isinstance(tts, TTS)
    assert (tts.sample_rate, tts.name) == (22050, "espeak-ng/en-us")
    pcm = await speak(tts, "What is the weather in Tokyo today?")
    assert 1.0 < seconds(pcm) < 4.0
    assert max(abs(sample) for (sample,) in struct.iter_unpack("<h", pcm)) > 3000


@pytest.mark.requires("voice_model")
async def test_speech_transcribes_back(whisper_stt: WhisperSTT) -> None:
    from llmrtc.voice.audio import resample

    pcm = await speak(EspeakTTS(words_per_minute=150), "What is the weather in Tokyo today?")
    heard = (await whisper_stt.transcribe(resample(pcm, 22050, 16000))).lower()
    assert "weather" in heard and "tokyo" in heard, heard


async def test_words_per_minute_sets_the_pace() -> None:
    text = "The quick brown fox jumps over the lazy dog."
    slow = await speak(EspeakTTS(words_per_minute=100), text)
    fast = await speak(EspeakTTS(words_per_minute=300), text)
    assert seconds(fast) < 0.6 * seconds(slow)


async def test_voice_is_used_and_an_unknown_one_fails() -> None:
    text = "Hello there."
    assert EspeakTTS(voice="de").name == "espeak-ng/de"
    assert await speak(EspeakTTS(voice="de"), text) != await speak(EspeakTTS(), text)
    with pytest.raises(TTSError, match=r"voice 'xx-nothing'.*does not exist"):
        await speak(EspeakTTS(voice="xx-nothing"), text)


async def test_text_is_never_an_option_and_empty_text_is_silence() -> None:
    tts = EspeakTTS()
    assert seconds(await speak(tts, "-v xx --help")) > 0.5
    assert await speak(tts, " \n ") == b""


async def test_closing_early_kills_espeak() -> None:
    before = children()
    tts = EspeakTTS()
    async with aclosing(tts.synthesize("A long reply. " * 2000)) as chunks:
        async for _ in chunks:
            assert len(children() - before) == 1  # espeak is still speaking
            break
    assert children() == before


async def test_bad_options_and_missing_program(monkeypatch: pytest.MonkeyPatch) -> None:
    for wpm in (79, 451, 1.5, True):
        with pytest.raises(ValueError, match="words_per_minute"):
            EspeakTTS(words_per_minute=wpm)  # type: ignore[arg-type]
    for voice in ("", "-x"):
        with pytest.raises(ValueError, match="voice"):
            EspeakTTS(voice=voice)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(FileNotFoundError, match="apt install espeak-ng"):
        EspeakTTS()


async def test_a_stopped_espeak_whose_exit_is_never_seen_does_not_freeze_the_reply(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_open = anyio.open_process

    async def open_never_reaped(*args: Any, **kwargs: Any) -> Any:
        process = await real_open(*args, **kwargs)
        real_aclose = process.aclose

        async def aclose() -> None:
            await real_aclose()  # cleaned up for real, then waits as a lost exit did
            await anyio.sleep_forever()

        monkeypatch.setattr(process, "aclose", aclose)
        return process

    monkeypatch.setattr(espeak.anyio, "open_process", open_never_reaped)
    monkeypatch.setattr(espeak, "_CLOSE_TIMEOUT", 0.3)
    with anyio.fail_after(10):
        async with aclosing(EspeakTTS().synthesize("A long reply. " * 200)) as chunks:
            async for _ in chunks:
                break
    assert "did not exit within" in caplog.text
