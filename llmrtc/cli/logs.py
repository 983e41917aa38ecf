"""Where the commands' log lines go: the chat's log file, or stderr for `llmrtc serve`.

This is the one place the library's own root logger (`logging.getLogger("llmrtc")`) is
configured by name: a command decides what its user sees, the library never does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["command_logging", "log_file", "serve_logging"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_file() -> Path:
    """Where `llmrtc chat` writes warnings and log lines: `~/.cache/llmrtc/llmrtc.log`
    (`$XDG_CACHE_HOME/llmrtc/llmrtc.log` when that is set)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "llmrtc" / "llmrtc.log"


@contextlib.contextmanager
def command_logging(verbose: bool) -> Iterator[None]:
    """While a conversation runs (`chat`, `voice`), warnings and log lines go to `log_file()`
    (and, with `verbose`, to stderr too), never between the lines of the conversation. Undone
    afterwards, so `main()` called in-process (tests, embedding) leaves the caller's logging
    as it was."""
    # Any handler on the root logger keeps library warnings (and logging's last-resort stderr
    # printer) out of the conversation; `warnings.warn` goes the same way.
    root = logging.getLogger()
    # The library's own root logger, by its name on purpose: its INFO lines go to the file.
    library = logging.getLogger("llmrtc")
    saved = (root.level, library.level)
    formatter = logging.Formatter(_FORMAT)
    handlers: list[logging.Handler] = []
    try:
        log_file().parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_file(), encoding="utf-8", delay=True))
    except OSError:
        handlers.append(logging.NullHandler())
    if verbose:
        handlers.append(logging.StreamHandler(sys.stderr))
    for handler in handlers:
        handler.setFormatter(formatter)
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    library.setLevel(logging.INFO)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.setLevel(saved[0])
        library.setLevel(saved[1])
        for handler in handlers:
            root.removeHandler(handler)
            handler.close()


def serve_logging(level: str, *, worker: bool) -> None:
    """`llmrtc serve`'s log lines on stderr from `--log-level` up (a worker's are prefixed
    with its pid, so the lines of several workers on one terminal can be told apart)."""
    prefix = f"[worker {os.getpid()}] " if worker else ""
    logging.basicConfig(level=level.upper(), stream=sys.stderr, format=f"{prefix}{_FORMAT}")
