"""`llmrtc voice`: one spoken turn from a WAV file (or typed text) to a WAV file, no browser.

The file goes through the same `VoiceLoop` a WebRTC session uses: pushed as 20 ms frames
(faster than real time: endpointing counts audio time), then microphone silence paced in real
time while the agent answers, as a quiet user would send. The loop's outbound frames are
collected, and what the agent said is written from its first to its last non-silent frame.

The voice stack (`llmrtc.voice`) is imported only when the command runs, so `llmrtc --help`
stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from llmrtc.agent import ToolCallFinished, ToolCallStarted, TurnCompleted, TurnFailed
from llmrtc.cli.bot import DEFAULT_SYSTEM_PROMPT
from llmrtc.cli.errors import CLIError
from llmrtc.cli.event_lines import event_line
from llmrtc.cli.logs import command_logging, log_file
from llmrtc.llm import LLMError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence

    from llmrtc.catalog import Toolkit
    from llmrtc.playbook import Playbook
    from llmrtc.tools import ToolRegistry
    from llmrtc.voice.events import LoopEvent
    from llmrtc.voice.frames import AudioFrame
    from llmrtc.voice.loop import VoiceLoop

__all__ = [
    "SPOKEN_GRACE",
    "TAIL_SILENCE",
    "add_voice_parser",
    "run_voice",
    "trim_silence",
    "voice_command",
]

VOICE_EPILOG = """\
The speech engines are the offline ones (Silero VAD, faster-whisper, piper) unless
OPENAI_API_KEY / OPENAI_BASE_URL is set (LLMRTC_SPEECH=offline|openai forces the choice).
The file is pushed as 20 ms frames faster than real time, then silence while the agent
answers; every utterance in it is a turn. Exit status 1 on any error (no speech heard, a
failed model, STT or TTS), with one line on stderr. Log lines go to LOG_FILE."""
_INTERRUPTED = 130  # the shell's status for a process ended by SIGINT

TAIL_SILENCE = 1.0
"""Seconds of silence pushed at full speed after the file, on top of the loop's
`end_of_speech_silence`, so speech running to the file's end is endpointed at once."""
SPOKEN_GRACE = 15.0
"""Seconds a finished turn's speakable text may take to start playing (TTS of its sentence)."""
_UNSPOKEN_GRACE = 2.0  # a turn with nothing speakable: only a filler could still start
_PADDING = 5  # 20 ms frames of silence kept around the reply in the written file


def add_voice_parser(commands: Any) -> None:
    """Add the `voice` subcommand to `commands` (an argparse subparsers object)."""
    voice = commands.add_parser(
        "voice",
        help="one spoken turn, from a WAV file (or --text) to a WAV file",
        description=(
            "One voice turn without a browser: the WAV goes through the same VoiceLoop a\n"
            "WebRTC session uses (VAD, STT, the model and its tools, TTS sentence by\n"
            "sentence). Prints the transcript, the tool calls and the reply, and writes\n"
            "the spoken reply to --out."
        ),
        epilog=VOICE_EPILOG.replace("LOG_FILE", str(log_file())),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    voice.add_argument(
        "bot",
        nargs="?",
        metavar="PLAYBOOK_OR_TOOLS",
        help="a playbook (.yaml/.json) or a Python tools file (.py); none: no tools",
    )
    said = voice.add_mutually_exclusive_group(required=True)
    said.add_argument(
        "--in", dest="input", metavar="FILE.wav", help="what the user says: 16-bit PCM WAV"
    )
    said.add_argument("--text", help="what the user types instead (a turn without STT)")
    voice.add_argument(
        "--out", metavar="FILE.wav", help="write the agent's spoken reply here (48 kHz mono)"
    )
    voice.add_argument(
        "--system", default=DEFAULT_SYSTEM_PROMPT, help="the system prompt (without a playbook)"
    )
    voice.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up when the reply has not finished playing after this long (default 120)",
    )
    voice.add_argument(
        "--verbose", action="store_true", help="show warnings and log lines on stderr too"
    )
    voice.set_defaults(handler=voice_command)


def voice_command(args: argparse.Namespace) -> int:
    """Run `llmrtc voice` with parsed `args`; the exit status.

    Raises:
        CLIError: a bad option value, a bot or `--in` file that cannot be loaded, engines
            that cannot be opened.
    """
    from llmrtc.cli.bot import load_target, run_with_mcp_tools
    from llmrtc.playbook import PlaybookError
    from llmrtc.voice.wav import read_wav

    with command_logging(args.verbose):
        if args.timeout <= 0:
            raise CLIError(f"--timeout must be a number of seconds > 0, got {args.timeout:g}")
        if args.text is not None and not args.text.strip():
            raise CLIError("--text needs some text to say")
        bot = load_target(args.bot)
        audio = None
        if args.input is not None:
            try:
                audio = read_wav(args.input)  # before any model loads: a bad file fails at once
            except (FileNotFoundError, IsADirectoryError, ValueError) as exc:
                raise CLIError(str(exc)) from exc
        try:
            return anyio.run(
                partial(
                    run_with_mcp_tools,
                    partial(run_voice, resource_limits=bot.resource_limits),
                    toolkits=bot.toolkits,
                ),
                args,
                bot.registry,
                bot.playbook,
                audio,
                bot.toolkits,
            )
        except KeyboardInterrupt:
            print()
            return _INTERRUPTED
        except PlaybookError as exc:  # e.g. a playbook whose tools file lacks a stage's tool
            raise CLIError(str(exc)) from exc


def trim_silence(frames: list[AudioFrame], *, padding: int = _PADDING) -> list[AudioFrame]:
    """`frames` from `padding` frames before the first non-silent one to `padding` after the
    last (`[]` when every frame is digital silence, which is what the loop sends while the
    agent is quiet)."""
    voiced = [i for i, frame in enumerate(frames) if frame.pcm.count(0) != len(frame.pcm)]
    if not voiced:
        return []
    return frames[max(0, voiced[0] - padding) : voiced[-1] + padding + 1]


@dataclass
class _Turns:
    """Follows the loop's events: prints the conversation, knows when every turn is over."""

    source: str
    pending: int = 0
    """Turns asked for (utterances ended, or the typed text) and not over yet."""
    input_done: bool = False
    heard_speech: bool = False
    speaking: bool = False
    finished_turns: int = 0
    waiting_for: str = "speech in the file"
    """What the turn waits for now (named when `--timeout` runs out)."""
    errors: list[str] = field(default_factory=list)
    done: anyio.Event = field(default_factory=anyio.Event)

    def say(self, line: str) -> None:
        print(line, flush=True)

    def error(self, message: str) -> None:
        self.errors.append(message)
        print(f"error: {message}", file=sys.stderr, flush=True)

    def turn_over(self) -> None:
        self.pending = max(0, self.pending - 1)
        self.speaking = False
        self.finished_turns += 1
        self.check_done()

    def check_done(self) -> None:
        if self.input_done and self.pending == 0:
            self.done.set()

    def input_finished(self) -> None:
        if not self.heard_speech and not self.pending:
            self.error(f"no speech detected in {self.source}")
        self.input_done = True
        self.check_done()

    async def follow(self, events: AsyncIterator[LoopEvent], group: anyio.abc.TaskGroup) -> None:
        """Print the conversation and count the turns until `events` ends."""
        from llmrtc.voice.events import (
            AgentSpeechEnded,
            AgentSpeechStarted,
            SpeechError,
            Transcript,
            UserSpeechEnded,
            UserSpeechStarted,
        )

        async for event in events:
            self._track(event)
            if isinstance(event, UserSpeechStarted):
                self.heard_speech = True
            elif isinstance(event, UserSpeechEnded):
                self.pending += 1
            elif isinstance(event, Transcript) and event.final:
                if event.text:
                    self.say(f"you: {event.text}")
                else:
                    self.error(f"the speech recognizer heard no words in {self.source}")
                    self.turn_over()
            elif (line := event_line(event)) is not None:
                self.say(line)
            elif isinstance(event, TurnFailed):
                self.error(f"the model failed: {event.message}")
            elif isinstance(event, SpeechError):
                self.error(f"{event.source.upper()} failed: {event.message}")
                group.start_soon(self._grace, self.finished_turns, True)
            elif isinstance(event, TurnCompleted):
                self._completed(event, group)
            elif isinstance(event, AgentSpeechStarted):
                self.speaking = True
            elif isinstance(event, AgentSpeechEnded):
                self.turn_over()

    def _track(self, event: LoopEvent) -> None:
        from llmrtc.voice.events import AgentSpeechStarted, Transcript, UserSpeechEnded

        if isinstance(event, UserSpeechEnded):
            self.waiting_for = "the transcript"
        elif isinstance(event, Transcript | ToolCallFinished):
            self.waiting_for = "the model's answer"
        elif isinstance(event, ToolCallStarted):
            self.waiting_for = f"the tool {event.call.name}"
        elif isinstance(event, TurnCompleted):
            self.waiting_for = "the reply's speech"
        elif isinstance(event, AgentSpeechStarted):
            self.waiting_for = "the reply to finish playing"

    def _completed(self, event: TurnCompleted, group: anyio.abc.TaskGroup) -> None:
        from llmrtc.voice.speakable import speakable

        self.say(f"agent: {event.text.strip() or '(nothing to say)'}")
        if event.stop_reason not in ("stop", "max_tool_rounds"):
            self.say(f"  [turn ended: {event.stop_reason}]")
        if not self.speaking:
            # The reply plays after the model is done; the turn is over once it was heard.
            group.start_soon(self._grace, self.finished_turns, bool(speakable(event.text)))

    async def _grace(self, turn: int, to_speak: bool) -> None:
        """End turn number `turn` if its reply has not started playing after a grace time
        (a reply with nothing speakable never does; one that should have, failed)."""
        await anyio.sleep(SPOKEN_GRACE if to_speak else _UNSPOKEN_GRACE)
        if self.finished_turns == turn and not self.speaking:
            if to_speak:
                self.error(f"the reply did not start playing within {SPOKEN_GRACE:g} s")
            self.turn_over()


async def _push_file(loop: VoiceLoop, audio: AudioFrame, turns: _Turns) -> None:
    """The file as 20 ms frames at full speed, a tail of silence, then real-time silence."""
    from llmrtc.voice.audio import mix_to_mono, split_frames
    from llmrtc.voice.frames import FRAME_DURATION, AudioFrame

    rate = audio.sample_rate
    for frame in split_frames(mix_to_mono(audio.pcm, audio.channels), rate):
        await loop.push_audio(frame)
    tail = TAIL_SILENCE + loop.config.end_of_speech_silence
    for _ in range(round(tail / FRAME_DURATION)):
        await loop.push_audio(AudioFrame.silence(FRAME_DURATION, rate))
    await anyio.sleep(0.05)  # let the event follower see what the file's frames decided
    turns.input_finished()
    # A quiet microphone while the agent answers, one frame per 20 ms against a fixed start.
    start = time.monotonic()
    sent = 0
    while True:
        await loop.push_audio(AudioFrame.silence(FRAME_DURATION, rate))
        sent += 1
        await anyio.sleep(max(0.0, start + sent * FRAME_DURATION - time.monotonic()))


async def _collect(frames: AsyncIterator[AudioFrame], into: list[AudioFrame]) -> None:
    async for frame in frames:
        into.append(frame)


async def run_voice(
    args: argparse.Namespace,
    registry: ToolRegistry | None,
    playbook: Playbook | None,
    audio: AudioFrame | None,
    toolkits: Sequence[Toolkit] = (),
    *,
    resource_limits: Mapping[str, int] | None = None,
) -> int:
    """Run one `llmrtc voice` turn (`audio` from `--in`, else `args.text`); the exit status.
    `toolkits`: the tools file's toolkits, which the playbook's stages may name;
    `resource_limits`: its `RESOURCE_LIMITS`."""
    from llmrtc import open_default_provider
    from llmrtc.cli.bot import build_handler
    from llmrtc.cli.terminal import model_progress
    from llmrtc.voice import VoiceLoop, open_default_speech
    from llmrtc.voice.frames import FRAME_DURATION

    async with contextlib.AsyncExitStack() as stack:
        try:
            async with model_progress() as progress:
                llm = await stack.enter_async_context(open_default_provider(progress=progress))
                speech = await stack.enter_async_context(
                    open_default_speech(progress=progress.speech)
                )
        except (LLMError, ImportError, RuntimeError, ValueError) as exc:
            # A missing package or model, a bad LLMRTC_SPEECH: the message says what to do.
            raise CLIError(str(exc)) from exc
        handler = build_handler(
            llm,
            registry,
            playbook,
            system_prompt=args.system,
            toolkits=toolkits,
            resource_limits=resource_limits,
        )
        if playbook is not None:
            print(f"[playbook {playbook.id}]", flush=True)
        turns = _Turns(args.input or "the typed text")
        frames: list[AudioFrame] = []
        async with VoiceLoop(handler, stt=speech.stt, tts=speech.tts, vad=speech.vad) as loop:
            events = loop.events()
            async with anyio.create_task_group() as group:
                group.start_soon(_collect, loop.audio_out(), frames)
                group.start_soon(turns.follow, events, group)
                if audio is not None:
                    group.start_soon(_push_file, loop, audio, turns)
                else:
                    turns.pending = 1
                    turns.waiting_for = "the model's answer"
                    turns.say(f"you: {args.text.strip()}")
                    await loop.send_text(args.text)
                    turns.input_finished()
                with anyio.move_on_after(args.timeout) as waited:
                    await turns.done.wait()
                if waited.cancelled_caught:
                    turns.error(
                        f"no complete reply within --timeout {args.timeout:g} s "
                        f"(still waiting for {turns.waiting_for})"
                    )
                await anyio.sleep(3 * FRAME_DURATION)  # the last frames reach the collector
                group.cancel_scope.cancel()
    return _write_reply(args, frames, turns)


def _write_reply(args: argparse.Namespace, frames: list[AudioFrame], turns: _Turns) -> int:
    """Write what the agent said to `--out`; the exit status (1 if anything failed)."""
    from llmrtc.voice.wav import write_wav

    spoken = trim_silence(frames)
    if args.out is not None:
        if spoken:
            write_wav(args.out, spoken)
            seconds = sum(frame.duration for frame in spoken)
            print(f"wrote {args.out} ({seconds:.1f} s)", flush=True)
        elif not turns.errors:
            turns.error(f"the agent said nothing: {args.out} not written")
    return 1 if turns.errors else 0
