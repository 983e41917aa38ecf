"""OpenAISTT and OpenAITTS with the real `openai` client against ScriptedOpenAIServer's audio
endpoints on 127.0.0.1: uploads, streamed PCM, barge-in closes, errors that leak no body."""

from __future__ import annotations

import io
import json
import threading
import wave
from collections.abc import Iterator
from contextlib import aclosing, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest

from llmrtc.testing import DisconnectReply, ErrorReply, ScriptedOpenAIServer, text_reply
from llmrtc.testing.openai_audio import (
    SpeechReply,
    TranscriptionReply,
    speech_reply,
    tone,
    tone_reply,
)
from llmrtc.voice.providers.openai_speech import OpenAISTT, OpenAITTS
from llmrtc.voice.stt import STT, STTError
from llmrtc.voice.tts import TTS, TTSError

pytestmark = pytest.mark.anyio

both_backends = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
"""For the tests of streaming and cancellation, where the event loops differ."""

SECRET = "internal trace 0xdeadbeef: do not show"
"""Text in a server's error body that must never reach an error message."""


def speech_16k(seconds: float = 1.0) -> bytes:
    return tone(seconds, sample_rate=16_000, frequency=300.0)


def stt(server: ScriptedOpenAIServer, **options: Any) -> OpenAISTT:
    return OpenAISTT(base_url=server.base_url, api_key="test", **options)


def tts(server: ScriptedOpenAIServer, **options: Any) -> OpenAITTS:
    return OpenAITTS(base_url=server.base_url, api_key="test", **options)


async def wait_for_disconnect(server: ScriptedOpenAIServer) -> None:
    with anyio.fail_after(5):
        while not server.disconnects:
            await anyio.sleep(0.01)


# Speech to text ------------------------------------------------------------------------


async def test_transcription_uploads_a_16k_wav_and_returns_the_scripted_text() -> None:
    pcm = speech_16k(0.8)
    async with ScriptedOpenAIServer([], transcripts=["  What is the weather in Tokyo? "]) as server:
        engine = stt(server, model="whisper-1")
        text = await engine.transcribe(pcm)
    assert text == "What is the weather in Tokyo?"
    upload = server.transcription_requests[0]
    assert upload.fields["model"] == "whisper-1" and "language" not in upload.fields
    assert (upload.filename, upload.content_type) == ("audio.wav", "audio/wav")
    with wave.open(io.BytesIO(upload.audio)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16_000, 1, 2)
        assert wav.readframes(wav.getnframes()) == pcm  # the utterance, byte for byte
    assert server.requests[0].path == "/v1/audio/transcriptions"
    assert server.requests[0].headers["authorization"] == "Bearer test"
    assert (engine.name, engine.sample_rate) == ("openai/whisper-1", 16_000)


async def test_language_is_sent_when_given() -> None:
    async with ScriptedOpenAIServer([], transcripts=["Hola."]) as server:
        assert await stt(server, language="es").transcribe(speech_16k()) == "Hola."
    assert server.transcription_requests[0].fields["language"] == "es"


async def test_a_blip_shorter_than_a_tenth_of_a_second_is_no_speech_and_sends_nothing() -> None:
    async with ScriptedOpenAIServer([]) as server:
        engine = stt(server)
        assert await engine.transcribe(b"") == ""
        assert await engine.transcribe(speech_16k(0.05)) == ""
        with pytest.raises(ValueError, match=r"even byte count\), got 3 bytes"):
            await engine.transcribe(b"\x00\x01\x02")
    assert not server.requests and not server.unexpected


async def test_a_server_error_is_one_line_with_status_url_and_model_but_no_body() -> None:
    async with ScriptedOpenAIServer([], transcripts=[ErrorReply(500, SECRET)]) as server:
        with pytest.raises(STTError) as info:
            await stt(server, max_retries=0).transcribe(speech_16k())
    message = str(info.value)
    assert "\n" not in message and "HTTP 500" in message
    assert f"{server.base_url}/audio/transcriptions" in message
    assert "gpt-4o-mini-transcribe" in message and "try again" in message
    assert "deadbeef" not in message and "internal trace" not in message


async def test_a_transient_failure_is_retried_once_by_default() -> None:
    async with ScriptedOpenAIServer([], transcripts=[ErrorReply(503), "Second try."]) as server:
        assert await stt(server).transcribe(speech_16k()) == "Second try."
    assert len(server.transcription_requests) == 2
    async with ScriptedOpenAIServer([], transcripts=[ErrorReply(503), ErrorReply(503)]) as server:
        with pytest.raises(STTError, match="HTTP 503"):
            await stt(server).transcribe(speech_16k())
    assert len(server.transcription_requests) == 2  # one retry, then the error


async def test_a_wrong_api_key_says_to_check_the_key() -> None:
    refusal = ErrorReply(401, "Incorrect API key provided: sk-wr***ng")
    async with ScriptedOpenAIServer([], transcripts=[refusal]) as server:
        with pytest.raises(STTError) as info:
            await stt(server).transcribe(speech_16k())
    message = str(info.value)
    assert "HTTP 401" in message and "OPENAI_API_KEY" in message and "sk-wr" not in message
    assert len(server.requests) == 1  # a 401 is not retried


@both_backends
async def test_cancelling_a_transcription_closes_the_request() -> None:
    slow = TranscriptionReply("too late", delay=30)
    async with ScriptedOpenAIServer([], transcripts=[slow]) as server:
        engine = stt(server)
        with anyio.move_on_after(0.3) as scope:
            await engine.transcribe(speech_16k())
        assert scope.cancelled_caught
        await wait_for_disconnect(server)  # the server saw the hang-up, long before 30 s


async def test_no_answer_within_the_timeout_is_a_clear_error() -> None:
    slow = TranscriptionReply("too late", delay=30)
    async with ScriptedOpenAIServer([], transcripts=[slow]) as server:
        with pytest.raises(STTError, match=r"no answer within 0\.3 s") as info:
            await stt(server, timeout=0.3, max_retries=0).transcribe(speech_16k())
    assert "\n" not in str(info.value)


async def test_a_server_that_is_not_there_is_a_connection_error() -> None:
    async with ScriptedOpenAIServer([]) as server:
        url = server.base_url
    engine = OpenAISTT(base_url=url, api_key="test", max_retries=0)
    with pytest.raises(STTError, match="cannot connect; is the server running"):
        await engine.transcribe(speech_16k())
    async with ScriptedOpenAIServer([], transcripts=[DisconnectReply()]) as server:
        with pytest.raises(STTError, match="cannot connect"):
            await stt(server, max_retries=0).transcribe(speech_16k())


# Text to speech ------------------------------------------------------------------------


@both_backends
async def test_speech_streams_several_chunks_of_24k_pcm_before_the_reply_ends() -> None:
    pcm = tone(1.0)
    async with ScriptedOpenAIServer([], speech=[speech_reply(pcm, pieces=5, delay=0.05)]) as server:
        engine = tts(server, model="tts-1", voice="coral")
        chunks: list[bytes] = []
        finished_at_first_chunk = None
        async for data in engine.synthesize("Hello there."):
            if not chunks:
                finished_at_first_chunk = server.speech_requests[0].finished
            chunks.append(data)
    assert finished_at_first_chunk is False  # the first audio came before the last was sent
    assert len(chunks) >= 3 and b"".join(chunks) == pcm
    assert server.speech_requests[0].chunks_sent == 5 and server.speech_requests[0].finished
    assert server.speech_requests[0].body == {
        "model": "tts-1",
        "voice": "coral",
        "input": "Hello there.",
        "response_format": "pcm",
    }
    assert (engine.name, engine.sample_rate) == ("openai/tts-1:coral", 24_000)


async def test_chunks_are_whole_samples_when_the_network_splits_one() -> None:
    pieces = [b"\x01", b"\x02\x03\x04", b"\x05\x06\x07", b"\x08", b"\x09"]
    async with ScriptedOpenAIServer([], speech=[SpeechReply(pieces, delay=0.03)]) as server:
        chunks = [data async for data in tts(server).synthesize("Odd.")]
    assert all(len(data) % 2 == 0 and data for data in chunks)
    assert b"".join(chunks) == bytes(range(1, 9))  # the last odd byte has no partner


@both_backends
async def test_closing_the_stream_early_stops_the_download() -> None:
    reply = tone_reply(5.0, pieces=50, delay=0.05)
    async with ScriptedOpenAIServer([], speech=[reply]) as server:
        received = 0
        async with aclosing(tts(server).synthesize("A long answer.")) as chunks:
            async for _ in chunks:
                received += 1
                if received == 2:
                    break  # barge-in
        await wait_for_disconnect(server)
        await anyio.sleep(0.2)  # the server would have gone on sending by now
    record = server.speech_requests[0]
    assert not record.finished and record.sent < record.total // 2


@both_backends
async def test_closing_under_a_cancelled_scope_still_closes_the_connection() -> None:
    async with ScriptedOpenAIServer([], speech=[tone_reply(5.0, pieces=50, delay=0.05)]) as server:
        with anyio.CancelScope() as scope:
            async with aclosing(tts(server).synthesize("Cancel me.")) as chunks:
                async for _ in chunks:
                    scope.cancel()  # the close below runs with the scope cancelled
                    await anyio.sleep(1)
        await wait_for_disconnect(server)
    assert not server.speech_requests[0].finished


async def test_speech_errors_are_one_line_without_the_body() -> None:
    async with ScriptedOpenAIServer(
        [], speech=[ErrorReply(500, SECRET), ErrorReply(401, SECRET)]
    ) as server:
        engine = tts(server, max_retries=0)
        with pytest.raises(TTSError) as failed:
            async for _ in engine.synthesize("Hello."):
                pass
        with pytest.raises(TTSError) as refused:
            async for _ in engine.synthesize("Hello."):
                pass
    for info, status in ((failed, 500), (refused, 401)):
        message = str(info.value)
        assert "\n" not in message and f"HTTP {status}" in message and "deadbeef" not in message
        assert f"{server.base_url}/audio/speech" in message and "gpt-4o-mini-tts" in message
    assert "OPENAI_API_KEY" in str(refused.value)


@both_backends
async def test_a_download_cut_mid_stream_is_an_error_after_the_audio_so_far() -> None:
    reply = tone_reply(1.0, pieces=4, delay=0.02, drop_after=2)
    async with ScriptedOpenAIServer([], speech=[reply]) as server:
        received: list[bytes] = []
        with pytest.raises(TTSError, match="the connection was cut") as info:
            async for data in tts(server).synthesize("Cut."):
                received.append(data)
    assert "\n" not in str(info.value)
    assert sum(map(len, received)) == server.speech_requests[0].sent  # what came was yielded


async def test_blank_text_yields_nothing_and_sends_no_request() -> None:
    async with ScriptedOpenAIServer([]) as server:
        assert [data async for data in tts(server).synthesize("  \n")] == []
    assert not server.requests and not server.unexpected


# Construction ------------------------------------------------------------------------


async def test_both_satisfy_the_voice_protocols() -> None:
    async with ScriptedOpenAIServer([]) as server:
        assert isinstance(stt(server), STT) and isinstance(tts(server), TTS)


async def test_models_and_voice_default_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLMRTC_STT_MODEL", "env-stt")
    monkeypatch.setenv("LLMRTC_TTS_MODEL", "env-tts")
    monkeypatch.setenv("LLMRTC_TTS_VOICE", "sage")
    async with ScriptedOpenAIServer([], transcripts=["ok"], speech=[tone_reply(0.1)]) as server:
        await stt(server).transcribe(speech_16k())
        [_ async for _ in tts(server).synthesize("Hi.")]
    assert server.transcription_requests[0].fields["model"] == "env-stt"
    assert server.speech_requests[0].body["model"] == "env-tts"
    assert server.speech_requests[0].body["voice"] == "sage"
    monkeypatch.delenv("LLMRTC_STT_MODEL")
    monkeypatch.delenv("LLMRTC_TTS_MODEL")
    monkeypatch.delenv("LLMRTC_TTS_VOICE")
    assert OpenAISTT(api_key="k").name == "openai/gpt-4o-mini-transcribe"
    assert OpenAITTS(api_key="k").name == "openai/gpt-4o-mini-tts:alloy"


def test_the_key_comes_from_the_environment_or_is_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    for engine in (OpenAISTT, OpenAITTS):
        with pytest.raises(ValueError, match="no API key for OpenAI"):
            engine()
    assert OpenAISTT(base_url="http://127.0.0.1:9/v1").base_url == "http://127.0.0.1:9/v1/"
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    assert OpenAITTS().client.api_key == "env-key"


def test_bad_options_are_refused_where_they_are_given() -> None:
    with pytest.raises(ValueError, match="timeout must be > 0"):
        OpenAISTT(api_key="k", timeout=0)
    with pytest.raises(ValueError, match="max_retries must be >= 0"):
        OpenAITTS(api_key="k", max_retries=-1)
    with pytest.raises(ValueError, match="language must be an ISO-639-1 code"):
        OpenAISTT(api_key="k", language=" ")
    with pytest.raises(ValueError, match="either client= or base_url=/api_key="):
        OpenAITTS(client=OpenAITTS(api_key="k").client, api_key="k")


async def test_a_shared_client_is_used_and_left_open_an_own_client_is_closed() -> None:
    import openai

    async with ScriptedOpenAIServer([], transcripts=["Shared."]) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="shared")
        shared = OpenAISTT(client=client)
        assert await shared.transcribe(speech_16k()) == "Shared."
        await shared.aclose()
        assert not client.is_closed()
        await client.close()
        own = tts(server)
        await own.aclose()
        assert own.client.is_closed()
    assert server.requests[0].headers["authorization"] == "Bearer shared"


async def test_one_engine_serves_concurrent_sessions() -> None:
    texts = [f"Utterance {n}." for n in range(4)]
    slow = [TranscriptionReply(text, delay=0.2) for text in texts]
    async with ScriptedOpenAIServer([], transcripts=slow) as server:
        engine, heard = stt(server), []

        async def session() -> None:
            heard.append(await engine.transcribe(speech_16k()))

        with anyio.fail_after(0.2 * len(texts)):  # less than one after another would take
            async with anyio.create_task_group() as group:
                for _ in texts:
                    group.start_soon(session)
    assert sorted(heard) == texts


async def test_a_given_clients_timeout_is_the_one_reported() -> None:
    import openai

    slow = TranscriptionReply("too late", delay=30)
    async with ScriptedOpenAIServer([], transcripts=[slow]) as server:
        client = openai.AsyncOpenAI(
            base_url=server.base_url, api_key="k", timeout=0.25, max_retries=0
        )
        with pytest.raises(STTError, match=r"no answer within 0\.25 s"):
            await OpenAISTT(client=client).transcribe(speech_16k())
        await client.close()


class _KeepAliveHandler(BaseHTTPRequestHandler):
    """Answers both audio endpoints and keeps the connection open, as OpenAI does."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        if self.path.endswith("/audio/speech"):
            body, kind = tone(0.1), "application/octet-stream"
        else:
            body, kind = json.dumps({"text": "Kept alive."}).encode(), "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def keep_alive_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAliveHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_an_engine_shared_by_the_process_works_from_one_event_loop_after_another() -> None:
    # A kept-alive connection belongs to the loop that opened it: reused from the next loop,
    # a request would fail with "Event loop is closed".
    with keep_alive_server() as url:
        speech_to_text = OpenAISTT(base_url=url, api_key="k", max_retries=0)
        text_to_speech = OpenAITTS(base_url=url, api_key="k", max_retries=0)

        async def turn() -> tuple[str, bytes]:
            text = await speech_to_text.transcribe(speech_16k())
            audio = b"".join([data async for data in text_to_speech.synthesize("Hi.")])
            return text, audio

        for backend in ("asyncio", "asyncio", "trio", "asyncio"):
            assert anyio.run(turn, backend=backend) == ("Kept alive.", tone(0.1))

        async def close() -> None:  # from the loop whose connections they hold
            await turn()
            await speech_to_text.aclose()
            await text_to_speech.aclose()

        anyio.run(close)
        assert speech_to_text.client.is_closed() and text_to_speech.client.is_closed()


# The scripted server's audio side ------------------------------------------------------


async def test_each_endpoint_answers_from_its_own_script() -> None:
    async with ScriptedOpenAIServer(
        [text_reply("chat")], transcripts=["heard"], speech=[tone_reply(0.1)]
    ) as server:
        audio = [data async for data in tts(server).synthesize("Said.")]
        assert await stt(server).transcribe(speech_16k()) == "heard"
        with pytest.raises(STTError, match="HTTP 500"):  # beyond its script
            await stt(server, max_retries=0).transcribe(speech_16k())
    assert b"".join(audio) == tone(0.1)
    assert [r.path for r in server.requests] == ["/v1/audio/speech", "/v1/audio/transcriptions"]
    assert [r.path for r in server.unexpected] == ["/v1/audio/transcriptions"]
    assert server.replies  # the chat script was not touched


def test_a_reply_in_the_wrong_script_is_refused() -> None:
    with pytest.raises(TypeError, match=r"speech\[0\] is a TranscriptionReply"):
        ScriptedOpenAIServer([], speech=[TranscriptionReply("x")])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"replies\[0\] is a SpeechReply"):
        ScriptedOpenAIServer([SpeechReply([b"\x00\x00"])])  # type: ignore[list-item]
