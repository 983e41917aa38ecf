"""What the chat shows in a terminal: the `bot>` line, a thinking mark, tool and stage lines,
errors on stderr, and a progress bar while the offline model is prepared.

Decorations (the spinner, the progress bar, dim text) appear only on a terminal; piped output
gets plain lines, so a script or a test reads exactly the conversation.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import time
from collections.abc import AsyncGenerator
from typing import TextIO

import anyio

__all__ = ["ModelProgress", "Screen", "read_lines"]

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


class ModelProgress:
    """The `progress(stage, fraction)` callback of `open_default_provider`: a bar on a
    terminal, one plain line per stage otherwise. Called from any thread.

    Some stages report no fraction for many seconds (llama.cpp loading the model): run
    `animate()` beside the work so the seconds spent keep showing (on a terminal the line
    counts them; otherwise a `still` line every `line_every` seconds) instead of silence.
    """

    def __init__(
        self, err: TextIO | None = None, *, width: int = 24, line_every: float = 5.0
    ) -> None:
        """Draw on `err` (default stderr), the bar `width` characters wide; off a terminal,
        `animate()` repeats a stage's line every `line_every` seconds while it lasts."""
        self.err = err or sys.stderr
        self.tty = self.err.isatty()
        self.width = width
        self.line_every = line_every
        self._lock = threading.Lock()
        self._stage: str | None = None
        self._fraction: float | None = None
        self._stage_started = 0.0
        self._last_line = 0.0
        self._drawn = False
        self._finished = False

    def __call__(self, stage: str, fraction: float | None) -> None:
        """Show `stage` (e.g. "loading model") at `fraction` (0..1, or None if unknown)."""
        with self._lock:
            now = time.monotonic()
            if stage != self._stage:
                self._stage_started = now
                if not self.tty:
                    self.err.write(f"llmrtc: {stage}...\n")
                    self.err.flush()
                    self._last_line = now
            self._stage, self._fraction = stage, fraction
            if self.tty:
                self._draw(now)

    def tick(self) -> None:
        """Show that the current stage is still going (what `animate()` calls every second):
        on a terminal the line is redrawn with the seconds it has taken; otherwise a line
        `llmrtc: still STAGE (N s)` is written once `line_every` seconds passed since the last."""
        with self._lock:
            if self._stage is None or self._finished:
                return
            now = time.monotonic()
            if self.tty:
                self._draw(now)
            elif now - self._last_line >= self.line_every:
                done = "" if self._fraction is None else f" {self._fraction:.0%}"
                seconds = now - self._stage_started
                self.err.write(f"llmrtc: still {self._stage}{done} ({seconds:.0f} s)\n")
                self.err.flush()
                self._last_line = now

    async def animate(self, interval: float = 1.0) -> None:
        """Call `tick()` every `interval` seconds until `done()` (run it in a task group)."""
        while not self._finished:
            await anyio.sleep(interval)
            self.tick()

    def done(self) -> None:
        """Take the bar off the screen (the chat is about to start); `animate()` ends."""
        with self._lock:
            self._finished = True
            self._stage = None
            if self._drawn:
                self.err.write(_CLEAR_LINE)
                self.err.flush()
                self._drawn = False

    def _draw(self, now: float) -> None:
        stage, fraction = self._stage, self._fraction
        seconds = f"{now - self._stage_started:3.0f} s"
        if fraction is None:
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
