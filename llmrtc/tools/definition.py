"""`ToolDefinition`: what a model is told about a tool, and how the executor should run it."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from llmrtc.tools._schema import compact_model_schema
from llmrtc.tools.validation import compile_validator

__all__ = ["ExecutionPolicy", "ToolDefinition", "TOOL_NAME_PATTERN"]

ExecutionPolicy = Literal["parallel", "sequential"]
"""`"parallel"` calls of a batch run concurrently; a `"sequential"` call is a barrier in request
order."""

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""Tool names OpenAI-style chat APIs accept."""

_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


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
    parameters_model: type[BaseModel] | None = field(default=None, init=False)
    """The pydantic model the parameters came from, if any."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME_PATTERN.match(self.name):
            raise ValueError(
                f"invalid tool name {self.name!r}: names must be 1-64 characters of letters, "
                "digits, '_' or '-' (pattern ^[a-zA-Z0-9_-]{1,64}$)"
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
        try:
            validator = compile_validator(self.parameters)  # type: ignore[arg-type]
        except ValueError as exc:
            raise ValueError(f"tool {self.name!r}: {exc}") from None
        # Compiled once here; every call of this tool reuses it.
        object.__setattr__(self, "_validator", validator)

    @property
    def json_schema(self) -> dict[str, Any]:
        """The parameters as a JSON Schema dict (same as `parameters` after construction)."""
        return self.parameters  # type: ignore[return-value]

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat-completions form: `{"type": "function", "function": {...}}`."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def __repr__(self) -> str:
        return f"ToolDefinition(name={self.name!r}, execution_policy={self.execution_policy!r})"
