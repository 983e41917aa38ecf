"""How a command fails: `CLIError` (what `main` prints, and the exit status), and the short,
actionable texts it carries (no tracebacks through llmrtc itself)."""

from __future__ import annotations

import os
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from llmrtc.errors import LLMRTCError

if TYPE_CHECKING:
    from llmrtc.playbook import PlaybookError

__all__ = ["CLIError", "describe_tools_file_error", "playbook_failure", "shown_path"]


class CLIError(LLMRTCError):
    """A command cannot go on: `main` prints `error: MESSAGE` on stderr and exits with
    `status`. Raised wherever the reason is known, instead of printing and returning a status
    up through every caller."""

    def __init__(self, message: str, status: int = 1, *, prefix: str = "error: ") -> None:
        """`message`: what was wrong and what to do; `prefix`: "" for a text that carries its
        own heading (a playbook's findings)."""
        super().__init__(message)
        self.message = message
        self.status = status
        self.prefix = prefix

    @property
    def text(self) -> str:
        """What `main` prints on stderr."""
        return f"{self.prefix}{self.message}"


def playbook_failure(exc: PlaybookError, path: str) -> CLIError:
    """A playbook that cannot be used: every finding, then a count line (exit status 1)."""
    errors = sum(f.severity == "error" for f in exc.findings)
    count = f"{path}: {errors} errors, {len(exc.findings) - errors} warnings"
    return CLIError(f"{exc}\n{count}", prefix="")


_LOADER_FILE = str(Path(__file__).resolve().parents[1] / "tools" / "loader.py")


def shown_path(path: str | Path) -> str:
    """`path` relative to the working directory when it lies under it, else as given."""
    try:
        if Path(path).resolve().is_relative_to(Path.cwd()):
            return os.path.relpath(path)
    except (OSError, ValueError):
        pass
    return str(path)


def describe_tools_file_error(exc: BaseException) -> str:
    """What went wrong while importing a tools file, in a few lines: for a `SyntaxError` the
    file, line and column, the line itself and the message; for anything the file raised, the
    last line of the user's own code that ran (file, line, code) and the exception line."""
    if isinstance(exc, SyntaxError) and exc.filename:
        lines = [f"{shown_path(exc.filename)}:{exc.lineno}:{exc.offset or 0}: "]
        lines[0] += f"{type(exc).__name__}: {exc.msg}"
        if exc.text:
            code = exc.text.rstrip("\n")
            stripped = code.lstrip()
            lines.append(f"    {stripped}")
            if exc.offset:
                column = max(0, exc.offset - 1 - (len(code) - len(stripped)))
                lines.append("    " + " " * column + "^")
        return "\n".join(lines)
    # The frames after the loader's `exec_module`: the tools file's module code first, then
    # whatever it called. Show the deepest line of the tools file itself (the user's own line
    # that failed, even when the error came from a library it called), then the error.
    frames: list[traceback.FrameSummary] = list(traceback.extract_tb(exc.__traceback__))
    loader = [i for i, frame in enumerate(frames) if frame.filename == _LOADER_FILE]
    start = loader[-1] + 1 if loader else 0
    frames = [frame for frame in frames[start:] if not frame.filename.startswith("<")]
    user = [frame for frame in frames if frame.filename == frames[0].filename]
    exception_line = traceback.format_exception_only(type(exc), exc)[0].rstrip()
    if not user:
        return exception_line
    frame = user[-1]
    where = f"{shown_path(frame.filename)}:{frame.lineno}, in {frame.name}"
    code = f"\n    {frame.line.strip()}" if frame.line else ""
    return f"{where}{code}\n{exception_line}"
