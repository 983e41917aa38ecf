"""One `Hooks` protocol for every layer: tools, turns, models, playbooks, voice and sessions.

Each hook method receives one small frozen event carrying the ids that tie it to its place
(`session_id`, `turn_id`, `call_id`, `stage_id`). Events carry plain data only, so this module
imports nothing of ours and every floor may import it.

How hooks are called (by `emit`, which every layer uses):
- In the caller's task and contextvars context, so a hook sees the caller's current span.
- A sync hook runs inline and must be quick (it runs on the event loop, maybe in the audio path).
- An async hook is awaited at once (never deferred), shielded from the caller's cancellation and
  bounded by its object's `hook_timeout`: past it the hook is cancelled and a warning is logged.
- A hook that raises is logged with its name and never changes what the library does.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import anyio

__all__ = [
    "HOOK_NAMES",
    "BargeInEvent",
    "CompositeHooks",
    "ErrorEvent",
    "Hooks",
    "LLMEndEvent",
    "LLMFirstTokenEvent",
    "LLMStartEvent",
    "SessionEndEvent",
    "SessionStartEvent",
    "SpeechEndEvent",
    "SpeechStartEvent",
    "STTEndEvent",
    "StageEnterEvent",
    "StageExitEvent",
    "TTSEndEvent",
    "TTSStartEvent",
    "ToolEndEvent",
    "ToolErrorEvent",
    "ToolStartEvent",
    "TransitionEvent",
    "TurnEndEvent",
    "TurnStartEvent",
    "emit",
    "error_type_name",
    "hooks_for",
]

logger = logging.getLogger(__name__)

_EMPTY: Mapping[str, Any] = {}

# Events ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStartEvent:
    """A tool handler is about to run (its concurrency slot is taken)."""

    execution_id: str
    """Unique per call execution: pairs start and end (call ids repeat across batches)."""
    call_id: str
    tool_name: str
    tool_description: str = ""
    arguments: Any = None
    """The arguments as the model gave them (a dict or the raw JSON string). Content: record
    only with consent, and mask `sensitive_fields`."""
    sensitive_fields: Sequence[str] = ()
    """Argument/result keys that must always be masked when content is recorded."""
    session_id: str | None = None
    turn_id: str | None = None
    stage_id: str | None = None
    context: Any = None
    """The `ToolContext` the handler receives (its abort signal, metadata)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolEndEvent:
    """A tool call finished, whatever its status. Fires exactly once per call, also for calls
    that never ran (`not_found`, `invalid_arguments`, aborted while queued)."""

    execution_id: str
    call_id: str
    tool_name: str
    status: str
    """`ok`, `error`, `invalid_arguments`, `not_found`, `timeout` or `aborted`."""
    tool_description: str = ""
    arguments: Any = None
    sensitive_fields: Sequence[str] = ()
    error: str | None = None
    """The error message sent to the model (may quote argument values: it is content)."""
    error_type: str | None = None
    """The status word, or the exception's fully qualified class name when the handler raised."""
    exception: BaseException | None = None
    """What the handler raised, with its full text (for logs and spans, never for the model,
    which gets a short generic message unless the handler raised `ToolError`); None when the
    handler did not raise."""
    duration_s: float = 0.0
    """How long the handler ran (0 if it never ran)."""
    queued_s: float = 0.0
    """How long the call waited for a concurrency slot."""
    started: bool = False
    """Whether the handler ran (a start event was sent for this execution)."""
    result: Any = None
    """The handler's return value (status `ok` only)."""
    result_content: str | None = None
    """The JSON content sent back to the model (content: record only with consent)."""
    session_id: str | None = None
    turn_id: str | None = None
    stage_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolErrorEvent:
    """A tool call ended with a status other than `ok`; sent just before its `ToolEndEvent`."""

    execution_id: str
    call_id: str
    tool_name: str
    status: str
    error: BaseException
    """What the handler raised, or an exception describing the status (`ToolTimeoutError`, …)."""
    arguments: Any = None
    session_id: str | None = None
    turn_id: str | None = None
    stage_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStartEvent:
    """A conversational turn starts (user text in, or a timer-driven turn with none)."""

    turn_id: str
    session_id: str | None = None
    stage_id: str | None = None
    user_text: str | None = None
    """Content: record only with consent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEndEvent:
    """A turn finished: answered, aborted (barge-in), or failed."""

    turn_id: str
    stop_reason: str
    """`stop`, `length`, `max_tool_rounds`, `aborted` or `error`."""
    session_id: str | None = None
    stage_id: str | None = None
    text: str = ""
    """The assistant text of the turn. Content: record only with consent."""
    duration_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    error_type: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMStartEvent:
    """A model request is sent."""

    request_id: str
    model: str
    session_id: str | None = None
    turn_id: str | None = None
    stage_id: str | None = None
    provider: str = "openai"
    """`gen_ai.provider.name`, e.g. `openai`, `llmrtc.local`, `llmrtc.scripted`."""
    messages: Sequence[Any] = ()
    """The request messages. Content: record only with consent."""
    tool_names: tuple[str, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMFirstTokenEvent:
    """The first text or tool-call delta of a model response arrived."""

    request_id: str
    model: str
    latency_s: float
    session_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMEndEvent:
    """A model response ended (or failed)."""

    request_id: str
    model: str
    session_id: str | None = None
    turn_id: str | None = None
    stage_id: str | None = None
    provider: str = "openai"
    response_model: str | None = None
    stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    duration_s: float = 0.0
    output_text: str = ""
    """Content: record only with consent."""
    error_type: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StageEnterEvent:
    """A playbook stage is entered (the initial stage too)."""

    stage_id: str
    from_stage: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    data: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageExitEvent:
    """A playbook stage is left."""

    stage_id: str
    to_stage: str
    session_id: str | None = None
    turn_id: str | None = None
    data: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True, kw_only=True)
class TransitionEvent:
    """A playbook transition fired."""

    from_stage: str
    to_stage: str
    transition_id: str
    session_id: str | None = None
    turn_id: str | None = None
    condition: str | None = None
    """The condition type that fired (`tool_call`, `keyword`, `llm_decision`, `timeout`, …)."""
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechStartEvent:
    """Voice activity detection heard the user start speaking."""

    session_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechEndEvent:
    """The user stopped speaking."""

    session_id: str | None = None
    turn_id: str | None = None
    duration_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class STTEndEvent:
    """Speech-to-text finished an utterance."""

    session_id: str | None = None
    turn_id: str | None = None
    text: str = ""
    """Content: record only with consent."""
    duration_s: float = 0.0
    """Transcription time."""
    audio_duration_s: float = 0.0
    model: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TTSStartEvent:
    """Text-to-speech starts speaking a chunk of text."""

    session_id: str | None = None
    turn_id: str | None = None
    text: str = ""
    """Content: record only with consent."""
    voice: str | None = None
    time_to_first_audio_s: float | None = None
    """For the first audio of a turn: end of user speech to first audio out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TTSEndEvent:
    """Text-to-speech finished (or was interrupted)."""

    session_id: str | None = None
    turn_id: str | None = None
    duration_s: float = 0.0
    audio_duration_s: float = 0.0
    interrupted: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class BargeInEvent:
    """The user spoke over the agent; its speech and running work are aborted."""

    session_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionStartEvent:
    """A session (one connected user) starts."""

    session_id: str
    transport: str | None = None
    """`webrtc`, `text`, …"""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEndEvent:
    """A session ends."""

    session_id: str
    duration_s: float = 0.0
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent:
    """Something failed that the library recovered from (reported, never raised to the user)."""

    error: BaseException
    where: str
    """The component that failed, e.g. `stage.on_enter`, `tts`, `signalling`."""
    session_id: str | None = None
    turn_id: str | None = None
    stage_id: str | None = None


# The protocol ---------------------------------------------------------------------------------


class Hooks:
    """Observe the library: override the methods you need; each may be sync or async.

    Example:
        class PrintTools(Hooks):
            def on_tool_end(self, event: ToolEndEvent) -> None:
                print(event.tool_name, event.status, event.duration_s)

        executor = ToolExecutor(registry, hooks=PrintTools())
    """

    hook_timeout: float = 0.5
    """Seconds an async hook of this object may take before it is cancelled (and logged)."""

    def on_tool_start(self, event: ToolStartEvent) -> Awaitable[None] | None:
        """A tool handler is about to run."""

    def tool_call_context(self, event: ToolStartEvent) -> AbstractContextManager[object] | None:
        """A context the tool's handler runs inside, or None.

        Called after `on_tool_start`, in the task that runs the handler; the context is
        entered just before the handler starts and left when it ends, and context variables
        it sets are seen by the handler (also by a sync handler in its worker thread).
        `OpenTelemetryHooks` uses it to make the `execute_tool` span current, so the spans a
        tool creates itself (HTTP, database) become its children. Must not block or raise.
        """
        return None

    def on_tool_end(self, event: ToolEndEvent) -> Awaitable[None] | None:
        """A tool call finished (once per call, whatever happened)."""

    def on_tool_error(self, event: ToolErrorEvent) -> Awaitable[None] | None:
        """A tool call ended with a status other than `ok`."""

    def on_turn_start(self, event: TurnStartEvent) -> Awaitable[None] | None:
        """A turn starts."""

    def on_turn_end(self, event: TurnEndEvent) -> Awaitable[None] | None:
        """A turn ended."""

    def on_llm_start(self, event: LLMStartEvent) -> Awaitable[None] | None:
        """A model request is sent."""

    def on_llm_first_token(self, event: LLMFirstTokenEvent) -> Awaitable[None] | None:
        """The first delta of a model response arrived."""

    def on_llm_end(self, event: LLMEndEvent) -> Awaitable[None] | None:
        """A model response ended, with usage."""

    def on_stage_enter(self, event: StageEnterEvent) -> Awaitable[None] | None:
        """A playbook stage is entered."""

    def on_stage_exit(self, event: StageExitEvent) -> Awaitable[None] | None:
        """A playbook stage is left."""

    def on_transition(self, event: TransitionEvent) -> Awaitable[None] | None:
        """A playbook transition fired."""

    def on_speech_start(self, event: SpeechStartEvent) -> Awaitable[None] | None:
        """The user started speaking."""

    def on_speech_end(self, event: SpeechEndEvent) -> Awaitable[None] | None:
        """The user stopped speaking."""

    def on_stt_end(self, event: STTEndEvent) -> Awaitable[None] | None:
        """Speech-to-text finished an utterance."""

    def on_tts_start(self, event: TTSStartEvent) -> Awaitable[None] | None:
        """Text-to-speech starts."""

    def on_tts_end(self, event: TTSEndEvent) -> Awaitable[None] | None:
        """Text-to-speech finished or was interrupted."""

    def on_barge_in(self, event: BargeInEvent) -> Awaitable[None] | None:
        """The user spoke over the agent."""

    def on_session_start(self, event: SessionStartEvent) -> Awaitable[None] | None:
        """A session starts."""

    def on_session_end(self, event: SessionEndEvent) -> Awaitable[None] | None:
        """A session ends."""

    def on_error(self, event: ErrorEvent) -> Awaitable[None] | None:
        """A recovered failure (a stage callback that raised, a TTS crash, …)."""


HOOK_NAMES: tuple[str, ...] = tuple(
    name for name in vars(Hooks) if name.startswith("on_") and callable(getattr(Hooks, name))
)
"""Every hook method name, in declaration order."""


class CompositeHooks(Hooks):
    """Fans every event out to several `Hooks`, in order. Each keeps its own `hook_timeout`, and
    one that raises or stalls does not keep the others from being called.

    Nested composites are flattened (the library calls the leaves directly); the same object
    listed twice is called once. Calling a method on the composite yourself also fans out:
    `await composite.on_barge_in(event)`.
    """

    def __init__(self, hooks: Iterable[Hooks]) -> None:
        """Combine `hooks` (called in the order given)."""
        self.hooks: tuple[Hooks, ...] = _flatten(hooks)

    def __repr__(self) -> str:
        return f"CompositeHooks({list(self.hooks)!r})"


def _fan_out(name: str) -> Any:
    async def fan_out(self: CompositeHooks, event: Any) -> None:
        await emit(hooks_for(self.hooks, name), name, event)

    fan_out.__name__ = name
    fan_out.__doc__ = f"Call `{name}` of every combined hook, in order."
    return fan_out


def _flatten(hooks: Iterable[Hooks | None]) -> tuple[Hooks, ...]:
    leaves: list[Hooks] = []
    for item in hooks:
        if item is None:
            continue
        if not isinstance(item, Hooks):
            raise TypeError(f"expected a Hooks instance, got {type(item).__name__}")
        # Only a plain CompositeHooks dissolves into its leaves: a subclass may override methods.
        for leaf in item.hooks if type(item) is CompositeHooks else (item,):
            if not any(leaf is seen for seen in leaves):
                leaves.append(leaf)
    return tuple(leaves)


for _name in HOOK_NAMES:
    setattr(CompositeHooks, _name, _fan_out(_name))


def error_type_name(error: BaseException) -> str:
    """An exception's fully qualified class name, as `error.type` wants it (`KeyError`,
    `myapp.payments.Declined`): builtins go without their module."""
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def hooks_for(hooks: Iterable[Hooks | None], name: str) -> tuple[Hooks, ...]:
    """The leaves of `hooks` that override hook `name` (so no-op base methods cost nothing)."""
    base = getattr(Hooks, name)
    chosen = []
    for hook in _flatten(hooks):
        method = getattr(hook, name)
        if getattr(method, "__func__", method) is not base:
            chosen.append(hook)
    return tuple(chosen)


async def emit(hooks: Sequence[Hooks], name: str, event: object, *, shield: bool = True) -> None:
    """Call hook `name` of each of `hooks` with `event`, isolating failures and stalls.

    Use `hooks_for` to pick the hooks once, outside the hot path.

    Args:
        hooks: The hooks to call, in order.
        name: The hook method, e.g. `"on_tool_end"`.
        event: The event object.
        shield: Protect async hooks from the caller's cancellation (an abort must not cut short
            the hooks that report it). Hooks that announce work about to start pass False, so
            an abort arriving meanwhile is not delayed by them.
    """
    for hook in hooks:
        try:
            outcome = getattr(hook, name)(event)
            if inspect.isawaitable(outcome):
                # Bounded so a slow hook cannot stall a turn or the audio path.
                with anyio.CancelScope(shield=shield):
                    with anyio.move_on_after(hook.hook_timeout) as scope:
                        await outcome
                if scope.cancelled_caught:
                    logger.warning(
                        "hook %s.%s took longer than %.3g s and was cancelled",
                        type(hook).__name__,
                        name,
                        hook.hook_timeout,
                    )
        except Exception:
            logger.exception("hook %s.%s raised; ignored", type(hook).__name__, name)
        except anyio.get_cancelled_exc_class():
            if not shield:
                raise  # the caller is being cancelled: let it
            # Inside a shield only the hook itself can have raised this (it awaited something
            # cancelled elsewhere): it must not cancel the library's work.
            logger.warning("hook %s.%s raised a cancellation; ignored", type(hook).__name__, name)
