"""`llmrtc voice` as a user runs it: a real process, a WAV spoken by espeak-ng, the real
Silero VAD, and the real openai client against a scripted server for the model, STT and TTS;
then once on the whole offline stack (Qwen, Whisper, piper)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import wave
from pathlib import Path

import anyio
import pytest

from llmrtc.testing import (
    ErrorReply,
    ScriptedOpenAIServer,
    text_reply,
    tool_call_reply,
)
from llmrtc.testing.openai_audio import tone_reply
from llmrtc.voice.audio import resample, rms
from llmrtc.voice.frames import AudioFrame
from llmrtc.voice.wav import read_wav, write_wav
from tests._requirements import require

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
WEATHER_TOOLS = ROOT / "demos" / "text_agent.py"
WEATHER_PLAYBOOK = ROOT / "playbooks" / "weather.yaml"
VOICE = [sys.executable, "-m", "llmrtc.cli", "voice"]
QUESTION = "What is the weather in Tokyo?"
ANSWER = "It is sunny in Tokyo, 21 degrees."


def _needs_engines() -> None:
    require("espeak", "voice_model")


def _espeak(path: Path, text: str) -> Path:
    # en-us at 150 wpm: the default voice says "weather in Tokyo" so that Whisper hears
    # "web of Intokino".
    cmd = ["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(path), text]
    subprocess.run(cmd, check=True, timeout=60)
    return path


def _silence(path: Path, seconds: float = 1.5) -> Path:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(16000)
        wav.writeframes(bytes(2 * round(16000 * seconds)))
    return path


def _scripted_env(server: ScriptedOpenAIServer, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        "LLMRTC_SPEECH": "openai",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }


async def _voice(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    with anyio.fail_after(180):
        done = await anyio.run_process([*VOICE, *args], env=env, check=False)
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def _weather_script() -> ScriptedOpenAIServer:
    return ScriptedOpenAIServer(
        [
            tool_call_reply([("call_1", "lookupWeather", json.dumps({"city": "Tokyo"}))]),
            text_reply(ANSWER, pieces=6),
        ],
        transcripts=[QUESTION],
        speech=[tone_reply(0.4), tone_reply(0.4)],
    )


def _as_stereo_44k(path: Path) -> Path:
    """The same speech as a 44.1 kHz stereo file (what a desktop recorder writes)."""
    import numpy as np  # the voice extra's; this module must import without it

    mono = read_wav(path)
    samples = np.frombuffer(resample(mono.pcm, mono.sample_rate, 44100), dtype="<i2")
    stereo = np.repeat(samples, 2).tobytes()
    write_wav(path, AudioFrame(stereo, 44100, 2))
    return path


@pytest.mark.parametrize("layout", ["espeak mono 22.05 kHz", "stereo 44.1 kHz"])
async def test_a_spoken_question_becomes_a_spoken_answer(tmp_path: Path, layout: str) -> None:
    _needs_engines()
    question = _espeak(tmp_path / "question.wav", QUESTION)
    if layout.startswith("stereo"):
        question = _as_stereo_44k(question)
    reply = tmp_path / "reply.wav"
    async with _weather_script() as server:
        env = _scripted_env(server, tmp_path)
        done = await _voice(env, str(WEATHER_TOOLS), "--in", str(question), "--out", str(reply))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"you: {QUESTION}"
    assert lines[1] == '  -> lookupWeather({"city": "Tokyo"})'
    assert lines[2].startswith("  <- lookupWeather ok ")
    assert '"conditions":"sunny"' in lines[2]
    assert lines[3] == f"agent: {ANSWER}"
    assert lines[4].startswith(f"wrote {reply} (")
    assert done.stderr == ""
    # The STT got the user's speech (espeak's ~2 s, cut by the VAD), the TTS the reply.
    upload = server.transcription_requests[0]
    heard = read_wav(upload.audio)
    assert 1.0 < heard.duration < read_wav(question).duration + 0.6
    spoken = [request.body["input"] for request in server.speech_requests]
    assert spoken == [ANSWER]
    # The file holds the reply's audio (one 0.4 s tone), from first to last sound, 48 kHz mono.
    out = read_wav(reply)
    assert (out.sample_rate, out.channels) == (48000, 1)
    assert 0.4 <= out.duration < 0.4 + 0.2 + 0.3
    assert rms(out.pcm) > 1000


async def test_typed_text_with_a_playbook_needs_no_stt(tmp_path: Path) -> None:
    _needs_engines()
    reply = tmp_path / "reply.wav"
    async with _weather_script() as server:
        env = _scripted_env(server, tmp_path)
        done = await _voice(
            env, str(WEATHER_PLAYBOOK), "--text", QUESTION, "--out", str(reply), "--timeout", "60"
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["[playbook weather]", f"you: {QUESTION}"]
    assert f"agent: {ANSWER}" in done.stdout
    assert server.transcription_requests == []
    assert read_wav(reply).duration >= 0.4


async def test_a_file_without_speech_is_one_error_line(tmp_path: Path) -> None:
    _needs_engines()
    quiet = _silence(tmp_path / "quiet.wav")
    reply = tmp_path / "reply.wav"
    async with ScriptedOpenAIServer([]) as server:
        done = await _voice(
            _scripted_env(server, tmp_path), "--in", str(quiet), "--out", str(reply)
        )
    assert done.returncode == 1
    assert done.stderr.strip() == f"error: no speech detected in {quiet}"
    assert not reply.exists()
    assert server.requests == []


async def test_a_failing_model_is_reported_and_apologised_for(tmp_path: Path) -> None:
    _needs_engines()
    reply = tmp_path / "reply.wav"
    async with ScriptedOpenAIServer(
        [ErrorReply(500, "the model crashed")] * 3, speech=[tone_reply(0.3)] * 2
    ) as server:
        done = await _voice(
            _scripted_env(server, tmp_path), "--text", "Hello?", "--out", str(reply)
        )
    assert done.returncode == 1
    assert "error: the model failed" in done.stderr
    assert "Traceback" not in done.stderr
    # The handler's apology was spoken (not the error text) and written.
    assert server.speech_requests
    assert "crashed" not in " ".join(r.body["input"] for r in server.speech_requests)
    assert read_wav(reply).duration > 0.2


async def test_timeout_ends_the_turn_with_an_error(tmp_path: Path) -> None:
    _needs_engines()
    slow = text_reply(ANSWER, pieces=4, delay=5.0)
    async with ScriptedOpenAIServer([slow], speech=[tone_reply(0.3)] * 2) as server:
        done = await _voice(_scripted_env(server, tmp_path), "--text", "Hello?", "--timeout", "1")
    assert done.returncode == 1
    assert (
        "error: no complete reply within --timeout 1 s (still waiting for the model's answer)"
        in done.stderr
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--in", "missing.wav"], "missing.wav"),
        (["--in", "notes.txt"], "notes.txt: not a readable PCM WAV"),
        (["--text", "  "], "--text needs some text"),
        (["--text", "hi", "--timeout", "0"], "--timeout must be a number of seconds > 0"),
        (["missing_tools.py", "--text", "hi"], "missing_tools.py"),
    ],
)
async def test_bad_arguments_fail_before_any_model_loads(
    tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "notes.txt").write_text("not audio")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), "OPENAI_BASE_URL": "x"}
    with anyio.fail_after(60):
        done = await anyio.run_process([*VOICE, *args], env=env, cwd=tmp_path, check=False)
    assert done.returncode == 1
    stderr = done.stderr.decode()
    assert stderr.startswith("error: ") and message in stderr
    assert len(stderr.strip().splitlines()) == 1


async def test_in_and_text_are_exclusive_and_one_is_needed() -> None:
    for args in (["--in", "a.wav", "--text", "hi"], []):
        done = await anyio.run_process([*VOICE, *args], check=False)
        assert done.returncode == 2
        assert b"--in" in done.stderr


@pytest.mark.requires("voice_model")
@pytest.mark.requires("local_model")
async def test_the_whole_offline_stack_answers_a_spoken_weather_question(tmp_path: Path) -> None:
    _needs_engines()
    question = _espeak(tmp_path / "question.wav", QUESTION)
    reply = tmp_path / "reply.wav"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["LLMRTC_SPEECH"] = "offline"
    # A generous --timeout: on a loaded 2-core machine the 1.5B model is slow.
    args = [str(WEATHER_PLAYBOOK), "--in", str(question), "--out", str(reply), "--timeout", "500"]
    with anyio.fail_after(600):
        done = await anyio.run_process(
            [*VOICE, *args],
            env=env,
            check=False,
        )
    stdout, stderr = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, stderr
    you = next(line for line in stdout.splitlines() if line.startswith("you: "))
    assert "weather" in you.lower() and "tokyo" in you.lower()
    agent = next(line for line in stdout.splitlines() if line.startswith("agent: "))
    assert len(agent) > len("agent: ") + 3
    # What was written is the reply, spoken: Whisper hears its words back.
    from llmrtc.voice.providers.whisper import WhisperSTT

    audio = read_wav(reply)
    assert audio.duration > 0.5
    stt = WhisperSTT.load()
    heard = await stt.transcribe(resample(audio.pcm, audio.sample_rate, stt.sample_rate))
    said = {w.strip(".,!?").lower() for w in agent[len("agent: ") :].split()}
    words = {w.strip(".,!?").lower() for w in heard.split()}
    assert len(said & words) >= max(1, len(said) // 3), (agent, heard)
