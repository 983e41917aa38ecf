"""The argparse types of the `llmrtc` options: a count, seconds and a port, one rule each.

A value outside its rule is a usage error (exit status 2) naming the option and the value.
Only argparse is imported: building the parser stays fast.
"""

from __future__ import annotations

import argparse
import math

__all__ = ["count", "port", "seconds"]


def count(text: str) -> int:
    """A whole number >= 1 (`--workers`, `--max-sessions`, `--limit`)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A finite number of seconds > 0 (`--idle-timeout`, `--shutdown-grace`, `mcp --timeout`)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    # `not value > 0` also refuses NaN; infinity is no duration a timer can wait for.
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be seconds > 0 (a finite number), got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port, 0-65535 (0: any free port)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port 0-65535 (0: any free), got {text!r}")
    return value
