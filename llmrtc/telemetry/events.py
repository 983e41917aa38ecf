"""Hook events: what a `Hooks` observer receives, as small frozen dataclasses of plain data.

Naming rule: a hook event is named `<Subject><Moment>Event` and there is exactly one per
`Hooks.on_<subject>_<moment>` method; its class attribute `hook` names that method (`emit`
dispatches on it). The other family, stream events (`llmrtc.agent.events`: `TextDelta`,
`TurnCompleted`, `TurnFailed`, ...), are what `run_turn` yields: past-tense facts without a suffix,
and none of them has a `hook`.

Each event carries the ids that tie it to its place (`session_id`, `turn_id`, `call_id`,
`stage_id`), so a hook can correlate without looking anything up. Fields documented as
*content* (arguments, results, transcripts, messages, error texts that may quote values) may
hold personal data: record them only with the user's consent, and mask a tool's
`sensitive_fields`. Floor 0: this module imports nothing of ours.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

logger = logging.getLogger(__name__)

__all__ = [
    "BargeInEvent",
    "BreakerChangeEvent",
    "ErrorEvent",
    "HookEvent",
    "LLMEndEvent",
    "LLMFirstTokenEvent",
    "LLMStartEvent",
    "ModelFallbackEvent",
    "STTEndEvent",
    "SessionEndEvent",
    "SessionStartEvent",
    "SpeechEndEvent",
    "SpeechStartEvent",
    "StageEnterEvent",
    "StageExitEvent",
    "TTSEndEvent",
    "TTSStartEvent",
    "ToolEndEvent",
    "ToolErrorEvent",
    "ToolProgressEvent",
    "ToolRetryEvent",
    "ToolStartEvent",
    "ToolWarningEvent",
    "TransitionEvent",
    "TurnEndEvent",
    "TurnStartEvent",
]

_EMPTY: Mapping[str, Any] = {}

# Tools ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolStartEvent:
    """A tool handler is about to run (its concurrency slot is taken)."""

    hook: ClassVar[str] = "on_tool_start"

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
    reasoning: str | None = None
    """Why the model chose the tool (its `_reasoningForCall`, taken out of the arguments), when
    it is offered and the model said. Model text like `arguments`: record only with consent."""
    background: bool = False
    """The call runs in the background (`ToolDefinition.background`): its batch did not wait
    for it, and it may end after its turn."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolEndEvent:
    """A tool call finished, whatever its status. Fires exactly once per call, also for calls
    that never ran (`not_found`, `invalid_arguments`, aborted while queued)."""

    hook: ClassVar[str] = "on_tool_end"

    execution_id: str
    call_id: str
    tool_name: str
    status: str
    """`ok`, `error`, `invalid_arguments`, `not_found`, `timeout`, `aborted`, `duplicate`,
    `unavailable` or `denied` (never `running`: a background call's end event reports its
    final result)."""
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
    """How long the call waited before its handler ran: for a concurrency slot, its
    resources (`ToolDefinition.resources`) and a running call it repeats (`on_duplicate`)."""
    started: bool = False
    """Whether the handler ran (a start event was sent for this execution)."""
    result: Any = None
    """The handler's return value (status `ok` only)."""
    result_content: str | None = None
    """The JSON content sent back to the model (content: record only with consent)."""
    model_usage: Any = None
    """For an LLM-backed tool, the `ModelUsage` of its own model calls (model id, attempts,
    tokens); None otherwise."""
    session_id: str | None = None
    turn_id: str | None = None
    stage_id: str | None = None
    reasoning: str | None = None
    """Why the model chose the tool (its `_reasoningForCall`); content, as on the start event."""
    background: bool = False
    """The call ran in the background: this is its final result, which the model did not have
    when its batch ended (it got a `"running"` answer then)."""
    reused_from: str | None = None
    """`on_duplicate="reuse"`: the earlier call whose result answered this one (its handler
    did not run for this call)."""
    attempts: int = 1
    """Handler runs for this call (more than 1 after retries; 0 when it never ran)."""
    approval: Literal["approved", "denied"] | None = None
    """The approver's answer, for a tool that needed approval; None when none was asked."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolErrorEvent:
    """A tool call ended with a status other than `ok`; sent just before its `ToolEndEvent`."""

    hook: ClassVar[str] = "on_tool_error"

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
class ToolProgressEvent:
    """A running tool reported how it is getting on (`await ctx.progress(message)`); at most
    a few per second per call reach hooks (see `ToolContext.progress`)."""

    hook: ClassVar[str] = "on_tool_progress"

    execution_id: str
    """The call's execution (as on its start and end events)."""
    call_id: str
    tool_name: str
    message: str
    """The tool's one-line status, written for people (content: may name what it works on)."""
    background: bool = False
    """Whether the call runs in the background (its batch did not wait for it)."""
    arguments: Any = None
    """The call's arguments (to mask `sensitive_fields` values quoted in `message`)."""
    sensitive_fields: Sequence[str] = ()
    session_id: str | None = None
    turn_id: str | None = None
    """The turn that started the call (a background call outlives it)."""
    stage_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolRetryEvent:
    """A tool call's attempt failed and the call is tried again after `delay_s`
    (`ToolDefinition.retry`)."""

    hook: ClassVar[str] = "on_tool_retry"

    execution_id: str
    call_id: str
    tool_name: str
    attempt: int
    """The attempt that failed (1 for the first)."""
    delay_s: float
    """Seconds until the next attempt."""
    error: str
    """What failed, for logs: the exception's class and text, or "attempt timed out after N s"
    (may quote values: content)."""
    error_type: str
    """The exception's fully qualified class name, or `timeout`."""
    session_id: str | None = None
    turn_id: str | None = None
    stage_id: str | None = None
    background: bool = False

    @property
    def delay(self) -> float:
        """`delay_s`, by the name the retry policy gives it (seconds)."""
        return self.delay_s


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerChangeEvent:
    """A tool's circuit breaker changed state (`ToolDefinition.breaker`): `closed` (calls
    run), `open` (calls end `unavailable` at once), `half_open` (one trial call runs)."""

    hook: ClassVar[str] = "on_breaker_change"

    tool_name: str
    old_state: Literal["closed", "open", "half_open"]
    new_state: Literal["closed", "open", "half_open"]
    failures: int
    """Consecutive failed calls counted when it changed."""
    reset_after: float
    """Seconds an open breaker waits before its trial call."""
    call_id: str | None = None
    """The call whose outcome (or admission, for `half_open`) changed it."""
    session_id: str | None = None


# LLM-backed tools (`llmrtc.catalog.define_llm_tool`) ----------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFallbackEvent:
    """An LLM-backed tool's model failed and the tool moves on to its next model."""

    hook: ClassVar[str] = "on_model_fallback"

    tool_name: str
    """The tool's name (`util.summarize`)."""
    tool_id: str
    """The tool's versioned id (`util:summarize@1.0.0`)."""
    call_id: str
    """The call being served."""
    failed_model: str
    """The `provider/model` id that failed."""
    error: str
    """Why it failed (for logs: may name URLs and status codes, never sent to a model)."""
    next_model: str
    """The `provider/model` id tried next."""
    attempt: int
    """How many models were tried so far (1 for the first failure)."""
    session_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolWarningEvent:
    """Something was off with a tool's output that did not fail the call."""

    hook: ClassVar[str] = "on_tool_warning"

    tool_name: str
    tool_id: str
    call_id: str
    code: str
    """What kind of warning: `output_schema_mismatch` (JSON output not matching the tool's
    output schema; the output is still the result)."""
    message: str
    """What was wrong, with the JSON paths (content: may quote output values)."""
    model: str | None = None
    """The `provider/model` id that produced the output."""
    session_id: str | None = None
    turn_id: str | None = None


# Turns and model calls --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStartEvent:
    """A conversational turn starts (user text in, or a timer-driven turn with none)."""

    hook: ClassVar[str] = "on_turn_start"

    turn_id: str
    session_id: str | None = None
    stage_id: str | None = None
    user_text: str | None = None
    """Content: record only with consent."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEndEvent:
    """A turn finished: answered, aborted (barge-in), or failed."""

    hook: ClassVar[str] = "on_turn_end"

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

    hook: ClassVar[str] = "on_llm_start"

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

    hook: ClassVar[str] = "on_llm_first_token"

    request_id: str
    model: str
    latency_s: float
    session_id: str | None = None
    turn_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMEndEvent:
    """A model response ended (or failed)."""

    hook: ClassVar[str] = "on_llm_end"

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
    cached_input_tokens: int | None = None
    """Of `input_tokens`, those the server took from its prompt cache (not processed again)."""
    duration_s: float = 0.0
    output_text: str = ""
    """Content: record only with consent."""
    error_type: str | None = None


# Playbooks --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StageEnterEvent:
    """A playbook stage is entered (the initial stage too)."""

    hook: ClassVar[str] = "on_stage_enter"

    stage_id: str
    from_stage: str | None = None
    session_id: str | None = None
    turn_id: str | None = None
    data: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageExitEvent:
    """A playbook stage is left."""

    hook: ClassVar[str] = "on_stage_exit"

    stage_id: str
    to_stage: str
    session_id: str | None = None
    turn_id: str | None = None
    data: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True, kw_only=True)
class TransitionEvent:
    """A playbook transition fired."""

    hook: ClassVar[str] = "on_transition"

    from_stage: str
    to_stage: str
    transition_id: str
    session_id: str | None = None
    turn_id: str | None = None
    condition: str | None = None
    """The condition type that fired (`tool_call`, `keyword`, `llm_decision`, `timeout`, …)."""
    reason: str | None = None


# Voice ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechStartEvent:
    """Voice activity detection heard the user start speaking."""

    hook: ClassVar[str] = "on_speech_start"

    session_id: str | None = None
    turn_id: str | None = None
    """The id the turn answering this utterance will carry (a voice loop picks it now, so
    speech, STT, the turn and its TTS share one id)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeechEndEvent:
    """The user stopped speaking (end of speech decided)."""

    hook: ClassVar[str] = "on_speech_end"

    session_id: str | None = None
    turn_id: str | None = None
    duration_s: float = 0.0
    """How long the user spoke, in audio time (first voiced frame to end of speech)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class STTEndEvent:
    """Speech-to-text finished an utterance (sent when it ends, usually before the turn it
    starts: `OpenTelemetryHooks` then puts its span into that turn's tree)."""

    hook: ClassVar[str] = "on_stt_end"

    session_id: str | None = None
    turn_id: str | None = None
    """The turn this utterance starts (may not have started yet)."""
    text: str = ""
    """The final transcript. Content: record only with consent."""
    duration_s: float = 0.0
    """Transcription time (wall clock, ending now)."""
    audio_duration_s: float = 0.0
    """Length of the transcribed audio."""
    model: str | None = None
    """The STT engine or model name (e.g. `whisper-base`)."""
    error_type: str | None = None
    """Set when transcription failed: the exception's class name (`text` is then empty)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TTSStartEvent:
    """Text-to-speech starts speaking a chunk of text (its first audio is ready)."""

    hook: ClassVar[str] = "on_tts_start"

    session_id: str | None = None
    turn_id: str | None = None
    text: str = ""
    """The text being synthesised. Content: record only with consent."""
    voice: str | None = None
    """The TTS engine or voice name (e.g. `joe`)."""
    time_to_first_audio_s: float | None = None
    """For the first audio of a turn: end of user speech to first audio out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TTSEndEvent:
    """Text-to-speech finished a chunk (or was interrupted, or failed). Ends the oldest open
    chunk of its turn: chunks of one turn end in the order they started."""

    hook: ClassVar[str] = "on_tts_end"

    session_id: str | None = None
    turn_id: str | None = None
    duration_s: float = 0.0
    """Synthesis time of the chunk."""
    audio_duration_s: float = 0.0
    """Length of the audio produced."""
    interrupted: bool = False
    """Cut short by a barge-in (or a failure) before all its audio was produced."""
    text: str = ""
    """What was synthesised, when it differs from or was unknown at `TTSStartEvent` (e.g.
    the words produced before an interruption). Content: record only with consent."""
    error_type: str | None = None
    """Set when synthesis failed: the exception's class name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BargeInEvent:
    """The user spoke (or typed) over the agent; `kind` says what came of it."""

    hook: ClassVar[str] = "on_barge_in"

    session_id: str | None = None
    turn_id: str | None = None
    kind: Literal["barge_in", "false", "backchannel"] = "barge_in"
    """`barge_in`: its speech and running work were aborted; `false`: no words came (a
    cough), the paused reply resumed; `backchannel`: only "uh-huh" or the like, the reply went
    on and no turn was made of it."""


# Sessions and recovered errors ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionStartEvent:
    """A session (one connected user) starts."""

    hook: ClassVar[str] = "on_session_start"

    session_id: str
    transport: str | None = None
    """`webrtc`, `text`, …"""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionEndEvent:
    """A session ends."""

    hook: ClassVar[str] = "on_session_end"

    session_id: str
    duration_s: float = 0.0
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent:
    """Something failed that the library recovered from (reported, never raised to the user)."""

    hook: ClassVar[str] = "on_error"

    error: BaseException
    where: str
    """The component that failed, e.g. `stage.on_enter`, `tts`, `signalling`."""
    session_id: str | None = None
    turn_id: str | None = None
    stage_id: str | None = None


HookEvent: TypeAlias = (
    ToolStartEvent
    | ToolEndEvent
    | ToolErrorEvent
    | ToolProgressEvent
    | ToolRetryEvent
    | BreakerChangeEvent
    | TurnStartEvent
    | TurnEndEvent
    | LLMStartEvent
    | LLMFirstTokenEvent
    | LLMEndEvent
    | StageEnterEvent
    | StageExitEvent
    | TransitionEvent
    | SpeechStartEvent
    | SpeechEndEvent
    | STTEndEvent
    | TTSStartEvent
    | TTSEndEvent
    | BargeInEvent
    | SessionStartEvent
    | SessionEndEvent
    | ErrorEvent
    | ModelFallbackEvent
    | ToolWarningEvent
)
"""Any event a `Hooks` method receives."""
