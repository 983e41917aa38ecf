"""`TurnHandler`: the one protocol a voice loop (or a chat CLI) talks to; `ResumableHandler`:
one whose state can be saved and brought back on a new connection; `HintingHandler`: one that
says what it expects to hear, so speech recognition can listen for it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

from llmrtc.abort import AbortSignal
from llmrtc.agent.events import AgentEvent
from llmrtc.agent.history import ConversationHistory
from llmrtc.agent.late_results import SavedLateResults, read_saved_late_results
from llmrtc.agent.preemption import Preemption
from llmrtc.llm.messages import AssistantMessage, ToolMessage
from llmrtc.tools.calls import ToolCallResult
from llmrtc.tools.definition import ToolDefinition

__all__ = [
    "BackgroundHandler",
    "HintingHandler",
    "PreemptingHandler",
    "ResumableHandler",
    "TurnHandler",
    "WarmableHandler",
    "read_handler_state",
    "replace_messages",
    "tool_speech_hints",
]


@runtime_checkable
class TurnHandler(Protocol):
    """Something that answers turns: `TurnRunner` (one prompt, one tool set) and
    `PlaybookOrchestrator` (stages) both are.

    Contract of `run_turn` and `run_timeout_turn`:
      - they yield `AgentEvent`s as things happen, and `TurnCompleted` last, once;
      - a model or server failure does not raise: the turn yields `TurnFailed`, then a short
        spoken-style apology as `TextDelta`, and ends with `TurnCompleted(stop_reason="error")`;
        the history stays valid and the next turn works;
      - an abort (barge-in) or leaving the `async for` early ends the turn with
        `stop_reason="aborted"`; every started tool call still gets its result;
      - a turn that would end with nothing said ends with something to say (see `TurnRunner`).

    Example:
        async def reply(handler: TurnHandler, text: str) -> None:
            async for event in handler.run_turn(text, abort_signal=barge_in.signal):
                if isinstance(event, TextDelta):
                    speak(event.text)
    """

    @property
    def history(self) -> ConversationHistory:
        """The conversation so far (valid for chat APIs between turns)."""
        ...

    def run_turn(
        self, user_text: str | None, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Answer `user_text` (None: a turn without a user message, the agent speaks up)."""
        ...

    def next_deadline(self) -> float | None:
        """When `run_timeout_turn` is due, as a `time.monotonic()` value; None for never. It
        moves with every turn (it measures the user's silence): ask again after each one."""
        ...

    def run_timeout_turn(
        self, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[AgentEvent]:
        """The turn the deadline stands for (e.g. a stage's silence timeout: the agent speaks
        up). Yields nothing at all when no deadline is set (`next_deadline()` is None)."""
        ...


@runtime_checkable
class BackgroundHandler(TurnHandler, Protocol):
    """A `TurnHandler` whose tools may run in the background (`ToolDefinition(background=
    True)`): their final results land after their turn, as late results. A voice loop reads
    `late_results()` and, once the line is quiet, runs `run_update_turn()` so the agent tells
    the user; a text application calls them itself. `TurnRunner` and `PlaybookOrchestrator`
    are. A handler without these methods simply has no late results to tell."""

    def late_results(self) -> AsyncIterator[ToolCallResult]:
        """Each final result of a background call as it lands (a queue: each yielded once,
        also one that landed before iteration). The model gets it before its next request
        whether or not anyone iterates."""
        ...

    def run_update_turn(
        self, *, abort_signal: AbortSignal | None = None
    ) -> AsyncIterator[AgentEvent]:
        """A turn with no new user message whose model request carries the late results that
        landed (the agent tells the user); yields nothing when none is waiting."""
        ...

    async def cancel_call(self, call_id: str) -> ToolCallResult | None:
        """Stop the running background call `call_id`; its one final result (None: no such
        call runs)."""
        ...

    async def aclose(self) -> None:
        """The session ended for good (not one waiting for a resume): stop every running
        background call, each with its one final result (`aborted`), and return once all have
        landed. Idempotent."""
        ...


@runtime_checkable
class ResumableHandler(TurnHandler, Protocol):
    """A `TurnHandler` whose conversation can be saved and resumed elsewhere (another
    connection, another worker process). `TurnRunner` and `PlaybookOrchestrator` are.

    The state is a JSON-safe dict: `{"history": ConversationHistory.to_dict(), "playbook":
    PlaybookEngine.snapshot() or None, "background": LateResults.snapshot() or None}` (the
    background calls running and the late results not in the history yet: see
    `llmrtc.agent.late_results`). A WebRTC server saves it when a client vanishes and gives it
    to a new handler from the same factory when the client resumes. A handler without these
    methods resumes with a fresh state.

    Example:
        state = json.loads(json.dumps(handler.snapshot()))
        again = make_handler()              # the same factory, a new handler
        again.restore(state)                # before its first turn
    """

    def snapshot(self) -> dict[str, Any]:
        """The conversation's state as a JSON-safe dict (between turns)."""
        ...

    def restore(self, state: Mapping[str, Any]) -> None:
        """Bring back a `snapshot()` of a handler from the same factory, before the first turn.

        Raises:
            ValueError: the state is malformed or of another playbook (the message says what
                is wrong); the handler is left as it was.
            RuntimeError: this handler already ran a turn.
        """
        ...


@runtime_checkable
class HintingHandler(TurnHandler, Protocol):
    """A `TurnHandler` that says what the user is likely to say next: a voice loop passes
    `speech_hints()` to its STT (`STT.transcribe(pcm, hints=...)`) at each utterance, so
    words on the recogniser's decision boundary ("Oslo" or "Oswald") tip toward the expected
    one. `TurnRunner` (from its tools) and `PlaybookOrchestrator` (from the current stage)
    are.

    Example:
        class Shop(TurnRunner):
            def speech_hints(self) -> list[str]:
                return [*super().speech_hints(), "refund", "order number"]
    """

    def speech_hints(self) -> Sequence[str]:
        """Words and short phrases expected now, most telling first (asked per utterance)."""
        ...


@runtime_checkable
class PreemptingHandler(TurnHandler, Protocol):
    """A `TurnHandler` that can start a turn's first model request before the turn
    (preemptive generation): a voice loop with `VoiceConfig.preemptive_generation` calls
    `preempt(text)` when the user pauses, runs the returned `Preemption`, and passes it to
    `run_turn(text, preemption=...)` if the user said nothing more (else discards it).
    `TurnRunner` and `PlaybookOrchestrator` are."""

    def preempt(self, user_text: str) -> Preemption | None:
        """The early first request of a turn on `user_text` (None: none to start)."""
        ...

    def run_turn(
        self,
        user_text: str | None,
        *,
        abort_signal: AbortSignal | None = None,
        preemption: Preemption | None = None,
    ) -> AsyncIterator[AgentEvent]:
        """`TurnHandler.run_turn`, taking the early answer when it is still the right one."""
        ...


@runtime_checkable
class WarmableHandler(TurnHandler, Protocol):
    """A `TurnHandler` that can send its first prompt ahead of the first turn, so a model
    server with a prompt cache (`CompatProfile.prompt_cache`) has it read already.
    `TurnRunner` and `PlaybookOrchestrator` are; `llmrtc serve` warms one at start."""

    async def warm(self) -> None:
        """Send the system prompt and tools once (a 1-token answer, discarded)."""
        ...


_NAME_WORDS: Final = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NOT_SPOKEN: Final = frozenset(
    [
        "a",
        "an",
        "and",
        "api",
        "by",
        "do",
        "fetch",
        "for",
        "from",
        "get",
        "id",
        "in",
        "is",
        "lookup",
        "look",
        "of",
        "on",
        "or",
        "run",
        "set",
        "the",
        "to",
        "tool",
        "up",
        "with",
    ]
)
"""Parts of tool names that are programming verbs or glue, not words a caller says."""
_QUOTED: Final = re.compile(r'"([^"\n]{1,40})"')
_MAX_HINT_WORDS: Final = 4
"""Longer strings (a free-form example sentence, a description) are not hints."""


def tool_speech_hints(definitions: Iterable[ToolDefinition]) -> list[str]:
    """Words a user of these tools is likely to say: each tool name split into its words
    ("lookupWeather" → "weather", "get_order_status" → "order", "status"; programming verbs
    such as get/lookup dropped), then every string `enum`, `const` and `examples` value of the
    parameters at any depth ("celsius"), and the quoted examples in their descriptions
    (`City name, e.g. "Tokyo".` → "Tokyo"), in order, without repeats (any case).

    Example:
        tool_speech_hints(runner.tool_definitions())   # ["weather", "celsius", "fahrenheit"]
    """
    hints: list[str] = []
    seen: set[str] = set()

    def add(text: str) -> None:
        text = " ".join(text.replace("_", " ").split())
        if text and len(text.split()) <= _MAX_HINT_WORDS and text.casefold() not in seen:
            seen.add(text.casefold())
            hints.append(text)

    schemas = []
    for definition in definitions:
        for word in _NAME_WORDS.findall(definition.name):
            if word.lower() not in _NOT_SPOKEN and not word.isdigit():
                add(word.lower())
        schemas.append(definition.parameters)
    for schema in schemas:
        for value in _schema_strings(schema):
            add(value)
    return hints


def _schema_strings(schema: object) -> Iterable[str]:
    """The string `enum`/`const`/`examples` values and the quoted phrases of the descriptions
    anywhere in a JSON Schema, in order."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            if key in ("enum", "examples") and isinstance(value, list):
                yield from (item for item in value if isinstance(item, str))
            elif key == "const" and isinstance(value, str):
                yield value
            elif key == "description" and isinstance(value, str):
                # Docstrings give examples in quotes: `City name, e.g. "Tokyo".`
                yield from _QUOTED.findall(value)
            else:
                yield from _schema_strings(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _schema_strings(item)


def read_handler_state(
    state: Mapping[str, Any],
) -> tuple[ConversationHistory | None, Mapping[str, Any] | None, SavedLateResults | None]:
    """Check a handler state (`ResumableHandler.snapshot()` output) and read its parts: the
    history (None when the state has none), the playbook snapshot (None without one; its
    contents are the engine's to check) and the background calls (`"background"`: the running
    ones and the late results not in the history yet; None without any).

    The history must be one a chat API accepts: every assistant tool call answered by its tool
    message right after it, no tool message without its call.

    Raises:
        ValueError: saying which part is malformed and what is expected.
    """
    if not isinstance(state, Mapping):
        raise ValueError(
            f"handler state must be a mapping with 'history', 'playbook' and 'background', "
            f"got {type(state).__name__}"
        )
    unknown = sorted(str(key) for key in state if key not in _STATE_KEYS)
    if unknown:
        raise ValueError(
            f"handler state has unknown keys {unknown}; allowed: {', '.join(_STATE_KEYS)}"
        )
    playbook = state.get("playbook")
    if playbook is not None and not isinstance(playbook, Mapping):
        raise ValueError(
            f"handler state 'playbook' must be a PlaybookEngine snapshot (a mapping) or null, "
            f"got {type(playbook).__name__}"
        )
    background = read_saved_late_results(state.get("background"))
    saved = state.get("history")
    if saved is None:
        return None, playbook, background
    if not isinstance(saved, Mapping) or not isinstance(saved.get("messages"), list):
        raise ValueError(
            "handler state 'history' must be ConversationHistory.to_dict() output: a mapping "
            "with a 'messages' list"
        )
    try:
        history = ConversationHistory.from_dict(dict(saved))
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        raise ValueError(f"handler state 'history' has a malformed message: {exc}") from exc
    _check_tool_pairs(history)
    return history, playbook, background


_STATE_KEYS: Final = ("history", "playbook", "background")


def replace_messages(history: ConversationHistory, saved: ConversationHistory) -> None:
    """Put `saved`'s messages in `history` instead of its own, in place (whoever shares the
    history object sees them), trimmed to `history.max_messages`."""
    history.clear()
    history.extend(saved.messages)


def _check_tool_pairs(history: ConversationHistory) -> None:
    """A restored history goes straight to a chat API, which rejects a broken tool pair."""
    open_calls: set[str] = set()
    for position, message in enumerate(history.messages):
        if isinstance(message, ToolMessage):
            if message.call_id not in open_calls:
                raise ValueError(
                    f"handler state 'history': message {position} answers tool call "
                    f"{message.call_id!r}, which no assistant message before it made"
                )
            open_calls.discard(message.call_id)
            continue
        if open_calls:
            break
        if isinstance(message, AssistantMessage):
            open_calls = {call.call_id for call in message.tool_calls}
    if open_calls:
        raise ValueError(
            f"handler state 'history': tool calls {sorted(open_calls)} have no tool message "
            "after them"
        )
