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

The command loads the bot, then runs one serving process (`serve_process`) or, with
`--workers N`, the supervisor of N of them (`supervisor`). This module imports only argparse
at load time: `llmrtc --help` stays fast.
"""

from __future__ import annotations

import argparse
from typing import Any

from llmrtc.cli.arguments import count, port, seconds

__all__ = ["SERVE_EPILOG", "add_serve_parser", "serve_command"]

SERVE_EPILOG = """\
The model: --llm auto uses OPENAI_API_KEY / OPENAI_BASE_URL when set (LLMRTC_MODEL names the
model), else the offline Qwen2.5-Coder model in this process; --llm offline and --llm openai
force the choice. Speech follows the same choice unless LLMRTC_SPEECH=offline|openai is set.
Each worker loads its own models; to share one model between workers, point them at one
OpenAI-compatible server with OPENAI_BASE_URL.

--otel console prints spans and metrics on stderr; --otel otlp sends them to an OpenTelemetry
collector (OTEL_EXPORTER_OTLP_ENDPOINT, default http://localhost:4318; needs
pip install "llmrtc[otlp]").

A tools file whose tools hold resources (@tool(resources=("crm",))) sets their limits at module
level, RESOURCE_LIMITS = {"crm": 2}; a limit caps the calls of all sessions of a process (with
--workers N, of each worker).

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
        "--port", type=port, default=8080, help="TCP port (default 8080; 0: any free port)"
    )
    serve.add_argument(
        "--workers",
        type=count,
        default=1,
        metavar="N",
        help="processes sharing the port, each with its own --max-sessions (default 1)",
    )
    serve.add_argument(
        "--max-sessions",
        type=count,
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
        type=seconds,
        default=300.0,
        metavar="SECONDS",
        help="close a session after this long without the user (default 300)",
    )
    serve.add_argument(
        "--resume-ttl",
        type=seconds,
        default=120.0,
        metavar="SECONDS",
        help="how long a vanished client can resume its session (default 120)",
    )
    serve.add_argument(
        "--shutdown-grace",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM or Ctrl-C, how long live sessions get to end (default 30)",
    )
    serve.add_argument(
        "--approvals",
        choices=("app", "client"),
        default="app",
        help="who approves calls of tools with needs_approval: app (the default; without an "
        "approver of its own a tools file's calls are denied) or client (the web page asks the "
        "user: Approve / Deny)",
    )
    # Hidden (see the module docstring): testing without models, and worker processes.
    serve.add_argument("--fake-engines", nargs="?", const="", default=None, help=argparse.SUPPRESS)
    serve.add_argument("--worker-store", default=None, help=argparse.SUPPRESS)
    serve.set_defaults(handler=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    """Run `llmrtc serve` with parsed `args`; the exit status.

    Raises:
        CLIError: the playbook or tools file cannot be loaded; with `--workers`, what every
            worker would fail on (no SO_REUSEPORT, `--llm openai` without a key, a port in use).
    """
    import anyio

    from llmrtc.cli.bot import load_target

    bot = load_target(args.target)  # checked once here, before any worker starts
    if args.workers > 1 and args.worker_store is None:
        from llmrtc.cli.supervisor import supervise

        return anyio.run(supervise, args)
    from llmrtc.cli.serve_process import serve_process

    return serve_process(args, bot)
