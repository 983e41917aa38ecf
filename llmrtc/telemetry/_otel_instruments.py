"""OpenTelemetry instruments for `OpenTelemetryHooks`: one set per meter, shared by every
hooks object on it, with bucket boundaries suited to each quantity.

The tool policies add: `llmrtc.tool.calls` points carrying `llmrtc.tool.reused=true`
for calls answered by an earlier call's result (`on_duplicate="reuse"`; the other points carry
no such attribute), and two breaker instruments per tool with a `breaker`:
`llmrtc.tool.breaker.state`, an observable gauge of the state it last changed to (0 closed,
1 half_open, 2 open; an open breaker reads 2 until its trial call is admitted, even once
`reset_after` has passed), and `llmrtc.tool.breaker.transitions`, a counter of changes by the
state changed to (`llmrtc.tool.breaker.state` attribute: `closed`, `half_open`, `open`).
Breakers belong to an executor: two executors with the same tool on one meter report the state
that changed last.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

UNKNOWN_TOOL = "_unknown"
"""The metric bucket of every tool name the model invented (unbounded: one bucket for all)."""
CACHE_READ_TOKENS = "cache_read"
"""The `gen_ai.token.type` of `gen_ai.client.token.usage` for input tokens the server took
from its prompt cache (the conventions know `input` and `output`; this extends the open enum
as the span attribute `gen_ai.usage.cache_read.input_tokens` is named). They are part of the
`input` tokens too: a total of every type counts them twice."""

# Bucket boundaries: the GenAI conventions' advice for operation durations and token counts;
# tool calls and queue waits are mostly milliseconds, so their scale starts lower.
_DURATION_BUCKETS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                     40.96, 81.92]  # fmt: skip
_TOOL_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                 10.0, 30.0, 60.0]  # fmt: skip
_TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                  16777216, 67108864]  # fmt: skip

BREAKER_STATE_VALUES: dict[str, int] = {"closed": 0, "half_open": 1, "open": 2}
"""The value of `llmrtc.tool.breaker.state` for each breaker state."""


class Instruments:
    """One set of instruments per meter, shared by every `OpenTelemetryHooks` on it (one per
    session is the common pattern: separate observable callbacks would each report their own
    partial counts under the same metric name)."""

    def __init__(self, meter: Meter) -> None:
        # Call counts and handlers in flight are kept here and read at collection time
        # (observable instruments): a synchronous SDK metric point costs ~8 us per call.
        self.calls: dict[tuple[str, str], int] = {}
        self.reused: dict[tuple[str, str], int] = {}  # calls answered by an earlier result
        self.in_flight: dict[str, int] = {}
        self.breaker_states: dict[str, int] = {}  # tool -> BREAKER_STATE_VALUES of its state
        # Metric attributes built once (the SDK keys its points by them on every record).
        self._attributes: dict[tuple[str, str], dict[str, str]] = {}
        self._queue_attributes: dict[str, dict[str, str]] = {}
        meter.create_observable_counter(
            "llmrtc.tool.calls",
            callbacks=[self._observe_calls],
            unit="{call}",
            description=(
                "Tool calls, by result status; llmrtc.tool.reused=true for calls answered by an "
                "earlier call's result (on_duplicate=reuse)."
            ),
        )
        meter.create_observable_up_down_counter(
            "llmrtc.tool.in_flight",
            callbacks=[self._observe_in_flight],
            unit="{call}",
            description="Tool handlers running now.",
        )
        meter.create_observable_gauge(
            "llmrtc.tool.breaker.state",
            callbacks=[self._observe_breakers],
            unit="1",
            description="A tool's circuit breaker: 0 closed, 1 half_open, 2 open.",
        )
        self.breaker_transitions = meter.create_counter(
            "llmrtc.tool.breaker.transitions",
            unit="{transition}",
            description="Circuit breaker state changes, by tool and the state changed to.",
        )
        self.tool_duration = meter.create_histogram(
            "llmrtc.tool.call.duration",
            unit="s",
            description="Tool handler run time.",
            explicit_bucket_boundaries_advisory=_TOOL_BUCKETS,
        )
        self.tool_queue = meter.create_histogram(
            "llmrtc.tool.queue.duration",
            unit="s",
            description=(
                "Time a tool call waited before its handler ran: for a concurrency slot, and "
                "for its resources (per-resource limits) or the call it duplicates."
            ),
            explicit_bucket_boundaries_advisory=_TOOL_BUCKETS,
        )
        self.turn_duration = meter.create_histogram(
            "llmrtc.turn.duration",
            unit="s",
            description="Conversational turn duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.first_audio = meter.create_histogram(
            "llmrtc.voice.time_to_first_audio",
            unit="s",
            description="End of user speech to the first audio of the answer.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description=(
                "Tokens per model request, by type: input, output, and cache_read (the input "
                "tokens served from the prompt cache, also counted as input)."
            ),
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self.llm_duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Model request duration.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self.sessions_active = meter.create_up_down_counter(
            "llmrtc.sessions.active", unit="{session}", description="Sessions open now."
        )
        self.transitions = meter.create_counter(
            "llmrtc.playbook.transitions", unit="{transition}", description="Stage transitions."
        )

    def attributes(self, key: tuple[str, str]) -> dict[str, str]:
        """The (cached) metric attributes for a tool name and status."""
        attributes = self._attributes.get(key)
        if attributes is None:
            attributes = {"gen_ai.tool.name": key[0], "llmrtc.tool.status": key[1]}
            self._attributes[key] = attributes
        return attributes

    def queue_attributes(self, name: str) -> dict[str, str]:
        """The (cached) queue-time metric attributes for a tool that ran."""
        attributes = self._queue_attributes.get(name)
        if attributes is None:
            attributes = self._queue_attributes[name] = {"gen_ai.tool.name": name}
        return attributes

    def _observe_calls(self, options: CallbackOptions) -> Iterable[Observation]:
        # list() copies under the GIL: the exporter thread may collect while the loop counts.
        for (name, status), count in list(self.calls.items()):
            yield Observation(count, {"gen_ai.tool.name": name, "llmrtc.tool.status": status})
        for (name, status), count in list(self.reused.items()):
            yield Observation(
                count,
                {
                    "gen_ai.tool.name": name,
                    "llmrtc.tool.status": status,
                    "llmrtc.tool.reused": True,
                },
            )

    def _observe_breakers(self, options: CallbackOptions) -> Iterable[Observation]:
        for name, state in list(self.breaker_states.items()):
            yield Observation(state, {"gen_ai.tool.name": name})

    def _observe_in_flight(self, options: CallbackOptions) -> Iterable[Observation]:
        for name, count in list(self.in_flight.items()):
            yield Observation(count, {"gen_ai.tool.name": name})


_instruments_lock = threading.Lock()
_instruments: dict[int, tuple[Meter, Instruments]] = {}


def instruments_for(meter: Meter) -> Instruments:
    """The instruments of `meter`, created on first use."""
    with _instruments_lock:
        entry = _instruments.get(id(meter))
        if entry is None or entry[0] is not meter:
            entry = (meter, Instruments(meter))
            _instruments[id(meter)] = entry
        return entry[1]
