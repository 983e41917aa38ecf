"""Late results: the final results of background calls (`ToolDefinition(background=True)`),
which land after their turn answered them `"running"`. `LateResults` takes them from the
executor once and hands each to both of its readers: the history (rendered by
`late_result_message` before the next model request) and whoever iterates `results()`.

How a late result is rendered, in every tool-call format: the call already has its one tool
message (the `"running"` answer), and a chat API accepts no second tool message for it (nor a
tool message anywhere but right after its assistant call), so the outcome goes into the history
as a `SystemMessage` naming the call id and the tool, with the result as JSON (the same text a
tool message would carry, cut to the turn's `max_tool_result_chars`). Natively (OpenAI chat
API) it is a `system` message after the call's tool messages, as a playbook's transition note
is; in the text and composed formats it is that same system message (the local model's chat
template renders a system message anywhere in the conversation). A system note, not a user
one: nothing that reads the user's words (tool routing and its grounding, a playbook's
keyword conditions, the history's trimming) mistakes it for something the user said.

Saved and resumed (`LateResults.snapshot` / `restore`, the `"background"` part of a handler
state): the calls still running (call id, tool, arguments), the executor they run on (its
`background_token`) and the results that landed but are not in the history yet. A restore in
the same process, while those calls live, adopts them: each lands on the new executor, once.
Anywhere else (another process, or the calls are gone) each running call becomes an `aborted`
late result (`MOVED_NOTE`); the saved landed results are delivered in both cases.
"""

from __future__ import annotations

import json
import logging
import math
import weakref
from collections import deque
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any, get_args

from llmrtc.agent.result_cap import cut_tool_result
from llmrtc.execution.background import find_background_calls
from llmrtc.execution.executor import ToolExecutor
from llmrtc.llm.messages import SystemMessage
from llmrtc.tools.calls import ToolCall, ToolCallResult, ToolCallStatus, to_json_content

__all__ = [
    "LATE_RESULT_NOTE",
    "MOVED_NOTE",
    "TELL_OUTCOME",
    "TELL_OUTCOME_AFTER",
    "LateResults",
    "SavedLateResults",
    "is_late_result_message",
    "late_result_message",
    "read_saved_late_results",
]

logger = logging.getLogger(__name__)

MOVED_NOTE = (
    "The session moved to another server while this call was running, and its outcome is "
    "unknown here: it may have completed. Tell the user so, and check before trying it again."
)
"""The error the model reads for a background call that was running when the session was
saved and could not be taken over where it resumed (status `aborted`). Not "it did not
finish": the process that ran it may still finish it (it keeps the calls of a session waiting
for a resume until `resume_ttl`), and a retry would then book twice."""

_READERS: weakref.WeakValueDictionary[str, LateResults] = weakref.WeakValueDictionary()
"""The live `LateResults` of this process by their executor's `background_token` (and by the
tokens of those whose calls they adopted)."""

_KEPT_FOR_READERS = 256
"""Late results `LateResults.results()` keeps for its readers at most (the oldest go first)."""

_FINAL: frozenset[str] = frozenset(get_args(ToolCallStatus)) - {"running"}

LATE_RESULT_NOTE = (
    "The background tool call {call_id} ({tool}), answered earlier as still running, has "
    "finished (status: {status}). Its result: {content}\n"
    "{ask}; do not call the tool again for it."
)
"""The text of a late result's message: `call_id`, `tool`, `status` and `content` (the
result as a tool message would carry it) and `ask` (`TELL_OUTCOME` or `TELL_OUTCOME_AFTER`)
are filled in."""
TELL_OUTCOME = "Tell the user the outcome"
"""What a late result asks in a turn of its own (an update turn)."""
TELL_OUTCOME_AFTER = (
    "Answer the user's last message first, then tell them this outcome in one sentence"
)
"""What a late result asks in a turn that answers the user's words: it comes after them (the
model answers what was said last), and a small model told only to tell the outcome answered
the outcome and dropped the user's question, or, the note before the words, ignored it
(Qwen2.5 1.5B: "Thanks, that's all" got "You're welcome!" and no booking)."""


def late_result_message(
    result: ToolCallResult, max_chars: int | None, *, after_user: bool = False
) -> SystemMessage:
    """The history message that tells the model the final result of a background call.

    Args:
        result: The call's final result (not `"running"`).
        max_chars: The most characters of the result shown (`TurnSettings.
            max_tool_result_chars`); None shows it whole.
        after_user: It goes into a turn that answers the user's words (see
            `TELL_OUTCOME_AFTER`); False: a turn of its own.
    """
    content = result.to_content()
    if max_chars is not None and len(content) > max_chars:
        content = cut_tool_result(result, max_chars).content
    return SystemMessage(
        LATE_RESULT_NOTE.format(
            call_id=result.call_id,
            tool=result.tool_name,
            status=result.status,
            content=content,
            ask=TELL_OUTCOME_AFTER if after_user else TELL_OUTCOME,
        )
    )


def is_late_result_message(message: object) -> bool:
    """Whether `message` is a late result's note (`late_result_message`)."""
    return isinstance(message, SystemMessage) and message.content.startswith(_NOTE_START)


_NOTE_START = LATE_RESULT_NOTE.split("{", 1)[0]


@dataclass(frozen=True, slots=True)
class SavedLateResults:
    """The `"background"` part of a handler state, checked (`read_saved_late_results`)."""

    executor: str
    """The `background_token` of the executor the running calls were started on."""
    running: tuple[ToolCall, ...]
    """The background calls that were running, oldest first."""
    landed: tuple[ToolCallResult, ...]
    """Final results that had landed and were not in the history yet, in landing order."""


def read_saved_late_results(saved: Any) -> SavedLateResults | None:
    """Check the `"background"` part of a handler state (`LateResults.snapshot()` output, or
    None for nothing) and read it.

    Raises:
        ValueError: saying which entry is malformed and what is expected.
    """
    where = "handler state 'background'"
    if saved is None:
        return None
    if not isinstance(saved, Mapping):
        raise ValueError(
            f"{where} must be a mapping with 'executor', 'running' and 'landed', or null; "
            f"got {type(saved).__name__}"
        )
    unknown = sorted(str(key) for key in saved if key not in ("executor", "running", "landed"))
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}; allowed: executor, running, landed")
    executor = saved.get("executor")
    if not isinstance(executor, str) or not executor:
        raise ValueError(f"{where} 'executor' must be a non-empty string (a background_token)")
    running, landed = saved.get("running", []), saved.get("landed", [])
    for key, value in (("running", running), ("landed", landed)):
        if not isinstance(value, list):
            raise ValueError(f"{where} {key!r} must be a list, got {type(value).__name__}")
    calls = tuple(_read_call(entry, f"{where} 'running'[{n}]") for n, entry in enumerate(running))
    results = tuple(_read_result(entry, f"{where} 'landed'[{n}]") for n, entry in enumerate(landed))
    return SavedLateResults(executor, calls, results)


def _read_call(entry: Any, where: str) -> ToolCall:
    if not isinstance(entry, Mapping) or set(entry) != {"call_id", "tool_name", "arguments"}:
        raise ValueError(f"{where} must be a mapping of call_id, tool_name and arguments")
    call_id, name, arguments = entry["call_id"], entry["tool_name"], entry["arguments"]
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise ValueError(f"{where}: call_id and tool_name must be non-empty strings")
    if not isinstance(arguments, dict | str):
        raise ValueError(f"{where}: arguments must be an object or a string")
    return ToolCall(call_id, name, arguments)


def _read_result(entry: Any, where: str) -> ToolCallResult:
    keys = {"call_id", "tool_name", "status", "result", "error", "duration_ms"}
    if not isinstance(entry, Mapping) or set(entry) != keys:
        raise ValueError(f"{where} must be a mapping of {', '.join(sorted(keys))}")
    call_id, name, status = entry["call_id"], entry["tool_name"], entry["status"]
    if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
        raise ValueError(f"{where}: call_id and tool_name must be non-empty strings")
    if status not in _FINAL:
        raise ValueError(f"{where}: status {status!r} is not one of {sorted(_FINAL)}")
    error, duration = entry["error"], entry["duration_ms"]
    if error is not None and not isinstance(error, str):
        raise ValueError(f"{where}: error must be a string or null")
    if (
        isinstance(duration, bool)
        or not isinstance(duration, int | float)
        or not math.isfinite(duration)
        or duration < 0
    ):
        raise ValueError(f"{where}: duration_ms must be a number >= 0")
    return ToolCallResult(call_id, name, status, entry["result"], error, float(duration))


def _saved_result(result: ToolCallResult) -> dict[str, Any]:
    """A final result as JSON-safe data: what the model reads of it (`to_content`) survives;
    the handler's own objects become their JSON."""
    value = json.loads(to_json_content(result.result)) if result.status == "ok" else None
    return {
        "call_id": result.call_id,
        "tool_name": result.tool_name,
        "status": result.status,
        "result": value,
        "error": result.error,
        "duration_ms": result.duration_ms,
    }


def _saved_call(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    if not isinstance(arguments, str):
        arguments = json.loads(to_json_content(dict(arguments)))
    return {"call_id": call.call_id, "tool_name": call.name, "arguments": arguments}


class LateResults:
    """The late results of one executor's background calls, each taken from the executor once
    and kept for two readers: `take_unheard()` (what the history has not got yet: the turn
    renders those before each model request, whether or not anyone iterates) and `results()`
    (a queue for the application: each result yielded once, in the order they landed)."""

    def __init__(self, executor: ToolExecutor) -> None:
        """Read the background results of `executor` (the only reader of its queue)."""
        self._executor = executor
        self._unheard: list[ToolCallResult] = []
        self._unyielded: deque[ToolCallResult] = deque(maxlen=_KEPT_FOR_READERS)
        self._warned = False
        _READERS[executor.background_token] = self

    def snapshot(self) -> dict[str, Any] | None:
        """The running background calls and the landed results not in the history yet, as
        JSON-safe data (the `"background"` part of a handler state); None when there are
        none. Nothing is taken: this reader goes on as before."""
        self._pull()
        running = self._executor.background_calls
        if not running and not self._unheard:
            return None
        return {
            "executor": self._executor.background_token,
            "running": [_saved_call(call) for call in running],
            "landed": [_saved_result(result) for result in self._unheard],
        }

    def restore(self, saved: SavedLateResults) -> None:
        """Take up a saved `snapshot()`: its landed results are delivered (history and
        `results()`), in their order; then each saved running call is adopted when its
        executor still lives in this process (it lands here, once; or its result, if it landed
        since the snapshot), else it becomes an `aborted` late result (`MOVED_NOTE`). The
        aborted ones are not reported to hooks: the process that ran the call reports its
        end when it stops it."""
        for result in saved.landed:
            self._add(result)
        token = saved.executor
        previous = _READERS.get(token) if find_background_calls(token) is not None else None
        for call in saved.running:
            if previous is not None and previous is not self:
                taken = previous._give(call.call_id)
                if taken is not None:  # it landed there after the snapshot
                    self._add(taken)
                    continue
            if self._executor.adopt_background_call(token, call.call_id):
                continue  # it lands here (or landed: `_pull` takes it)
            self._add(ToolCallResult(call.call_id, call.name, "aborted", None, MOVED_NOTE, 0.0))
        if saved.running:
            # A second resume from the same saved state finds the calls here.
            _READERS[token] = self

    def _give(self, call_id: str) -> ToolCallResult | None:
        """Hand over the result of `call_id` this reader took but did not deliver everywhere
        yet (another reader adopts the call)."""
        self._pull()
        found = None
        for result in [*self._unheard, *self._unyielded]:
            if result.call_id == call_id:
                found = result
        if found is not None:
            self._unheard = [r for r in self._unheard if r.call_id != call_id]
            self._unyielded = deque(r for r in self._unyielded if r.call_id != call_id)
        return found

    def _add(self, result: ToolCallResult) -> None:
        self._unheard.append(result)
        # Nobody iterates `results()` (a text app): the model still gets every result; only
        # this queue forgets the oldest, not to grow for the runner's whole life.
        if len(self._unyielded) == _KEPT_FOR_READERS and not self._warned:
            self._warned = True
            logger.warning(
                "%d late results were never read from late_results(); the oldest are "
                "dropped from that queue (the model got them all)",
                _KEPT_FOR_READERS,
            )
        self._unyielded.append(result)

    def _pull(self) -> None:
        for result in self._executor.take_background_results():
            self._add(result)

    def take_unheard(self) -> list[ToolCallResult]:
        """The results that landed and are not in the history yet (in the order they landed);
        taking them means the caller puts them there now."""
        self._pull()
        taken, self._unheard = self._unheard, []
        return taken

    def has_unheard(self) -> bool:
        """Whether a result landed that the history has not got yet."""
        self._pull()
        return bool(self._unheard)

    async def results(self) -> AsyncGenerator[ToolCallResult, None]:
        """Yield each late result as it lands (also those that landed before); never ends."""
        while True:
            self._pull()
            while self._unyielded:
                yield self._unyielded.popleft()
            # Wait for the next landing, whoever takes it (a turn starting takes it into the
            # history first: `_pull` then finds it in this queue); no await between the check
            # above and this wait, so none is missed.
            await self._executor.background_landing()
