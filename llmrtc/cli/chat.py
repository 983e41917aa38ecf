"""`llmrtc chat`: the terminal conversation, its Ctrl-C handling and what it shows."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import aclosing
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from llmrtc.abort import AbortController
from llmrtc.agent import (
    AgentEvent,
    BackgroundHandler,
    StageChanged,
    TextDelta,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnHandler,
)
from llmrtc.cli.bot import DEFAULT_SYSTEM_PROMPT
from llmrtc.cli.errors import CLIError
from llmrtc.cli.event_lines import event_line
from llmrtc.cli.logs import command_logging, log_file
from llmrtc.cli.terminal import Screen, model_progress, read_lines
from llmrtc.execution.approval import Approval, approvals
from llmrtc.llm import LLMError, OpenAIProvider
from llmrtc.telemetry._masking import mask_content, sensitive_values

if TYPE_CHECKING:
    from llmrtc.catalog.toolkits import Toolkit
    from llmrtc.playbook import Playbook
    from llmrtc.tools import ToolCall, ToolContext, ToolRegistry

__all__ = ["add_chat_parser", "chat_command", "run_chat"]

CHAT_EPILOG = """\
In the chat: Ctrl-C stops the answer being written (as a barge-in would: tools it started
are cancelled and get an aborted result);
Ctrl-C at the prompt, Ctrl-D or /quit ends the chat. A model or server failure ends only the
turn (one error line on stderr) and the next question works; a model API that cannot be
reached at all is reported before the first prompt, with exit status 1. A playbook that
reaches a terminal stage ends the chat (exit status 0). Warnings and log lines go to LOG_FILE,
not between the lines of the conversation (--verbose shows them on stderr too)."""

_PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy")
_INTERRUPTED = 130  # the shell's status for a process ended by SIGINT


def add_chat_parser(commands: Any) -> None:
    """Add the `chat` subcommand to `commands` (an argparse subparsers object)."""
    chat = commands.add_parser(
        "chat",
        help="chat in the terminal (OPENAI_API_KEY/OPENAI_BASE_URL, else the offline model)",
        description="Chat with the model in the terminal, with tools and optionally a playbook.",
        epilog=CHAT_EPILOG.replace("LOG_FILE", str(log_file())),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    chat.add_argument(
        "playbook", nargs="?", help="a playbook (.yaml/.json) to run, e.g. playbooks/support.yaml"
    )
    chat.add_argument(
        "--tools",
        help="a Python file defining the tools the bot may call (and RESOURCE_LIMITS = "
        '{"crm": 2} when they hold resources)',
    )
    chat.add_argument(
        "--system", default=DEFAULT_SYSTEM_PROMPT, help="the system prompt (without a playbook)"
    )
    chat.add_argument(
        "--verbose", action="store_true", help="show warnings and log lines on stderr too"
    )
    chat.set_defaults(handler=chat_command)


def chat_command(args: argparse.Namespace) -> int:
    """Run `llmrtc chat` with parsed `args`; the exit status.

    Raises:
        CLIError: the playbook or tools cannot be loaded (or its MCP tools do not fit it).
    """
    from llmrtc.cli.bot import load_bot, run_with_mcp_tools
    from llmrtc.playbook import PlaybookError

    with command_logging(args.verbose):
        bot = load_bot(args.playbook, args.tools)
        try:
            return anyio.run(
                partial(
                    run_with_mcp_tools,
                    partial(run_chat, resource_limits=bot.resource_limits),
                    toolkits=bot.toolkits,
                ),
                args,
                bot.registry,
                bot.playbook,
                bot.toolkits,
            )
        except KeyboardInterrupt:  # only where SIGINT cannot be received as a signal
            print()
            return _INTERRUPTED
        except PlaybookError as exc:  # e.g. a playbook whose tools file lacks a stage's tool
            raise CLIError(str(exc)) from exc


class _Chat:
    """One `llmrtc chat` session: what runs now decides what Ctrl-C does."""

    def __init__(
        self,
        args: argparse.Namespace,
        registry: ToolRegistry | None,
        playbook: Playbook | None,
        toolkits: Sequence[Toolkit] = (),
        resource_limits: Mapping[str, int] | None = None,
    ) -> None:
        self.args = args
        self.registry = registry
        self.playbook = playbook
        self.toolkits = tuple(toolkits)
        self.resource_limits = resource_limits
        self.screen = Screen()
        self.interactive = sys.stdin.isatty()
        self.turn: AbortController | None = None
        """The running turn's controller: Ctrl-C aborts it (like a barge-in)."""
        self.exit_status = 0
        self.prompted = False
        """Whether the chat got as far as its first prompt (Ctrl-C before that: status 130)."""
        self.scope = anyio.CancelScope()
        self.turns = anyio.Lock()
        """Held by the turn running: a user's and an update turn never run at once."""
        self.waiting = False
        """Waiting for the user's next line."""

    def interrupt(self) -> None:
        """Ctrl-C: stop the answer being written, or end the chat when none is."""
        if self.turn is not None:
            self.turn.abort("interrupted by the user (Ctrl-C)")
            return
        self.screen.end_turn()
        self.screen.write("\n")
        if not self.prompted:
            self.exit_status = _INTERRUPTED  # still preparing: the user gave up waiting
        self.scope.cancel()

    async def watch_interrupts(self, signals: AsyncIterator[int]) -> None:
        """Deliver SIGINT to `interrupt` (instead of a `KeyboardInterrupt` that would end the
        whole chat from wherever the code happened to be)."""
        async for _ in signals:
            self.interrupt()

    async def converse(self) -> None:
        """Open the model, then answer lines until end of input, /quit or Ctrl-C."""
        from llmrtc import open_default_provider

        async with contextlib.AsyncExitStack() as stack:
            try:
                async with model_progress() as progress:
                    llm = await stack.enter_async_context(open_default_provider(progress=progress))
            except (LLMError, ImportError, RuntimeError) as exc:
                # The model could not be prepared (a missing package, a bad model file, a
                # server that did not start): its message says what to do.
                self.screen.error(f"error: {exc}")
                self.exit_status = 1
                return
            problem = await _unreachable(llm)
            if problem is not None:
                self.screen.error(f"error: {problem}")
                self.exit_status = 1
                return
            await self._talk(llm)

    async def _talk(self, llm: OpenAIProvider) -> None:
        runner = self._runner(llm)
        say = self.screen.write
        if self.interactive:
            tools = len(self.registry) if self.registry is not None else 0
            count = f"{tools} tool" + ("" if tools == 1 else "s")
            say(f"llmrtc chat with {llm.model} ({count}). Ctrl-C stops an answer; ")
            say("Ctrl-D or /quit ends.\n")
        async with aclosing(read_lines()) as lines, anyio.create_task_group() as group:
            if isinstance(runner, BackgroundHandler):
                group.start_soon(self._tell_late_results, runner)
            with approvals(partial(self._approve, lines)):
                await self._converse(runner, lines)
            group.cancel_scope.cancel()

    async def _converse(self, runner: TurnHandler, lines: AsyncIterator[str]) -> None:
        say = self.screen.write
        while True:
            if self.interactive:
                say("you> ")
            self.prompted = True
            self.waiting = True
            line = await anext(lines, None)
            self.waiting = False
            if line is None:
                if self.interactive:
                    say("\n")  # Ctrl-D leaves the cursor after the prompt
                break
            text = line.strip()
            if text in ("/quit", "/exit"):
                break
            async with self.turns:
                ended = bool(text) and await self._turn(runner, runner.run_turn, text)
            if ended:
                self.screen.line("[the conversation has ended]")
                break

    async def _approve(
        self, lines: AsyncIterator[str], call: ToolCall, ctx: ToolContext
    ) -> Approval:
        """A tool needs approval (`needs_approval`): ask on the terminal and take the next
        line as the answer (`y` or `yes` approves; anything else denies). While the prompt is
        waiting for the user's next message (a background update turn), the line is not ours
        to take: the call is denied."""
        if self.waiting:
            return Approval(False, "no one was there to approve it")
        fields = ctx.sensitive_fields
        arguments = mask_content(call.arguments, fields, sensitive_values(call.arguments, fields))
        self.screen.line(f"  [approve {call.name} {arguments}? y/N]")
        if self.interactive:
            self.screen.write("approve> ")
        line: str | None = None
        with ctx.abort_signal.cancel_scope():  # Ctrl-C stops the turn, and the question
            line = await anext(lines, None)
        if line is not None and line.strip().lower() in ("y", "yes"):
            return Approval(True)
        return Approval(False, "the user said no")

    async def _tell_late_results(self, runner: BackgroundHandler) -> None:
        """A background call's result landed: the agent tells it in an update turn at once
        (while the chat waits for a line; after the turn running otherwise)."""
        async for _ in runner.late_results():
            async with self.turns:
                if not getattr(runner, "late_results_waiting", True):
                    continue  # the turn that just ran carried it to the model
                if self.waiting and self.interactive:
                    self.screen.write("\n")  # off the prompt
                await self._turn(runner, lambda _, **kw: runner.run_update_turn(**kw), None)
                if self.waiting and self.interactive:
                    self.screen.write("you> ")

    def _runner(self, llm: OpenAIProvider) -> TurnHandler:
        from llmrtc import PlaybookOrchestrator
        from llmrtc.cli.bot import build_handler

        handler = build_handler(
            llm,
            self.registry,
            self.playbook,
            system_prompt=self.args.system,
            toolkits=self.toolkits,
            resource_limits=self.resource_limits,
        )
        if self.playbook is not None and isinstance(handler, PlaybookOrchestrator):
            self.screen.line(
                f"[playbook {self.playbook.id}: stage {handler.engine.current_stage.id}]"
            )
        return handler

    async def _turn(
        self, runner: TurnHandler, run: Callable[..., AsyncIterator[AgentEvent]], text: str | None
    ) -> bool:
        """Run one turn (`run(text, abort_signal=...)`) and show it; True when the
        conversation has ended."""
        screen = self.screen
        ended = False
        self.turn = controller = AbortController()
        screen.thinking()
        try:
            async for event in run(text, abort_signal=controller.signal):
                if isinstance(event, TextDelta):
                    screen.text(event.text)
                elif (line := event_line(event)) is not None:
                    screen.line(line)
                    if isinstance(event, StageChanged):
                        ended = ended or event.conversation_ended
                    if not isinstance(event, ToolCallStarted):
                        screen.thinking()  # the tool is done: the model works on
                elif isinstance(event, TurnFailed):
                    screen.error(f"  [error: {event.message}]")
                elif isinstance(event, TurnCompleted):
                    if event.stop_reason == "aborted":
                        screen.line("  [stopped]")
                    screen.end_turn()
        except LLMError as exc:
            # A model or server failure ends this turn only (the history stays valid).
            screen.error(f"  [error: {exc}]")
        except Exception as exc:
            # The openai client's own errors, should a provider let one through.
            if not _is_api_error(exc):
                raise
            screen.error(f"  [error: {type(exc).__name__}: {exc}]")
        finally:
            self.turn = None
            screen.end_turn()
        return ended


def _is_api_error(exc: BaseException) -> bool:
    import openai

    return isinstance(exc, openai.APIError)


@contextlib.contextmanager
def _sigint_receiver() -> Iterator[AsyncIterator[int] | None]:
    try:
        receiver = anyio.open_signal_receiver(signal.SIGINT)
        signals = receiver.__enter__()
    except (NotImplementedError, ValueError, RuntimeError):  # no signals here (Windows, thread)
        yield None
        return
    try:
        yield signals
    finally:
        receiver.__exit__(None, None, None)


async def _unreachable(llm: OpenAIProvider) -> str | None:
    """Why the model API cannot be reached (one line: what, where, what to do), or None.

    Only a TCP connect to the API's host: it costs no tokens and consumes no request, and
    turns "nothing answers there" into one clear line before the first prompt. The offline
    model (in this process) and APIs behind a proxy are not probed.
    """
    if llm.provider_name == "llmrtc.local":
        return None
    if not (os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY")):
        return None
    if any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return None
    url = str(llm.client.base_url)
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with anyio.fail_after(10):
            stream = await anyio.connect_tcp(host, port)
        await stream.aclose()
    except (OSError, TimeoutError) as exc:
        # anyio sums up failed attempts as "All connection attempts failed"; the first
        # attempt's own error ("Connection refused", a DNS failure) says more.
        cause = exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
        reason = cause.strerror or str(cause)  # a DNS failure: "Name or service not known"
        if cause.errno and cause.errno > 0:  # asyncio's text only repeats the address
            reason = os.strerror(cause.errno)
        if isinstance(exc, TimeoutError):
            reason = "no answer in 10 s"
        return (
            f"cannot reach the model API at {url.rstrip('/')} ({reason}): start the server, "
            "or fix OPENAI_BASE_URL (unset it and OPENAI_API_KEY to use the offline model)"
        )
    return None


async def run_chat(
    args: argparse.Namespace,
    registry: ToolRegistry | None,
    playbook: Playbook | None,
    toolkits: Sequence[Toolkit] = (),
    *,
    resource_limits: Mapping[str, int] | None = None,
) -> int:
    """Run `llmrtc chat` until the user leaves; returns the exit status. `toolkits`: what
    the playbook's stages may name by key; `resource_limits`: the tools file's
    `RESOURCE_LIMITS`."""
    chat = _Chat(args, registry, playbook, toolkits, resource_limits)
    # The handler is in place before the model is opened: Ctrl-C while it loads quits cleanly.
    with _sigint_receiver() as signals:
        async with anyio.create_task_group() as group:
            if signals is not None:
                group.start_soon(chat.watch_interrupts, signals)
            if chat.screen.tty:
                group.start_soon(chat.screen.animate)
            with chat.scope:
                await chat.converse()
            group.cancel_scope.cancel()
    return chat.exit_status
