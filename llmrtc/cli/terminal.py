"""What the chat shows in a terminal: the `bot>` line, a thinking mark, tool and stage lines,
errors on stderr, and a progress bar while the offline model is prepared.

Decorations (the spinner, the progress bar, dim text) appear only on a terminal; piped output
gets plain lines, so a script or a test reads exactly the conversation.
"""

from __future__ import annotations

import math
import os
import stat
import sys
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Final, TextIO

import anyio

__all__ = [
    "LOOP_BLOCKING_STAGES",
    "ModelProgress",
    "Screen",
    "model_load_seconds",
    "model_progress",
    "read_lines",
]

_SPINNER_UNICODE = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_SPINNER_ASCII = "|/-\\"
_DIM = "\033[2m"
_RESET = "\033[0m"
_CLEAR_LINE = "\r\033[K"


def _can_encode(stream: TextIO, text: str) -> bool:
    try:
        text.encode(stream.encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


class Screen:
    """The conversation as printed: one `bot>` line per stretch of answer text.

    `bot>` is written only when text follows it; on a terminal a spinner after `bot>` shows the
    model is thinking and is erased when text, a tool line or the end of the turn arrives.
    """

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        """Print to `out` (default stdout) and `err` (default stderr)."""
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.tty = self.out.isatty()
        unicode = _can_encode(self.out, _SPINNER_UNICODE)
        self._frames = _SPINNER_UNICODE if unicode else _SPINNER_ASCII
        self._frame = 0
        self._line_open = False  # "bot> ..." written, no newline yet
        self._thinking = False  # the spinner is the last thing on the line
        self._held = ""  # trailing whitespace of the answer, written only if text follows

    def write(self, text: str) -> None:
        """Write and flush (the conversation must appear as it happens)."""
        self.out.write(text)
        self.out.flush()

    def thinking(self) -> None:
        """The model is working: on a terminal, show `bot> ` and a spinner."""
        if not self.tty or self._thinking or self._line_open:
            return  # no mark in the middle of an answer: its text shows the model is working
        self._open_line()
        self.write(self._frames[self._frame])
        self._thinking = True

    async def animate(self) -> None:
        """Turn the spinner while it is shown (run it in the chat's task group)."""
        while True:
            await anyio.sleep(0.12)
            if self._thinking:
                self._frame = (self._frame + 1) % len(self._frames)
                self.write("\b" + self._frames[self._frame])

    def text(self, text: str) -> None:
        """A piece of the answer: after `bot> ` (written now if this line has none yet).

        Whitespace at the ends of a stretch of answer is not shown (models often end the text
        before a tool call with blank lines): trailing whitespace is held back until more text
        follows on the same line.
        """
        if not self._line_open:
            text = text.lstrip()
        text = self._held + text
        visible = text.rstrip()
        self._held = text[len(visible) :]
        if not visible:
            return
        self._stop_thinking(keep_prefix=True)
        self._open_line()
        self.write(visible)

    def line(self, text: str) -> None:
        """A line of its own (a tool call, a stage change) between stretches of answer."""
        self._close_line()
        self.write(self._dim(text) + "\n")

    def error(self, text: str) -> None:
        """One short line on stderr (a failed turn, a model that cannot be reached)."""
        self._close_line()
        self.err.write((self._dim(text) if self.err.isatty() else text) + "\n")
        self.err.flush()

    def end_turn(self) -> None:
        """The turn is over: end its line."""
        self._close_line()

    def _dim(self, text: str) -> str:
        return f"{_DIM}{text}{_RESET}" if self.tty else text

    def _open_line(self) -> None:
        if not self._line_open:
            self.write("bot> ")
            self._line_open = True

    def _stop_thinking(self, *, keep_prefix: bool) -> None:
        if not self._thinking:
            return
        self._thinking = False
        if keep_prefix:
            self.write("\b \b")
        else:  # the line held only "bot> " and the spinner: take both back
            self.write(_CLEAR_LINE)
            self._line_open = False

    def _close_line(self) -> None:
        self._held = ""
        self._stop_thinking(keep_prefix=False)
        if self._line_open:
            self.write("\n")
            self._line_open = False


LOOP_BLOCKING_STAGES: Final = frozenset({"loading model"})
"""The model's stages during which the event loop cannot run: llama.cpp loading the model
(`xllamacpp.Server(params)`) holds the GIL until it returns, so no counter can tick and no
signal is handled meanwhile. Such a stage is shown once, with what to expect, then the time it
took - never as a live counter that would freeze and then jump."""

# Measured with `llmrtc serve playbooks/weather.yaml` on the project's 2-core machines (other
# test runs beside it): the 1.5B (1.1 GB) loaded in 3.6-5.2 s from a warm page cache, 5 s
# right after joining it; so about 4.5 s per GB, rounded up.
_LOAD_SECONDS_PER_GB = 4.5


def model_load_seconds() -> int:
    """About how long llama.cpp takes to load the offline model (`LLMRTC_MODEL`, default the
    1.5B) when nothing else loads at the same time, in whole seconds."""
    from llmrtc.llm.local.weights import LOCAL_MODELS

    spec = LOCAL_MODELS.get(os.environ.get("LLMRTC_MODEL") or "1.5b", LOCAL_MODELS["1.5b"])
    return max(1, math.ceil(spec.size_bytes / 1e9 * _LOAD_SECONDS_PER_GB))


class ModelProgress:
    """The `progress(stage, fraction)` callback of `open_default_provider`: a bar on a
    terminal, one plain line per stage otherwise. Called from any thread.

    Some stages report no fraction for many seconds: run `animate()` beside the work so the
    seconds spent keep showing (on a terminal the line counts them; otherwise a `still` line
    every `line_every` seconds) instead of silence. A stage in `blocking` stops the event loop
    itself (`LOOP_BLOCKING_STAGES`), so nothing could tick: it is shown once with its expected
    seconds (`blocking[stage]`, None: unknown), and when it ends, a line says how long it took.
    `model_progress()` sets all of this up.
    """

    def __init__(
        self,
        err: TextIO | None = None,
        *,
        width: int = 24,
        line_every: float = 5.0,
        blocking: Mapping[str, float | None] | None = None,
    ) -> None:
        """Draw on `err` (default stderr), the bar `width` characters wide; off a terminal,
        `animate()` repeats a stage's line every `line_every` seconds while it lasts.
        `blocking`: the stages that block the event loop, with their expected seconds."""
        self.err = err or sys.stderr
        self.tty = self.err.isatty()
        self.width = width
        self.line_every = line_every
        self.blocking: Mapping[str, float | None] = dict(blocking or {})
        self._lock = threading.Lock()
        self._stage: str | None = None
        self._engine = ""  # "speech" for the speech engines' stages; "" for the model's
        self._fraction: float | None = None
        self._stage_started = 0.0
        self._last_line = 0.0
        self._drawn = False
        self._finished = False

    def __call__(self, stage: str, fraction: float | None) -> None:
        """Show the model's `stage` (e.g. "loading model") at `fraction` (0..1, or None)."""
        self._report("", stage, fraction)

    def speech(self, stage: str, fraction: float | None) -> None:
        """The same for the speech engines (their "loading model" is Whisper's, shown as
        `speech: loading model`): the `progress` callback of `open_default_speech`."""
        self._report("speech", stage, fraction)

    def _report(self, engine: str, stage: str, fraction: float | None) -> None:
        with self._lock:
            if self._finished:
                return
            now = time.monotonic()
            if stage != self._stage or engine != self._engine:
                self._end_stage(now)
                self._stage, self._engine, self._stage_started = stage, engine, now
                if not self.tty:
                    self._line(f"{self._name()}{self._expectation()}...")
                    self._last_line = now
            self._fraction = fraction
            if self.tty:
                self._draw(now)

    def tick(self) -> None:
        """Show that the current stage is still going (what `animate()` calls every second):
        on a terminal the line is redrawn with the seconds it has taken; otherwise a line
        `llmrtc: still STAGE (N s)` is written once `line_every` seconds passed since the last.
        A stage that blocks the event loop is not ticked (see the class docstring)."""
        with self._lock:
            if self._stage is None or self._finished or self._blocks():
                return
            now = time.monotonic()
            if self.tty:
                self._draw(now)
            elif now - self._last_line >= self.line_every:
                done = "" if self._fraction is None else f" {self._fraction:.0%}"
                seconds = now - self._stage_started
                prefix = f"{self._engine}: " if self._engine else ""
                self._line(f"{prefix}still {self._stage}{done} ({seconds:.0f} s)")
                self._last_line = now

    async def animate(self, interval: float = 1.0) -> None:
        """Call `tick()` every `interval` seconds until `done()` (run it in a task group)."""
        while not self._finished:
            await anyio.sleep(interval)
            self.tick()

    def done(self) -> None:
        """Take the bar off the screen (the chat is about to start); `animate()` ends."""
        with self._lock:
            if self._finished:
                return
            self._end_stage(time.monotonic())
            self._finished = True
            self._stage = None
            if self._drawn:
                self.err.write(_CLEAR_LINE)
                self.err.flush()
                self._drawn = False

    def _name(self) -> str:
        return f"{self._engine}: {self._stage}" if self._engine else str(self._stage)

    def _blocks(self) -> bool:
        return not self._engine and self._stage in self.blocking

    def _expectation(self) -> str:
        if not self._blocks():
            return ""
        seconds = self.blocking[str(self._stage)]
        return "" if seconds is None else f" (about {seconds:g} s)"

    def _end_stage(self, now: float) -> None:
        """The current stage is over: for one that blocked the loop, say how long it took."""
        if self._stage is not None and self._blocks():
            if self._drawn:
                self.err.write(_CLEAR_LINE)
                self._drawn = False
            self._line(f"{self._name()} took {now - self._stage_started:.0f} s")

    def _line(self, text: str) -> None:
        self.err.write(f"{text}\n" if self.tty else f"llmrtc: {text}\n")
        self.err.flush()

    def _draw(self, now: float) -> None:
        stage, fraction = self._name(), self._fraction
        seconds = f"{now - self._stage_started:3.0f} s"
        if self._blocks():
            bar = f"{stage}{self._expectation()}..."  # no counter: it could not tick
        elif fraction is None:
            bar = f"{stage}... {seconds}"
        else:
            filled = round(max(0.0, min(1.0, fraction)) * self.width)
            bar = (
                f"{stage:<16} [{'#' * filled}{'-' * (self.width - filled)}] {fraction:4.0%}"
                f" {seconds}"
            )
        self.err.write(f"{_CLEAR_LINE}{bar}")
        self.err.flush()
        self._drawn = True


@asynccontextmanager
async def model_progress(
    err: TextIO | None = None, *, estimate: bool = True
) -> AsyncIterator[ModelProgress]:
    """Show the progress of loading the model and the speech engines while the block runs:
    a `ModelProgress` on `err` (default stderr) with `animate()` running beside the block,
    `done()` when it ends. The offline model's load, which blocks the event loop, is shown
    with `model_load_seconds()` (`estimate`; False where that figure would mislead, e.g.
    several processes loading at once) and then the time it took.

    Pass `progress` as `open_default_provider(progress=...)` and `progress.speech` as
    `open_default_speech(progress=...)`.
    """
    blocking = {
        stage: (model_load_seconds() if estimate else None) for stage in LOOP_BLOCKING_STAGES
    }
    progress = ModelProgress(err, blocking=blocking)
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(progress.animate)
            try:
                yield progress
            finally:
                progress.done()
                group.cancel_scope.cancel()  # animate() may be asleep: do not wait for it
    except BaseExceptionGroup as raised:
        # The block's own error (a missing package...), not wrapped: callers catch it by type.
        if len(raised.exceptions) == 1:
            raise raised.exceptions[0] from None
        raise


async def read_lines(fd: int | None = None) -> AsyncGenerator[str, None]:
    """The lines typed or piped into `fd` (default stdin), without a worker thread.

    A thread blocked in `readline()` cannot be cancelled and would keep the process alive after
    Ctrl-C at the prompt; waiting for the descriptor to become readable can be. Yields lines
    without their newline; ends at end of input.
    """
    fd = sys.stdin.fileno() if fd is None else fd
    regular_file = stat.S_ISREG(os.fstat(fd).st_mode)  # always readable; epoll refuses them
    buffer = b""
    while True:
        while b"\n" not in buffer:
            if not regular_file:
                await anyio.wait_readable(fd)
            data = os.read(fd, 65536)
            if not data:
                if buffer:
                    yield buffer.decode(errors="replace")
                return
            buffer += data
        line, _, buffer = buffer.partition(b"\n")
        yield line.decode(errors="replace").rstrip("\r")
