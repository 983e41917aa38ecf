"""The `Hooks` protocol every layer calls, and the machinery that calls it.

The events themselves live in `llmrtc.telemetry.events`; each names the hook it is for
(`ToolEndEvent.hook == "on_tool_end"`), so `emit(hooks, event)` is the one way every layer calls
hooks, and the event is named once at each site.

How hooks are called (by `emit`):
- In the caller's task and contextvars context, so a hook sees the caller's current span.
- A sync hook runs inline and must be quick (it runs on the event loop, maybe in the audio path).
- An async hook is awaited at once (never deferred), shielded from the caller's cancellation and
  bounded by its object's `hook_timeout`: past it the hook is cancelled and a warning is logged.
  On asyncio a native cancellation of the caller's task (`asyncio.timeout`, `Task.cancel()`)
  cannot be shielded: it cuts the hook short and propagates, as it would anywhere else.
- A hook that raises is logged with its name and never changes what the library does.

`Hooks.tool_call_context` is not an event but a context each hook may wrap around a tool's
handler; `combined_tool_call_context` enters those of several hooks with the same isolation.
Floor 0: this module imports nothing of ours but the events.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Iterable, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, TypeAlias

import anyio

from llmrtc.telemetry.events import (
    BargeInEvent,
    BreakerChangeEvent,
    ErrorEvent,
    HookEvent,
    LLMEndEvent,
    LLMFirstTokenEvent,
    LLMStartEvent,
    ModelFallbackEvent,
    SessionEndEvent,
    SessionStartEvent,
    SpeechEndEvent,
    SpeechStartEvent,
    StageEnterEvent,
    StageExitEvent,
    STTEndEvent,
    ToolEndEvent,
    ToolErrorEvent,
    ToolProgressEvent,
    ToolRetryEvent,
    ToolStartEvent,
    ToolWarningEvent,
    TransitionEvent,
    TTSEndEvent,
    TTSStartEvent,
    TurnEndEvent,
    TurnStartEvent,
)

__all__ = [
    "HOOK_NAMES",
    "CompositeHooks",
    "Hooks",
    "combined_tool_call_context",
    "emit",
    "error_type_name",
    "listeners",
    "tool_call_context_hooks",
]

logger = logging.getLogger(__name__)


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

    def on_tool_progress(self, event: ToolProgressEvent) -> Awaitable[None] | None:
        """A running tool reported progress (`ToolContext.progress`); called in the task of
        the tool's handler, which waits for it: keep it quick."""

    def on_tool_retry(self, event: ToolRetryEvent) -> Awaitable[None] | None:
        """A tool call's attempt failed and it is tried again (`ToolDefinition.retry`); called
        before the backoff, in the task running the call."""

    def on_breaker_change(self, event: BreakerChangeEvent) -> Awaitable[None] | None:
        """A tool's circuit breaker changed state (`ToolDefinition.breaker`)."""

    def on_model_fallback(self, event: ModelFallbackEvent) -> Awaitable[None] | None:
        """An LLM-backed tool's model failed; the tool tries its next model."""

    def on_tool_warning(self, event: ToolWarningEvent) -> Awaitable[None] | None:
        """A tool's output was off without failing the call (`output_schema_mismatch`)."""

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
        """The user started speaking; `turn_id` is the id the answering turn will carry."""

    def on_speech_end(self, event: SpeechEndEvent) -> Awaitable[None] | None:
        """The user stopped speaking (sent before the turn it starts)."""

    def on_stt_end(self, event: STTEndEvent) -> Awaitable[None] | None:
        """Speech-to-text finished an utterance (sent before the turn it starts, with that
        turn's id)."""

    def on_tts_start(self, event: TTSStartEvent) -> Awaitable[None] | None:
        """Text-to-speech starts a chunk (may come after its turn ended: speech lags the
        model)."""

    def on_tts_end(self, event: TTSEndEvent) -> Awaitable[None] | None:
        """Text-to-speech finished or was interrupted."""

    def on_barge_in(self, event: BargeInEvent) -> Awaitable[None] | None:
        """The user spoke or typed over the agent: a real barge-in, or (`event.kind`) a false
        interruption or a backchannel after which the reply went on."""

    def on_session_start(self, event: SessionStartEvent) -> Awaitable[None] | None:
        """A session starts."""

    def on_session_end(self, event: SessionEndEvent) -> Awaitable[None] | None:
        """A session ends."""

    def on_error(self, event: ErrorEvent) -> Awaitable[None] | None:
        """A recovered failure (a stage callback that raised, a TTS crash, …)."""


HOOK_NAMES: tuple[str, ...] = tuple(
    name for name in vars(Hooks) if name.startswith("on_") and callable(getattr(Hooks, name))
)
"""Every event hook method name (`on_*`), in declaration order; `tool_call_context` is not one."""


HookTargets: TypeAlias = "Hooks | Sequence[Hooks] | None"
"""What `emit` sends to: one `Hooks` (a `CompositeHooks` fans out), nobody (None), or the
hooks `listeners` picked."""

_BASE_HOOKS: dict[str, Any] = {name: getattr(Hooks, name) for name in HOOK_NAMES}
"""The base class's no-op methods, which are not worth a call."""


def _overrides(hook: object, name: str) -> bool:
    """Whether `hook` has its own hook `name`: its class overrides the no-op (read at each
    event, so a method patched onto the class later counts), or the object was given one as an
    attribute (as the executor's plain `on_tool_*` callbacks are)."""
    return getattr(type(hook), name, None) is not _BASE_HOOKS[name] or name in getattr(
        hook, "__dict__", ()
    )


class CompositeHooks(Hooks):
    """Fans every event out to several `Hooks`, in order. Each keeps its own `hook_timeout`, and
    one that raises or stalls does not keep the others from being called.

    Nested composites are flattened (the library calls the leaves directly); the same object
    listed twice is called once. Calling a method on the composite yourself also fans out:
    `await composite.on_barge_in(event)`, and `composite.tool_call_context(event)` is a context
    entering the contexts of every combined hook that offers one (None when none does).
    """

    def __init__(self, hooks: Iterable[Hooks]) -> None:
        """Combine `hooks` (called in the order given)."""
        self._hooks: tuple[Hooks, ...] = _flatten(hooks)
        self._context_hooks = tool_call_context_hooks(self._hooks)
        # Picked once, so that `emit` to a composite costs a dict lookup per event. Which
        # methods a combined hook overrides is read here: a hook method added to one of them
        # afterwards is not called through this composite (build a new one).
        self._listeners: dict[str, tuple[Hooks, ...]] = {
            name: tuple(hook for hook in self._hooks if _overrides(hook, name))
            for name in HOOK_NAMES
        }

    @property
    def hooks(self) -> tuple[Hooks, ...]:
        """The combined hooks, flattened, in order (fixed at construction)."""
        return self._hooks

    def __repr__(self) -> str:
        return f"CompositeHooks({list(self.hooks)!r})"

    def tool_call_context(self, event: ToolStartEvent) -> AbstractContextManager[object] | None:
        """The combined contexts of the hooks that offer one, entered in order and left in
        reverse order; None when no combined hook overrides `tool_call_context`."""
        return combined_tool_call_context(self._context_hooks, event)


def _fan_out(name: str) -> Any:
    async def fan_out(self: CompositeHooks, event: HookEvent) -> None:
        await emit(self._listeners[name], event)

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


def listeners(
    hooks: Hooks | Iterable[Hooks | None] | None, kind: type[HookEvent]
) -> tuple[Hooks, ...]:
    """The leaves of `hooks` that override the hook for events of type `kind`.

    For hot paths: pick them once, skip building the event when the result is empty, and pass
    the result to `emit`.

    Args:
        hooks: A `Hooks` (a `CompositeHooks` counts as its leaves), several, or None.
        kind: A hook event class, e.g. `ToolEndEvent` (for the hook `on_tool_end`).

    Raises:
        TypeError: `kind` is not a hook event class, or `hooks` holds something not a `Hooks`.
    """
    name = _hook_of(kind)
    if hooks is None:
        return ()
    leaves = _flatten((hooks,) if isinstance(hooks, Hooks) else hooks)
    return tuple(hook for hook in leaves if _overrides(hook, name))


def tool_call_context_hooks(hooks: Hooks | Iterable[Hooks | None] | None) -> tuple[Hooks, ...]:
    """The leaves of `hooks` that override `tool_call_context` (to pass to
    `combined_tool_call_context`)."""
    if hooks is None:
        return ()
    base = Hooks.tool_call_context
    leaves = _flatten((hooks,) if isinstance(hooks, Hooks) else hooks)
    return tuple(
        hook
        for hook in leaves
        if getattr(hook.tool_call_context, "__func__", hook.tool_call_context) is not base
    )


def _hook_of(kind: type) -> str:
    """The hook method events of class `kind` are for; TypeError for anything else."""
    name = _hook_by_class.get(kind)
    if name is None:
        name = getattr(kind, "hook", None)
        if not isinstance(name, str) or name not in _HOOK_NAME_SET:
            raise TypeError(
                f"{kind.__qualname__} is not a hook event (a class from llmrtc.telemetry.events "
                "with a `hook` naming a Hooks method); stream events such as TurnCompleted are "
                "yielded by run_turn, not sent to hooks"
            )
        _hook_by_class[kind] = name
    return name


_HOOK_NAME_SET = frozenset(HOOK_NAMES)
_hook_by_class: dict[type, str] = {}
"""Hook method name by event class, filled as classes are first seen (subclasses included)."""


def error_type_name(error: BaseException) -> str:
    """An exception's fully qualified class name, as `error.type` wants it (`KeyError`,
    `myapp.payments.Declined`): builtins go without their module."""
    cls = type(error)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def combined_tool_call_context(
    hooks: Sequence[Hooks], event: ToolStartEvent
) -> AbstractContextManager[object] | None:
    """One context wrapping a tool's handler in the `tool_call_context` of each of `hooks`.

    Contexts are entered in order and left in reverse order, in the task that enters the
    result. A hook that raises (asking for its context, entering or leaving it) is logged and
    skipped; no hook's context can swallow or replace what the handler raised.

    Args:
        hooks: The hooks to ask, e.g. `tool_call_context_hooks(leaves)`.
        event: The call's start event (as given to `on_tool_start`).

    Returns:
        A context manager, or None when no hook offers a context (nothing to enter).
    """
    entries: list[tuple[Hooks, AbstractContextManager[object]]] = []
    for hook in hooks:
        try:
            context = hook.tool_call_context(event)
        except Exception:
            logger.exception("hook %s.tool_call_context raised; ignored", type(hook).__name__)
            continue
        if context is not None:
            entries.append((hook, context))
    return _ToolCallContexts(entries) if entries else None


class _ToolCallContexts:
    """The hooks' contexts around one handler run, each isolated from the others."""

    __slots__ = ("_entered", "_entries")

    def __init__(self, entries: list[tuple[Hooks, AbstractContextManager[object]]]) -> None:
        self._entries = entries
        self._entered: list[tuple[Hooks, AbstractContextManager[object]]] = []

    def __enter__(self) -> None:
        for hook, context in self._entries:
            try:
                context.__enter__()
            except Exception:
                logger.exception(
                    "hook %s.tool_call_context raised on enter; ignored", type(hook).__name__
                )
            else:
                self._entered.append((hook, context))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Returning None always: a hook observes the handler's outcome, it never changes it.
        while self._entered:
            hook, context = self._entered.pop()
            try:
                context.__exit__(exc_type, exc, traceback)
            except Exception:
                logger.exception(
                    "hook %s.tool_call_context raised on exit; ignored", type(hook).__name__
                )


async def emit(hooks: HookTargets, event: HookEvent, *, shield: bool = True) -> None:
    """Send `event` to the hook it is for (`type(event).hook`, e.g. `on_tool_end`) of `hooks`,
    isolating failures and stalls.

    Costs a dict lookup and a return when nobody listens: `hooks` is None, or a `Hooks` whose
    class does not override that hook. Hot paths may pick `listeners(hooks, EventType)` once
    and skip building the event when there are none.

    Args:
        hooks: One `Hooks` (a `CompositeHooks` reaches its leaves that override the hook), None,
            or a sequence of hooks as picked by `listeners` (called as given, in order).
        event: A hook event from `llmrtc.telemetry.events`.
        shield: Protect async hooks from the caller's cancellation (an abort must not cut short
            the hooks that report it). Hooks that announce work about to start pass False, so
            an abort arriving meanwhile is not delayed by them. A native asyncio cancellation
            of the caller (`asyncio.timeout`) cannot be held off and propagates either way.
            On asyncio a cancellation the hook raised of its own making (it awaited something
            cancelled elsewhere) is logged and ignored either way; on trio only with a shield.

    Raises:
        TypeError: `event` is not a hook event (a stream event, say).
    """
    cls = type(event)
    name = _hook_by_class.get(cls) or _hook_of(cls)
    if hooks is None:
        return
    targets: Sequence[Any]
    if type(hooks) is CompositeHooks:
        targets = hooks._listeners[name]
    elif isinstance(hooks, list | tuple):
        targets = hooks
    elif _overrides(hooks, name):
        # One `Hooks`, or any object with the hook method (duck-typed observers work too).
        targets = (hooks,)
    else:
        return
    for hook in targets:
        if hook is None:
            continue
        try:
            method = getattr(hook, name, None)
            if method is None:  # a duck-typed observer without this hook
                continue
            outcome = method(event)
            if outcome is None:  # a sync hook (the common case): nothing to await
                continue
            if inspect.isawaitable(outcome):
                await _await_hook(hook, name, outcome, shield=shield)
        except Exception:
            logger.exception("hook %s.%s raised; ignored", type(hook).__name__, name)


async def _await_hook(hook: Hooks, name: str, outcome: Awaitable[object], *, shield: bool) -> None:
    """Await an async hook's `outcome`, bounded by its `hook_timeout`; see `emit`."""
    # On asyncio anyio's shield holds off anyio's own cancel scopes but not a native
    # `Task.cancel()` (`asyncio.timeout`, a `TaskGroup` failing, a cancelled task): those reach
    # the hook anyway. The task's count of pending cancellation requests tells them apart from
    # a cancellation the hook made itself, which anyio balances out or never counted.
    task = _current_asyncio_task()
    requests = task.cancelling() if task is not None else 0
    try:
        # Bounded so a slow hook cannot stall a turn or the audio path.
        with anyio.CancelScope(shield=shield):
            with anyio.move_on_after(hook.hook_timeout) as scope:
                await outcome
    except anyio.get_cancelled_exc_class():
        if task is None:  # trio: unshielded, any cancellation may be the caller's
            if not shield:
                raise
        elif task.cancelling() > requests or requests:
            # The caller is being cancelled: anyio's own scopes (an abort, a timeout) cancel
            # through `Task.cancel()` too, so they count; a request pending since before the
            # hook began (thrown at its first await) counts as well.
            raise
        # Otherwise only the hook itself can have raised this (it awaited something cancelled
        # elsewhere): it must not cancel the library's work.
        logger.warning("hook %s.%s raised a cancellation; ignored", type(hook).__name__, name)
        return
    if task is not None and task.cancelling() > requests:
        # The hook caught and dropped the caller's cancellation: it must not be lost.
        raise asyncio.CancelledError(f"cancelled while hook {type(hook).__name__}.{name} ran")
    if scope.cancelled_caught:
        logger.warning(
            "hook %s.%s took longer than %.3g s and was cancelled",
            type(hook).__name__,
            name,
            hook.hook_timeout,
        )


def _current_asyncio_task() -> asyncio.Task[Any] | None:
    """The running asyncio task, or None on another event loop (trio)."""
    try:
        return asyncio.current_task()
    except RuntimeError:  # no asyncio loop running in this thread
        return None
