"""`llmrtc voice`: one spoken turn from a WAV file (or text) to a WAV file. Only argparse is
imported here at load time, so `llmrtc --help` stays fast; the turn itself is `cli/voice.py`."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import Any

from llmrtc.cli.bot import DEFAULT_SYSTEM_PROMPT

__all__ = ["add_voice_parser"]

VOICE_EPILOG = """\
The speech engines are the offline ones (Silero VAD, faster-whisper, piper) unless
OPENAI_API_KEY / OPENAI_BASE_URL is set (LLMRTC_SPEECH=offline|openai forces the choice).
The file is pushed as 20 ms frames faster than real time, then silence while the agent
answers; every utterance in it is a turn. Exit status 1 on any error (no speech heard, a
failed model, STT or TTS), with one line on stderr. Log lines go to LOG_FILE."""


def add_voice_parser(commands: Any) -> None:
    """Add the `voice` subcommand to `commands` (an argparse subparsers object)."""
    from llmrtc.cli import log_file

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
    voice.set_defaults(handler=_cmd_voice)


def _cmd_voice(args: argparse.Namespace) -> int:
    from llmrtc.cli import _chat_logging

    with _chat_logging(args.verbose):
        return _voice_turn(args)


def _voice_turn(args: argparse.Namespace) -> int:
    import anyio

    from llmrtc.cli import _error, _load_bot
    from llmrtc.cli.bot import run_with_mcp_tools
    from llmrtc.cli.voice import run_voice
    from llmrtc.playbook import PlaybookError
    from llmrtc.voice.wav import read_wav

    if args.timeout <= 0:
        return _error(f"--timeout must be a number of seconds > 0, got {args.timeout:g}")
    if args.text is not None and not args.text.strip():
        return _error("--text needs some text to say")
    bot = args.bot
    is_tools = bot is not None and Path(bot).suffix == ".py"
    loaded = _load_bot(None if is_tools else bot, bot if is_tools else None)
    if isinstance(loaded, int):
        return loaded
    playbook, registry, toolkits = loaded
    audio = None
    if args.input is not None:
        try:
            audio = read_wav(args.input)  # before any model loads: a bad file fails at once
        except (FileNotFoundError, IsADirectoryError, ValueError) as exc:
            return _error(str(exc))
    try:
        return anyio.run(
            partial(run_with_mcp_tools, run_voice, toolkits=toolkits),
            args,
            registry,
            playbook,
            audio,
            toolkits,
        )
    except KeyboardInterrupt:
        print()
        return 130
    except PlaybookError as exc:  # e.g. a playbook whose tools file lacks a stage's tool
        return _error(str(exc))
