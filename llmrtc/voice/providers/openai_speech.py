"""OpenAI speech through the real `openai` client: `OpenAISTT` (the transcription endpoint)
and `OpenAITTS` (the speech endpoint, streamed as raw PCM), for OpenAI and any server that
speaks its audio API.

Environment (read when the matching argument is not given):
    OPENAI_API_KEY: the key (a server at an explicit `base_url` may need none).
    OPENAI_BASE_URL: the server, read by the `openai` client itself.
    LLMRTC_STT_MODEL: the transcription model (default `gpt-4o-mini-transcribe`).
    LLMRTC_TTS_MODEL: the speech model (default `gpt-4o-mini-tts`).
    LLMRTC_TTS_VOICE: the voice (default `alloy`).

Errors become `STTError` / `TTSError` with one line naming the HTTP status (or the connection
failure), the endpoint's URL, the model and what to check. The server's error body is never in
that message (it is logged at debug level): the message may reach a UI or a transcript.
"""

from __future__ import annotations

import io
import logging
import os
import wave
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Final, cast

import anyio
import anyio.lowlevel

from llmrtc.llm.errors import connection_errors
from llmrtc.voice.stt import STTError, hints_prompt
from llmrtc.voice.tts import TTSError

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = [
    "DEFAULT_STT_MODEL",
    "DEFAULT_TTS_MODEL",
    "DEFAULT_TTS_VOICE",
    "OpenAISTT",
    "OpenAITTS",
]

logger = logging.getLogger(__name__)

DEFAULT_STT_MODEL: Final = "gpt-4o-mini-transcribe"
DEFAULT_TTS_MODEL: Final = "gpt-4o-mini-tts"
DEFAULT_TTS_VOICE: Final = "alloy"

_STT_RATE: Final = 16_000
_TTS_RATE: Final = 24_000
"""`response_format="pcm"` is 24 kHz mono s16le without a header (OpenAI's API reference:
"Only a 24kHz sample rate is supported")."""
_MIN_SECONDS: Final = 0.1
"""OpenAI refuses shorter audio (HTTP 400 `audio_too_short`); such a blip holds no words."""

_ADVICE: Final = {
    400: "the server refused the request; check the audio and the options",
    401: "check OPENAI_API_KEY (or api_key=)",
    403: "check OPENAI_API_KEY and its permissions",
    404: "check the model name ({env}) and OPENAI_BASE_URL",
    429: "rate limited or out of quota; wait, or check your plan",
}


class _OpenAIAudio:
    """The client, its ownership and the error wording the two engines share."""

    def __init__(
        self,
        *,
        what: str,
        env: str,
        model: str,
        base_url: str | None,
        api_key: str | None,
        client: AsyncOpenAI | None,
        timeout: float,
        max_retries: int,
    ) -> None:
        import openai  # here, not at module import: `import llmrtc.voice` stays light

        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries!r}")
        if client is not None and (base_url is not None or api_key is not None):
            raise ValueError("pass either client= or base_url=/api_key=, not both")
        self._what = what
        self._env = env
        self.model = model
        self._owns_client = client is None
        if client is None:
            key = api_key or os.environ.get("OPENAI_API_KEY")
            if not key:
                if base_url is None and not os.environ.get("OPENAI_BASE_URL"):
                    raise ValueError(
                        f"no API key for OpenAI {what}: pass api_key=..., set OPENAI_API_KEY, "
                        "or give the base_url of a server that needs none"
                    )
                key = "not-needed"

            def new_client() -> AsyncOpenAI:
                # Our own httpx client: the openai client's default one closes itself from a
                # finaliser on whichever asyncio loop runs at that moment, which fails for
                # the connections of another, finished loop (see `_client`). Ours closes in
                # `aclose()`; a finished loop's connections are dropped with their client.
                return openai.AsyncOpenAI(
                    api_key=key,
                    base_url=base_url,
                    timeout=timeout,
                    max_retries=max_retries,
                    http_client=openai.DefaultAsyncHttpxClient(),
                )

            self._new_client = new_client
            client = new_client()
        limit = client.timeout  # a given client's own: seconds, an httpx Timeout, or None
        self.timeout: float | None = (
            limit if limit is None or isinstance(limit, int | float) else limit.read
        )
        """Seconds a request may wait for the server (None: no limit)."""
        self.client: AsyncOpenAI = client
        """The client of the event loop that used the engine last (see `_client`)."""
        self._client_loop: object = None
        self._errors: tuple[type[Exception], ...] = (openai.APIError, *connection_errors())
        self._timeout_error: type[Exception] = openai.APITimeoutError
        self._status_error: type[Exception] = openai.APIStatusError
        self._connection_error: type[Exception] = openai.APIConnectionError

    @property
    def base_url(self) -> str:
        """The API's URL, e.g. `https://api.openai.com/v1/`."""
        return str(self.client.base_url)

    def _client(self) -> AsyncOpenAI:
        """The client for the running event loop.

        An httpx connection pool's kept-alive connections belong to the event loop that
        opened them; a request from a later loop on one fails ("Event loop is closed"). So an
        engine shared for the whole process (`open_default_speech`) makes a new client of its
        own when another event loop uses it. A client passed in is the caller's to manage.
        """
        if not self._owns_client:
            return self.client
        loop = anyio.lowlevel.current_token().native_token
        if self._client_loop is None:
            self._client_loop = loop
        elif self._client_loop is not loop:
            # The old client's connections belong to a finished loop and cannot be closed
            # from this one: they are dropped with it.
            self.client = self._new_client()
            self._client_loop = loop
        return self.client

    async def aclose(self) -> None:
        """Close the HTTP connections of a client this engine made (a client passed in as
        `client=` belongs to the caller and stays open)."""
        if self._owns_client:
            await self.client.close()

    def _describe(self, exc: BaseException, endpoint: str) -> str:
        """One line: what failed, where, and what to check; never the server's error body."""
        url = self.base_url.rstrip("/") + endpoint
        where = f"OpenAI {self._what} (model {self.model!r}) at {url}"
        if isinstance(exc, self._status_error):
            status: int = getattr(exc, "status_code", 0)
            body = getattr(exc, "body", None)
            logger.debug("%s: HTTP %s, error body: %.300r", where, status, body)
            advice = _ADVICE.get(status, "the server failed; try again" if status >= 500 else "")
            advice = advice.format(env=self._env) or "the request was refused"
            request_id = getattr(exc, "request_id", None)
            suffix = f"; request id {request_id}" if request_id else ""
            return f"{where} failed: HTTP {status} ({advice}){suffix}"
        if isinstance(exc, self._timeout_error) or "Timeout" in type(exc).__name__:
            within = "in time" if self.timeout is None else f"within {self.timeout:g} s"
            return f"{where}: no answer {within}; try again, or check the server"
        if isinstance(exc, self._connection_error):
            return f"{where}: cannot connect; is the server running? Check OPENAI_BASE_URL"
        # A transport error while the answer streamed in, or an unexpected reply.
        return f"{where} failed: {type(exc).__name__} (the connection was cut or the reply was bad)"


class OpenAISTT(_OpenAIAudio):
    """Speech to text through OpenAI's transcription endpoint (`/audio/transcriptions`).

    Each utterance is wrapped in a 16 kHz mono WAV and uploaded; the final transcript comes
    back (no partials: the endpoint answers once). It is network I/O, so no worker pool:
    many sessions share one client and its connection pool. Cancelling `transcribe` (a
    cancel scope, a barge-in) closes the HTTP request.

    Example:
        stt = OpenAISTT()  # OPENAI_API_KEY, LLMRTC_STT_MODEL from the environment
        text = await stt.transcribe(pcm16k)
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        language: str | None = None,
        client: AsyncOpenAI | None = None,
        timeout: float = 30.0,
        max_retries: int = 1,
    ) -> None:
        """Create the engine (no request is made until `transcribe`).

        Args:
            model: Defaults to `LLMRTC_STT_MODEL`, else `gpt-4o-mini-transcribe`.
            base_url: An OpenAI-compatible server, e.g. `http://127.0.0.1:8000/v1`
                (default: `OPENAI_BASE_URL`, else OpenAI).
            api_key: Defaults to `OPENAI_API_KEY`; a server at a `base_url` may need none.
            language: The spoken language as ISO-639-1 (`"en"`), which helps accuracy and
                latency; `None` lets the model detect it.
            client: A ready `openai.AsyncOpenAI` (then give no base_url/api_key; its own
                timeout and retries apply).
            timeout: Seconds for one request.
            max_retries: Retries of a request that failed transiently (connection error,
                HTTP 408/409/429/5xx), by the `openai` client with its short backoff.

        Raises:
            ValueError: no API key and no server that needs none, or a bad option.
        """
        super().__init__(
            what="transcription",
            env="LLMRTC_STT_MODEL",
            model=model or os.environ.get("LLMRTC_STT_MODEL") or DEFAULT_STT_MODEL,
            base_url=base_url,
            api_key=api_key,
            client=client,
            timeout=timeout,
            max_retries=max_retries,
        )
        if language is not None and not language.strip():
            raise ValueError("language must be an ISO-639-1 code like 'en', or None")
        self.language = language

    def __repr__(self) -> str:
        return f"OpenAISTT(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def sample_rate(self) -> int:
        """16000: what the engine uploads (the loop resamples to it)."""
        return _STT_RATE

    @property
    def name(self) -> str:
        """`openai/<model>`, e.g. `openai/gpt-4o-mini-transcribe`."""
        return f"openai/{self.model}"

    async def transcribe(self, pcm: bytes, *, hints: Sequence[str] = ()) -> str:
        """The final transcript of `pcm` (mono s16le at 16 kHz), stripped; `""` for no words.

        Audio shorter than 0.1 s is not sent (OpenAI refuses it) and gives `""`. `hints` go
        as the endpoint's `prompt` (`hints_prompt`), which biases the model toward them.

        Raises:
            ValueError: `pcm` is not whole 16-bit samples (an odd byte count).
            TypeError: `hints` is not a sequence of strings.
            STTError: the request failed (one line: status or connection failure, URL, model).
        """
        prompt = hints_prompt(hints)
        if len(pcm) % 2:
            raise ValueError(
                f"pcm must be whole 16-bit samples (an even byte count), got {len(pcm)} bytes"
            )
        if len(pcm) // 2 < _MIN_SECONDS * _STT_RATE:
            return ""
        upload = ("audio.wav", _wav(pcm, _STT_RATE), "audio/wav")
        # Only what is set is sent: a compatible server may refuse a parameter it lacks. (The
        # client's overloads cannot type a keyword dict, hence `Any`.)
        create: Any = self._client().audio.transcriptions.create
        options: dict[str, str] = {}
        if self.language is not None:
            options["language"] = self.language
        if prompt is not None:
            options["prompt"] = prompt
        try:
            result = await create(model=self.model, file=upload, **options)
        except self._errors as exc:
            raise STTError(self._describe(exc, "/audio/transcriptions")) from exc
        text: str = result.text  # the JSON response format (the default) has `text`
        return text.strip()


class OpenAITTS(_OpenAIAudio):
    """Text to speech through OpenAI's speech endpoint (`/audio/speech`), streamed.

    The audio is asked for as raw PCM (24 kHz mono s16le) and yielded as the bytes arrive, in
    whole samples, so playout starts before the sentence is fully synthesised. Closing the
    iterator (barge-in) closes the HTTP response: the download stops at once.

    Example:
        tts = OpenAITTS(voice="coral")
        async with aclosing(tts.synthesize("Hello there.")) as chunks:
            async for pcm in chunks:  # 24 kHz mono s16le
                ...
    """

    def __init__(
        self,
        model: str | None = None,
        voice: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        timeout: float = 30.0,
        max_retries: int = 1,
    ) -> None:
        """Create the engine (no request is made until `synthesize` is iterated).

        Args:
            model: Defaults to `LLMRTC_TTS_MODEL`, else `gpt-4o-mini-tts`.
            voice: Defaults to `LLMRTC_TTS_VOICE`, else `alloy` (OpenAI's voices: alloy, ash,
                ballad, coral, echo, fable, onyx, nova, sage, shimmer, verse, ...).
            base_url: An OpenAI-compatible server (default: `OPENAI_BASE_URL`, else OpenAI).
            api_key: Defaults to `OPENAI_API_KEY`; a server at a `base_url` may need none.
            client: A ready `openai.AsyncOpenAI` (then give no base_url/api_key; its own
                timeout and retries apply).
            timeout: Seconds for the request, and at most between two pieces of audio.
            max_retries: Retries of a request that failed transiently before any audio came
                (connection error, HTTP 408/409/429/5xx), by the `openai` client.

        Raises:
            ValueError: no API key and no server that needs none, or a bad option.
        """
        super().__init__(
            what="speech",
            env="LLMRTC_TTS_MODEL",
            model=model or os.environ.get("LLMRTC_TTS_MODEL") or DEFAULT_TTS_MODEL,
            base_url=base_url,
            api_key=api_key,
            client=client,
            timeout=timeout,
            max_retries=max_retries,
        )
        self.voice = voice or os.environ.get("LLMRTC_TTS_VOICE") or DEFAULT_TTS_VOICE

    def __repr__(self) -> str:
        return f"OpenAITTS(model={self.model!r}, voice={self.voice!r}, base_url={self.base_url!r})"

    @property
    def sample_rate(self) -> int:
        """24000: the rate of OpenAI's raw PCM speech."""
        return _TTS_RATE

    @property
    def name(self) -> str:
        """`openai/<model>:<voice>`, e.g. `openai/gpt-4o-mini-tts:alloy`."""
        return f"openai/{self.model}:{self.voice}"

    async def synthesize(self, text: str) -> AsyncIterator[bytes]:
        """Stream `text` as mono s16le chunks at 24 kHz, each a whole number of samples, as
        the server sends them. Blank text yields nothing and sends no request.

        Raises:
            TTSError: the request or the download failed (raised from the iteration).
        """
        if not text.strip():
            return
        speech = self._client().audio.speech.with_streaming_response
        try:
            async with speech.create(
                model=self.model, voice=self.voice, input=text, response_format="pcm"
            ) as response:
                # An async generator (typed as a plain iterator): closed explicitly below.
                chunks = cast(AsyncGenerator[bytes, None], response.iter_bytes())
                carry = b""  # an odd byte waits for its partner in the next chunk
                try:
                    async for data in chunks:
                        data = carry + data
                        whole = len(data) - len(data) % 2
                        carry = data[whole:]
                        if whole:
                            yield data[:whole]
                finally:
                    # Also on a barge-in's close, under a cancelled scope: the connection
                    # must be closed, not left to a finaliser, or the download goes on.
                    with anyio.CancelScope(shield=True):
                        await chunks.aclose()
                        await response.close()
                if carry:
                    logger.debug("%s: dropped a trailing odd byte of audio", self.name)
        except self._errors as exc:
            raise TTSError(self._describe(exc, "/audio/speech")) from exc


def _wav(pcm: bytes, sample_rate: int) -> bytes:
    """`pcm` (mono s16le) in a WAV container, as the transcription endpoint wants a file."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm)
    return buffer.getvalue()
