"""`Duplicates`: the executor's memory of recent calls of tools with `on_duplicate` set to
`"reuse"` or `"reject"`, so a repeated call (a voice model asking for the same booking again
after a barge-in) is recognised.

A call is a duplicate of an earlier one when both are in the same session, call the same tool
and have the same arguments once parsed and default-filled (compared as canonical JSON: key
order and whitespace never matter), while the earlier one runs or within `window` seconds
after it ended `ok`. The first such call *leads*: it runs, and its entry records how it ended.
An entry that ended otherwise (error, timeout, aborted, refused) is forgotten at once, so the
next call runs. Calls without a session id are never looked up.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anyio
import pydantic_core

from llmrtc.tools.calls import ToolCallResult

__all__ = ["DuplicateEntry", "Duplicates", "duplicate_key"]

MAX_ENTRIES = 10_000
"""Finished entries kept at most (the oldest go first): memory stays bounded whatever the
window."""


def duplicate_key(session_id: str, tool_name: str, args: Any) -> tuple[str, str, str]:
    """The key two calls share when they are duplicates: the session, the tool and the parsed
    arguments as canonical JSON (a pydantic model, a dict, nested values: all the same)."""
    plain = pydantic_core.to_jsonable_python(args, fallback=repr)
    return session_id, tool_name, json.dumps(plain, sort_keys=True, separators=(",", ":"))


class DuplicateEntry:
    """One leading call: running (`result` None) or ended `ok` at `ended_at`."""

    __slots__ = ("_done", "call_id", "ended", "ended_at", "key", "result")

    def __init__(self, key: tuple[str, str, str], call_id: str) -> None:
        self.key = key
        self.call_id = call_id
        self.result: ToolCallResult | None = None
        """Its `ok` result, once it ended so (None while running, or when it failed)."""
        self.ended = False
        self.ended_at = 0.0
        self._done: anyio.Event | None = None  # made by the first call that waits for it

    async def wait(self) -> None:
        """Return once the leading call ended (however)."""
        if self._done is None:
            self._done = anyio.Event()
        await self._done.wait()

    def _end(self) -> None:
        self.ended = True
        if self._done is not None:
            self._done.set()


class Duplicates:
    """The leading calls of one executor, by duplicate key.

    Args:
        window: Seconds an `ok` result still answers a duplicate after its call ended.
        clock: The monotonic clock (tests pass their own).
    """

    def __init__(self, window: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        """Start with no calls remembered."""
        self.window = window
        self._clock = clock
        self._entries: dict[tuple[str, str, str], DuplicateEntry] = {}

    def find(self, key: tuple[str, str, str]) -> DuplicateEntry | None:
        """The entry a call with `key` duplicates: one running, or one that ended `ok` within
        the window; None when the call is no duplicate."""
        entry = self._entries.get(key)
        if entry is None or not entry.ended:
            return entry
        if self._clock() - entry.ended_at <= self.window:
            return entry
        del self._entries[key]
        return None

    def lead(self, key: tuple[str, str, str], call_id: str) -> DuplicateEntry:
        """Record the call `call_id` as the one later duplicates of `key` refer to."""
        entry = self._entries[key] = DuplicateEntry(key, call_id)
        return entry

    def end(self, entry: DuplicateEntry, result: ToolCallResult) -> None:
        """The leading call of `entry` ended with `result`: an `ok` one answers duplicates for
        the window; any other is forgotten (the next call runs). Wakes the calls waiting."""
        entries = self._entries
        if result.status == "ok":
            entry.result = result
        if entries.get(entry.key) is entry:
            del entries[entry.key]
            if result.status == "ok":
                entry.ended_at = now = self._clock()
                entries[entry.key] = entry  # re-inserted: the dict stays in ending order
                self._purge(now)
        entry._end()

    def _purge(self, now: float) -> None:
        """Drop expired entries and the oldest beyond `MAX_ENTRIES` (ended ones are in ending
        order, after any running ones inserted before them)."""
        entries = self._entries
        if len(entries) <= MAX_ENTRIES and len(entries) % 64:
            return  # amortised: a full pass only every 64 insertions or when over the cap
        excess = len(entries) - MAX_ENTRIES
        for key, entry in list(entries.items()):
            if entry.result is None:
                continue
            if excess > 0 or now - entry.ended_at > self.window:
                del entries[key]
                excess -= 1
            else:
                break
