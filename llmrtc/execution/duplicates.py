"""`Duplicates`: the executor's memory of recent calls of tools with `on_duplicate` set to
`"reuse"` or `"reject"`, so a repeated call (a voice model asking for the same booking again
after a barge-in) is recognised.

A call is a duplicate of an earlier one when both are in the same session, call the same tool
and have the same arguments once parsed and default-filled (compared as canonical JSON: key
order and whitespace never matter), while the earlier one runs or within `window` seconds
after it ended `ok`. The first such call *leads*: it runs, and its entry records how it ended.
An entry that ended otherwise (error, timeout, aborted, refused) is forgotten at once, so the
next call runs. Calls without a session id are never looked up.

A session resumed on another executor of this process that adopts its running background
calls takes the entries along (`adopt`): a booking still running, or made before the
reconnect, still answers its repeat after it.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import anyio
import pydantic_core

from llmrtc.tools.calls import ToolCallResult

__all__ = ["DuplicateEntry", "Duplicates", "duplicate_key"]

MAX_ENTRIES = 10_000
"""Finished entries kept at most (the oldest go first): memory stays bounded whatever the
window."""

# One encoder for every key: `json.dumps` with options builds a new one per call.
_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode

Key = tuple[str, str, str]

_SCALARS = frozenset({str, int, float, bool, type(None)})


def duplicate_key(session_id: str, tool_name: str, args: Any) -> Key:
    """The key two calls share when they are duplicates: the session, the tool and the parsed
    arguments as canonical JSON (a pydantic model, a dict, nested values: all the same)."""
    if type(args) is dict:
        for value in args.values():
            if type(value) not in _SCALARS:
                break
        else:
            # Flat arguments of JSON scalars, the common case: their sorted items' repr is as
            # canonical as JSON (1, 1.0, True and "1" stay apart) and costs half as much.
            return session_id, tool_name, repr(sorted(args.items()))
    plain = args if type(args) is dict else pydantic_core.to_jsonable_python(args, fallback=repr)
    try:
        return session_id, tool_name, _canonical(plain)
    except (TypeError, ValueError):  # values JSON cannot hold as they are (sets, bytes, …)
        return (
            session_id,
            tool_name,
            _canonical(pydantic_core.to_jsonable_python(plain, fallback=repr)),
        )


class DuplicateEntry:
    """One leading call: running, or ended (with its `ok` result, or forgotten)."""

    __slots__ = ("_done", "call_id", "ended", "ended_at", "key", "result", "table")

    def __init__(self, key: Key, call_id: str, table: Duplicates) -> None:
        self.key = key
        self.call_id = call_id
        self.table = table
        """The table it is in now (`adopt` moves it)."""
        self.result: ToolCallResult | None = None
        """Its `ok` result, once it ended so (None while running, or when it failed)."""
        self.ended = False
        self.ended_at = 0.0
        self._done: anyio.Event | None = None  # made by the first call that waits for it

    async def wait(self) -> None:
        """Return once the leading call ended (however; at once if it has)."""
        if self.ended:
            return
        if self._done is None:
            self._done = anyio.Event()
        await self._done.wait()


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
        self._running: dict[Key, DuplicateEntry] = {}
        self._ended: OrderedDict[Key, DuplicateEntry] = OrderedDict()  # ok, in ending order

    def __len__(self) -> int:
        return len(self._running) + len(self._ended)

    def find(self, key: Key) -> DuplicateEntry | None:
        """The entry a call with `key` duplicates: one running, or one that ended `ok` within
        the window; None when the call is no duplicate."""
        entry = self._running.get(key)
        if entry is not None:
            return entry
        entry = self._ended.get(key)
        if entry is None:
            return None
        if self._clock() - entry.ended_at <= self.window:
            return entry
        del self._ended[key]
        return None

    def lead(self, key: Key, call_id: str) -> DuplicateEntry:
        """Record the call `call_id` as the one later duplicates of `key` refer to."""
        self._ended.pop(key, None)
        entry = self._running[key] = DuplicateEntry(key, call_id, self)
        return entry

    def end(self, entry: DuplicateEntry, result: ToolCallResult) -> None:
        """The leading call of `entry` ended with `result`, in whichever table holds it now:
        an `ok` one answers duplicates for the window; any other is forgotten (the next call
        runs). Wakes the calls waiting."""
        entry.table._end(entry, result)

    def _end(self, entry: DuplicateEntry, result: ToolCallResult) -> None:
        key = entry.key
        if self._running.get(key) is entry:
            del self._running[key]
        now = entry.ended_at = self._clock()
        if result.status == "ok":
            entry.result = result
            ended = self._ended
            ended[key] = entry  # new here (`lead` took any older one out): it goes last
            if len(ended) > MAX_ENTRIES or not len(ended) % 64:
                # Oldest first: drop what the cap or the window no longer keeps (O(1) each,
                # every 64 endings; `find` drops an expired entry it meets anyway).
                while ended:
                    first = next(iter(ended.values()))
                    if len(ended) <= MAX_ENTRIES and now - first.ended_at <= self.window:
                        break
                    ended.popitem(last=False)
        entry.ended = True
        if entry._done is not None:
            entry._done.set()

    def adopt(self, other: Duplicates) -> None:
        """Take over `other`'s entries (its session resumed on this executor): its running
        calls end here, and its `ok` results answer repeats here."""
        if other is self:
            return
        for table, into in ((other._running, self._running), (other._ended, self._ended)):
            for key in list(table):
                entry = into[key] = table.pop(key)
                entry.table = self
