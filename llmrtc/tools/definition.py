"""`ToolDefinition`: what a model is told about a tool, and how the executor should run it."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from llmrtc.tools._schema import compact_model_schema
from llmrtc.tools.arguments import ArgumentSchema, ArgumentsError, compile_validator
from llmrtc.tools.breaker import CircuitBreaker
from llmrtc.tools.ids import DEFAULT_TOOL_VERSION, format_tool_id, parse_tool_id, to_wire_name
from llmrtc.tools.retry import RetryPolicy

if TYPE_CHECKING:
    from llmrtc.tools.calls import ToolCall

__all__ = [
    "DuplicatePolicy",
    "ExecutionPolicy",
    "InterruptPolicy",
    "REASONING_FIELD",
    "ToolDefinition",
    "TOOL_NAME_PATTERN",
]

logger = logging.getLogger(__name__)

ExecutionPolicy = Literal["parallel", "sequential"]
"""`"parallel"` calls of a batch run concurrently; a `"sequential"` call is a barrier in request
order."""

InterruptPolicy = Literal["cancel", "finish"]
"""What a barge-in (an abort of the turn) does to a running call: `"cancel"` cancels its handler
(result `aborted`); `"finish"` lets it run to completion under its own timeout (a payment, a
booking), and its real result answers the call."""

DuplicatePolicy = Literal["allow", "reuse", "reject"]
"""What the executor does with a duplicate call — the same tool with the same arguments in the
same session while the first call runs or soon after it succeeded (a voice model repeating a
booking after a barge-in): `"allow"` runs it again; `"reuse"` answers it with the first call's
result without running the handler; `"reject"` answers it with status `"duplicate"`."""

RESOURCE_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")
"""Names of the resources a tool holds while it runs (`ToolDefinition.resources`)."""

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Tool names OpenAI-style chat APIs accept."""

_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}

REASONING_FIELD = "_reasoningForCall"
"""The optional argument in which a model says why it chose a tool (seed 002)."""


@dataclass(frozen=True, eq=False)
class ToolDefinition:
    """The contract of one tool: its name, what it does, its arguments and how it runs.

    Invalid definitions raise `ValueError` here, when the tool is defined, never during a call.

    Example:
        ToolDefinition(
            name="lookupWeather",
            description="Current weather for a city.",
            parameters={"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]},
            timeout=5.0,
        )
    """

    name: str
    """Unique tool name; must match `^[a-zA-Z0-9_-]{1,64}$`."""
    description: str = ""
    """What the tool does, written for the model."""
    parameters: dict[str, Any] | type[BaseModel] = field(
        default_factory=lambda: dict(_EMPTY_OBJECT_SCHEMA)
    )
    """A JSON Schema object (`{"type": "object", ...}`) or a pydantic model class. After
    construction this is always the JSON Schema dict; the model class is kept in
    `parameters_model` and the handler then receives a validated model instance."""
    execution_policy: ExecutionPolicy | None = None
    """`"parallel"`, `"sequential"`, or None to use the executor's default policy."""
    timeout: float | None = None
    """Seconds the handler may run; overrides the executor default. `math.inf` means no limit."""
    sensitive_fields: Sequence[str] = ()
    """Argument/result keys whose values are always masked in recorded telemetry content, at
    any depth and wherever the value reappears (stored as a tuple)."""
    on_interrupt: InterruptPolicy = "cancel"
    """What an abort of the batch's signal (a barge-in aborting the turn, or that signal's
    deadline) does to a call of this tool: `"cancel"` (default) cancels it at once (result
    `aborted`); `"finish"` lets a call whose handler already started complete under its own
    timeout with its real result (its `ToolContext.abort_signal` does not follow the turn's).
    A `"finish"` call still queued (for a concurrency slot, or behind a sequential call) is
    aborted. Its own timeout, and cancelling `execute()` from outside (session teardown),
    still stop it."""
    background: bool = False
    """The call outlives its batch: it is validated and started like any call, but the batch
    does not wait for it. The batch answers it at once with a result of status `"running"`
    (telling the model that the work goes on and that the result will follow), and the call
    runs on under its own timeout, not stopped by an abort of the batch (a barge-in). Its one
    final result is reported to the hooks as usual and delivered by
    `ToolExecutor.background_results()`; `ToolExecutor.cancel_call` stops it."""
    on_duplicate: DuplicatePolicy = "allow"
    """What a duplicate call does (see `DuplicatePolicy`): a call to this tool with the same
    arguments (compared after parsing and default filling) in the same `session_id`, while the
    first runs or within the executor's `duplicate_window` after it ended `ok`. A first call
    that failed, timed out or was aborted is never reused; calls without a `session_id` are
    never duplicates."""
    retry: RetryPolicy | None = None
    """Try a failed call again (see `RetryPolicy`): by default any exception but `ToolError`,
    and a timed-out attempt when `attempt_timeout` is set; all attempts inside `timeout`. A
    tool with `side_effects` and `on_duplicate="allow"` is retried only if it opts in
    (`RetryPolicy(retry_side_effects=True)`; a warning is logged when it is defined)."""
    breaker: CircuitBreaker | None = None
    """Stop calling a failing backend for a while (see `CircuitBreaker`): after that many
    consecutive failed calls, calls end at once with status `"unavailable"`."""
    resources: Sequence[str] = ()
    """Named resources a call holds while it runs (`("crm",)`): the executor's
    `resource_limits` caps how many calls hold each at once, across all batches, FIFO.
    Stored sorted, without repeats (the order they are taken in)."""
    needs_approval: bool | Callable[[ToolCall], bool] = False
    """Ask the executor's `approver` before each call runs (or a predicate deciding per call,
    given the call with its parsed arguments). Denied, or no answer within `approval_timeout`:
    status `"denied"`."""
    namespace: str | None = None
    """Groups tools (`crm`, `billing`): a namespaced tool is named `namespace.name` wherever
    users and the model see it and `namespace__name` on the wire. `name="crm.lookup"` sets it
    too."""
    version: str = DEFAULT_TOOL_VERSION
    """Semver `MAJOR.MINOR.PATCH`; part of `tool_id`."""
    tags: Sequence[str] = ()
    """Keywords for catalog search and filtering (stored as a tuple)."""
    aliases: Sequence[str] = ()
    """Other names or phrases the tool is found by, in any language (`"lire un fichier"`)."""
    side_effects: Sequence[str] = ()
    """What calling it changes in the world, in words (`"charges the card"`); empty for a
    read-only tool. Shown by discovery's `get_tool`."""
    examples: Sequence[Mapping[str, Any]] = ()
    """Example argument objects, each valid against `parameters` (checked here)."""
    output_schema: dict[str, Any] | None = None
    """A JSON Schema of what the tool returns (checked here). A tool defined without a
    handler is latent (`define_tool(definition)`): the model writes its result itself, in an
    `_output` argument that must match this schema (see `llmrtc.tools.offer`)."""
    parameters_model: type[BaseModel] | None = field(default=None, init=False)
    """The pydantic model the parameters came from, if any."""
    retries: bool = field(default=False, init=False)
    """Its `retry` policy applies: set, and not withheld from a tool with `side_effects` and
    `on_duplicate="allow"` that did not opt in (`RetryPolicy.retry_side_effects`)."""
    has_policies: bool = field(default=False, init=False)
    """Any of `on_duplicate`, `retry`, `breaker`, `resources` or `needs_approval` is set."""
    reasoning_for_call: bool = field(default=False, init=False)
    """The parameters declare the optional `_reasoningForCall` string (the model says why it
    chose the tool): the executor strips it from the arguments before validation and the
    handler, and records it on hooks and spans. Set by `with_reasoning_field`."""

    def __post_init__(self) -> None:
        self._qualify_name()
        if not isinstance(self.name, str) or not TOOL_NAME_PATTERN.match(self.local_name):
            raise ValueError(
                f"invalid tool name {self.name!r}: names must be 1-64 characters of letters, "
                "digits, '_' or '-' (pattern ^[a-zA-Z0-9_-]{1,64}$)"
            )
        if len(self.wire_name) > 64:
            raise ValueError(
                f"tool {self.name!r}: its wire name {self.wire_name!r} is longer than the 64 "
                "characters chat APIs accept; shorten the namespace or the name"
            )
        if not isinstance(self.description, str):
            raise ValueError(f"tool {self.name!r}: description must be a string")
        params = self.parameters
        if isinstance(params, type) and issubclass(params, BaseModel):
            object.__setattr__(self, "parameters_model", params)
            object.__setattr__(self, "parameters", compact_model_schema(params))
        elif not isinstance(params, dict):
            raise ValueError(
                f"tool {self.name!r}: parameters must be a JSON Schema dict or a pydantic model "
                f"class, got {type(params).__name__}"
            )
        if self.parameters.get("type") != "object":  # type: ignore[union-attr]
            raise ValueError(
                f"tool {self.name!r}: parameters must be a JSON Schema of type 'object' "
                f"(got type {self.parameters.get('type')!r})"  # type: ignore[union-attr]
            )
        fields = self.sensitive_fields
        if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
            raise ValueError(
                f"tool {self.name!r}: sensitive_fields must be a list of key names, got {fields!r}"
            )
        object.__setattr__(self, "sensitive_fields", tuple(fields))
        if self.execution_policy not in (None, "parallel", "sequential"):
            raise ValueError(
                f"tool {self.name!r}: execution_policy must be 'parallel', 'sequential' or None, "
                f"got {self.execution_policy!r}"
            )
        if self.timeout is not None and (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, int | float)
            or math.isnan(self.timeout)
            or self.timeout <= 0
        ):
            raise ValueError(
                f"tool {self.name!r}: timeout must be a positive number of seconds (math.inf for "
                f"no limit) or None, got {self.timeout!r}"
            )
        if self.on_interrupt not in ("cancel", "finish"):
            raise ValueError(
                f"tool {self.name!r}: on_interrupt must be 'cancel' or 'finish', "
                f"got {self.on_interrupt!r}"
            )
        if not isinstance(self.background, bool):
            raise ValueError(
                f"tool {self.name!r}: background must be True or False, got {self.background!r}"
            )
        self._check_metadata()
        self._check_policies()
        try:
            validator = compile_validator(
                self.parameters,  # type: ignore[arg-type]
                model=self.parameters_model,
                tool_name=self.name,
            )
        except ValueError as exc:
            raise ValueError(f"tool {self.name!r}: {exc}") from None
        self._check_output_schema()
        properties = self.parameters.get("properties")  # type: ignore[union-attr]
        reasons = isinstance(properties, dict) and REASONING_FIELD in properties
        object.__setattr__(self, "reasoning_for_call", reasons)
        # Compiled once here; every call of this tool reuses it.
        object.__setattr__(self, "_validator", validator)
        self._check_examples()

    def _qualify_name(self) -> None:
        """`name="crm.lookup"` or `name="lookup", namespace="crm"` → `name == "crm.lookup"`."""
        name, namespace = self.name, self.namespace
        if not isinstance(name, str):
            raise ValueError(f"invalid tool name {name!r}: expected a string")
        if namespace is not None:
            if not isinstance(namespace, str):
                raise ValueError(f"tool {name!r}: namespace must be a string or None")
            try:
                format_tool_id(namespace, "x")  # checks the namespace's characters
            except ValueError as exc:
                reason = str(exc).split(": ", 1)[-1]  # drop the "tool id '…:x'" prefix
                raise ValueError(f"tool {name!r}: {reason}") from None
            if name.startswith(namespace + "."):
                name = name[len(namespace) + 1 :]
        elif "." in name:
            namespace, _, name = name.partition(".")
            try:
                format_tool_id(namespace, "x")
            except ValueError as exc:
                reason = str(exc).split(": ", 1)[-1]  # drop the "tool id '…:x'" prefix
                raise ValueError(
                    f"invalid tool name {self.name!r}: a dotted name is 'namespace.name', and "
                    f"{reason}"
                ) from None
        if namespace is not None and "." in name:
            raise ValueError(
                f"invalid tool name {self.name!r}: only one '.' is allowed (namespace.name)"
            )
        object.__setattr__(self, "namespace", namespace)
        object.__setattr__(self, "name", f"{namespace}.{name}" if namespace else name)

    def _check_policies(self) -> None:
        name = self.name
        if self.on_duplicate not in ("allow", "reuse", "reject"):
            raise ValueError(
                f"tool {name!r}: on_duplicate must be 'allow', 'reuse' or 'reject', "
                f"got {self.on_duplicate!r}"
            )
        retry = self.retry
        if retry is not None:
            if not isinstance(retry, RetryPolicy):
                raise ValueError(
                    f"tool {name!r}: retry must be a RetryPolicy or None, got {retry!r}"
                )
            if not retry.retry_status_errors:
                raise ValueError(
                    f"tool {name!r}: RetryPolicy.retry_status_errors applies to model requests "
                    "only; choose what a tool retries with retry_on"
                )
            if self.side_effects and self.on_duplicate == "allow" and not retry.retry_side_effects:
                # A retry could do them twice: not retried unless the tool opts in.
                logger.warning(
                    "tool %r has side effects (%s) and on_duplicate='allow': its retry policy "
                    "does not apply (a retry could do them twice). Set on_duplicate='reuse' "
                    "or 'reject', or opt in with RetryPolicy(retry_side_effects=True)",
                    name,
                    ", ".join(self.side_effects),
                )
            else:
                object.__setattr__(self, "retries", True)
        if self.breaker is not None and not isinstance(self.breaker, CircuitBreaker):
            raise ValueError(
                f"tool {name!r}: breaker must be a CircuitBreaker or None, got {self.breaker!r}"
            )
        resources = self.resources
        if isinstance(resources, str) or not all(
            isinstance(r, str) and RESOURCE_NAME_PATTERN.match(r) for r in resources
        ):
            raise ValueError(
                f"tool {name!r}: resources must be a list of names of 1-64 letters, digits, "
                f"'_', '.' or '-', got {resources!r}"
            )
        object.__setattr__(self, "resources", tuple(sorted(set(resources))))
        approval = self.needs_approval
        if not isinstance(approval, bool) and not callable(approval):
            raise ValueError(
                f"tool {name!r}: needs_approval must be True, False or a callable "
                f"(call) -> bool, got {approval!r}"
            )
        # Read once per call by the executor: a tool with none of these pays one test.
        object.__setattr__(
            self,
            "has_policies",
            self.on_duplicate != "allow"
            or retry is not None
            or self.breaker is not None
            or bool(self.resources)
            or approval is not False,
        )

    def _check_metadata(self) -> None:
        try:
            parse_tool_id(f"x@{self.version}")
        except ValueError:
            raise ValueError(
                f"tool {self.name!r}: version must be semver MAJOR.MINOR.PATCH (e.g. 1.2.0), "
                f"got {self.version!r}"
            ) from None
        for key in ("tags", "aliases", "side_effects"):
            values = getattr(self, key)
            if isinstance(values, str) or not all(isinstance(v, str) and v.strip() for v in values):
                raise ValueError(
                    f"tool {self.name!r}: {key} must be a list of non-empty strings, got {values!r}"
                )
            object.__setattr__(self, key, tuple(values))
        if isinstance(self.examples, Mapping) or not all(
            isinstance(e, Mapping) for e in self.examples
        ):
            raise ValueError(
                f"tool {self.name!r}: examples must be a list of argument objects, "
                f"got {self.examples!r}"
            )
        object.__setattr__(self, "examples", tuple(dict(e) for e in self.examples))

    def _check_output_schema(self) -> None:
        schema = self.output_schema
        if schema is None:
            return
        if not isinstance(schema, dict):
            raise ValueError(
                f"tool {self.name!r}: output_schema must be a JSON Schema dict or None, "
                f"got {type(schema).__name__}"
            )
        try:
            compile_validator(schema)
        except ValueError as exc:
            reason = str(exc).replace("parameters", "output_schema", 1)
            raise ValueError(f"tool {self.name!r}: {reason}") from None

    def _check_examples(self) -> None:
        # The very check a call gets (`validate_tool_arguments`), on the schema compiled above.
        validator: ArgumentSchema = self._validator  # type: ignore[attr-defined]
        for index, example in enumerate(self.examples):
            try:
                validator.prepare(example)
            except ArgumentsError as exc:
                raise ValueError(
                    f"tool {self.name!r}: examples[{index}] does not match the parameters: "
                    + "; ".join(exc.errors)
                ) from None

    @property
    def local_name(self) -> str:
        """The name without its namespace (`lookup` for `crm.lookup`)."""
        return self.name.rpartition(".")[2]

    @property
    def wire_name(self) -> str:
        """The name sent to chat APIs: `crm__lookup` for `crm.lookup`, else `name`."""
        return to_wire_name(self.name)

    @property
    def tool_id(self) -> str:
        """`namespace:name@version` (`name@version` without a namespace)."""
        return format_tool_id(self.namespace, self.local_name, self.version)

    @property
    def json_schema(self) -> dict[str, Any]:
        """The parameters as a JSON Schema dict (same as `parameters` after construction)."""
        return self.parameters  # type: ignore[return-value]

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat-completions form: `{"type": "function", "function": {...}}`."""
        return {
            "type": "function",
            "function": {
                "name": self.wire_name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def __repr__(self) -> str:
        return f"ToolDefinition(name={self.name!r}, execution_policy={self.execution_policy!r})"
