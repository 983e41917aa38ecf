"""`llmrtc serve TARGET`: the WebRTC voice server with the web client.

TARGET is a playbook (.yaml/.yml/.json) or a Python tools file (.py). The command opens the
model and the speech engines once, serves the page and the WebSocket on one port, prints
`llmrtc serve: listening on http://HOST:PORT/ (open it in Chromium)` once it listens, and
stops on SIGTERM or Ctrl-C: no new sessions, live ones get `--shutdown-grace` seconds to end
(a second Ctrl-C stops at once). `--workers N` runs N such processes on one port
(`SO_REUSEPORT`), sharing a session store so a client may resume on any of them.

Hidden options (not in `--help`; for tests and for the worker processes of `--workers`):
  - `--fake-engines[=SCRIPT.json]`: for testing only. Speech is `llmrtc.testing`'s FakeVAD,
    FakeSTT and FakeTTS (a tone per word, which `RTCTestClient(..., tts=FakeTTS())` speaks
    and FakeSTT decodes), and the model is a `ScriptedLLM` answering from SCRIPT.json (a list
    of entries, each a text or a list of `{"call_id", "name", "arguments"}` tool calls), then
    "I heard you." for every later request; `--llm openai` still uses the OpenAI API. Starts
    in a fraction of a second.
  - `--worker-store PATH`: run as one worker of `--workers` (SO_REUSEPORT, the SQLite session
    store at PATH, stopped also when its stdin closes: the supervisor went away).

This module imports only argparse at load time: `llmrtc --help` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["SERVE_EPILOG", "add_serve_parser"]

SERVE_EPILOG = """\
The model: --llm auto uses OPENAI_API_KEY / OPENAI_BASE_URL when set (LLMRTC_MODEL names the
model), else the offline Qwen2.5-Coder model in this process; --llm offline and --llm openai
force the choice. Speech follows the same choice unless LLMRTC_SPEECH=offline|openai is set.
Each worker loads its own models; to share one model between workers, point them at one
OpenAI-compatible server with OPENAI_BASE_URL.

--otel console prints spans and metrics on stderr; --otel otlp sends them to an OpenTelemetry
collector (OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318; needs
pip install "llmrtc[otlp]").

The offline start takes about 10 s (about 22 s the first time, while the model is joined
into the cache); the model's load cannot show a live counter (it holds the interpreter), so
its line says what to expect and then how long it took. --workers N load N models at once.

SIGTERM or Ctrl-C: new sessions are refused with shutting_down, live ones get --shutdown-grace
seconds to end, then the server exits with status 0; during the start it stops once the model
load returns (status 0). After the first signal, Ctrl-C exits at once (130). What still runs 5 s
past the grace (a tool that ignores cancellation) is listed, tool calls first, and the process
exits with status 1; with --workers the supervisor kills a worker still running 10 s past the
grace. A worker that dies is started again and the session store is kept; one that exits 3
times in a row within 60 s of its start is not, the others serve on. A second --workers server
on a port in use is refused."""


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def _count(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _port(text: str) -> int:
    """An argparse type: a TCP port, 0-65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port 0-65535 (0: any free), got {text!r}")
    return value


def add_serve_parser(commands: Any) -> None:
    """Add the `serve` subcommand to `commands` (an argparse subparsers object)."""
    serve = commands.add_parser(
        "serve",
        help="serve a voice agent to the browser over WebRTC (open the printed URL)",
        description=(
            "Serve a voice agent over WebRTC: the web client at / and signalling at /ws on\n"
            "one port. Prints the URL to open in Chromium once it listens."
        ),
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "target",
        metavar="PLAYBOOK_OR_TOOLS",
        help="a playbook (.yaml/.json), e.g. playbooks/weather.yaml, or a Python tools file",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to listen on (default 127.0.0.1, which also makes ICE loopback-only)",
    )
    serve.add_argument(
        "--port", type=_port, default=8080, help="TCP port (default 8080; 0: any free port)"
    )
    serve.add_argument(
        "--workers",
        type=_count,
        default=1,
        metavar="N",
        help="processes sharing the port, each with its own --max-sessions (default 1)",
    )
    serve.add_argument(
        "--max-sessions",
        type=_count,
        default=10,
        metavar="N",
        help="live sessions per process; one more is refused with server_full (default 10)",
    )
    serve.add_argument(
        "--llm",
        choices=("auto", "offline", "openai"),
        default="auto",
        help="the model: the environment's API, else offline (auto, the default), or forced",
    )
    serve.add_argument(
        "--otel",
        choices=("console", "otlp"),
        help="OpenTelemetry spans and metrics: on stderr, or to an OTLP collector",
    )
    serve.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="warning",
        help="log lines on stderr from this level up (default warning)",
    )
    serve.add_argument(
        "--idle-timeout",
        type=_seconds,
        default=300.0,
        metavar="SECONDS",
        help="close a session after this long without the user (default 300)",
    )
    serve.add_argument(
        "--resume-ttl",
        type=_seconds,
        default=120.0,
        metavar="SECONDS",
        help="how long a vanished client can resume its session (default 120)",
    )
    serve.add_argument(
        "--shutdown-grace",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, how long live sessions get to end (default 30)",
    )
    # Hidden (see the module docstring): testing without models, and worker processes.
    serve.add_argument("--fake-engines", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    serve.add_argument("--worker-store", default=None, help=argparse.SUPPRESS)
    serve.set_defaults(handler=_cmd_serve)


def _cmd_serve(args: argparse.Namespace) -> int:
    from llmrtc.cli._serve_run import serve_command

    return serve_command(args)
