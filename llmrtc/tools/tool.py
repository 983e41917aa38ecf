"""What a tool object is: a `ToolDefinition` bound to what answers its calls, either a handler
(`Tool`; `FunctionTool` from the `@tool` decorator) or the calling model itself (`LatentTool`);
`define_tool` makes either, from a definition or seed 002's schema form.

A latent tool has no handler. Its offered schema requires `_output` (the tool's output schema):
the model writes the result in its own call, and that value, checked against the output schema,
is the call's result. Everything else is an ordinary tool: the executor runs it (hooks, spans,
one result per call), and a missing or invalid `_output` is an `invalid_arguments` result the
model can correct (`llmrtc.tools.offer.unwrap_arguments`).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import sys
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, overload

from pydantic import BaseModel

from llmrtc.tools._signature import signature_model
from llmrtc.tools.arguments import ArgumentSchema, compile_validator
from llmrtc.tools.breaker import CircuitBreaker
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.context import ToolContext
from llmrtc.tools.definition import (
    DuplicatePolicy,
    ExecutionPolicy,
    InterruptPolicy,
    ToolDefinition,
)
from llmrtc.tools.ids import DEFAULT_TOOL_VERSION
from llmrtc.tools.retry import RetryPolicy
from llmrtc.tools.schema_form import OUTPUT_FIELD, definition_from_schema

logger = logging.getLogger(__name__)

__all__ = [
    "FunctionTool",
    "LatentTool",
    "Tool",
    "ToolDefinitionWarning",
    "ToolHandler",
    "define_tool",
    "latent_tool",
    "tool",
]

_OUTPUT_NOTE = (
    "The result of this tool: you produce it yourself, from what you know, as a value "
    "matching this schema."
)
_SUMMARY_CHARS = 300


class ToolDefinitionWarning(UserWarning):
    """`@tool` made a tool a model cannot use well: no description, or untyped parameters.

    The tool still works; the warning points at the decorator line. Turn it into an error with
    `warnings.simplefilter("error", ToolDefinitionWarning)`, or silence it the same way.
    """


ToolHandler = Callable[[Any, ToolContext], Any] | Callable[[Any, ToolContext], Awaitable[Any]]
"""`handler(args, ctx)`: `args` is a dict, or a validated model instance when the definition's
parameters are a pydantic model. `async def` runs on the event loop; a plain `def` runs in a
worker thread so it can never block the loop."""


def _is_async_callable(fn: Callable[..., Any]) -> bool:
    # unwrap: a functools.wraps decorator around an async function is still async.
    candidates = (fn, inspect.unwrap(fn), getattr(fn, "__call__", None))  # noqa: B004
    return any(inspect.iscoroutinefunction(candidate) for candidate in candidates)


class Tool:
    """A `ToolDefinition` and its handler. Create with `define_tool` or `@tool`."""

    __slots__ = ("definition", "handler", "is_async")
    latent: ClassVar[bool] = False
    """True for a `LatentTool` (no handler: the calling model writes the result)."""

    def __init__(self, definition: ToolDefinition, handler: ToolHandler) -> None:
        """Bind `handler` to `definition` (prefer `define_tool`, which checks the handler)."""
        self.definition = definition
        self.handler = handler
        self.is_async = _is_async_callable(handler)
        """True for `async def` handlers (run on the loop); False ones run in a worker thread."""

    @property
    def name(self) -> str:
        """The tool's name (`definition.name`)."""
        return self.definition.name

    def __repr__(self) -> str:
        kind = "async" if self.is_async else "sync"
        return f"<Tool {self.definition.name!r} ({kind})>"


class FunctionTool(Tool):
    """A `Tool` made by `@tool` from a function; calling it calls the original function."""

    __slots__ = ("__dict__", "__wrapped__")

    def __init__(self, definition: ToolDefinition, handler: ToolHandler, fn: Callable[..., Any]):
        super().__init__(definition, handler)
        self.__wrapped__ = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the decorated function directly, exactly as if it were not decorated."""
        return self.__wrapped__(*args, **kwargs)


def define_tool(
    definition: ToolDefinition | Mapping[str, Any], handler: ToolHandler | None = None
) -> Tool:
    """Bind a handler to a definition, or make a latent tool without one.

    Without a handler the tool is latent (`LatentTool`): its offered
    schema requires an `_output` argument matching the output schema, the calling model fills
    it, and that value is the call's result.

    Example:
        weather = define_tool(ToolDefinition(name="lookupWeather", ...), lookup_weather)
        sentiment = define_tool(ToolDefinition(name="sentiment", parameters=...,
                                               output_schema={"type": "string"}))

    Args:
        definition: The tool's contract: a `ToolDefinition`, or a JSON Schema in seed 002's
            form (`_tool` names the tool, `_output` is its output schema, an optional
            `_reasoningForCall` property offers that field).
        handler: `handler(args, ctx)`, `async def` or plain `def` (plain functions run in a
            thread); None for a latent tool.

    Raises:
        ValueError: if the handler is not callable or cannot take `(args, ctx)`, if a schema
            is not a tool schema, or if a latent tool has no output schema.
    """
    if not isinstance(definition, ToolDefinition):
        definition = definition_from_schema(definition)
    if handler is None:
        return latent_tool(definition)
    if not callable(handler):
        raise ValueError(f"tool {definition.name!r}: handler must be callable, got {handler!r}")
    try:
        inspect.signature(handler).bind(None, None)
    except TypeError:
        raise ValueError(
            f"tool {definition.name!r}: handler must accept two positional arguments "
            f"(args, ctx); its signature is {inspect.signature(handler)}"
        ) from None
    except ValueError:
        pass  # builtins without a signature: trust the caller
    return Tool(definition, handler)


class LatentTool(Tool):
    """A tool without a handler: the calling model writes its result in the `_output`
    argument, and that value (checked against `output_schema`) is the result. Make one with
    `define_tool(definition)` (no handler) or `define_tool(schema)` in seed 002's form."""

    __slots__ = ("_output_check", "output_schema")
    latent: ClassVar[bool] = True

    def __init__(self, definition: ToolDefinition, output_schema: dict[str, Any]) -> None:
        """Use `latent_tool` (it builds the offered definition with `_output` required)."""
        super().__init__(definition, _latent_handler)
        self.output_schema = output_schema
        """The JSON Schema `_output` must match."""
        self._output_check: ArgumentSchema = compile_validator(output_schema)

    def __repr__(self) -> str:
        return f"<LatentTool {self.definition.name!r}>"

    def output_errors(self, arguments: Mapping[str, Any]) -> list[str]:
        """What is wrong with the `_output` of `arguments` (empty when it is right), worded
        for the model: what is missing or wrong, and what is allowed."""
        allowed = f"it must match {_summary(self.output_schema)}"
        if OUTPUT_FIELD not in arguments:
            return [
                f"{OUTPUT_FIELD} is missing: tool {self.name!r} is answered by you, so write "
                f"its result in the {OUTPUT_FIELD} argument; {allowed}"
            ]
        try:
            errors = self._output_check.errors(arguments[OUTPUT_FIELD])
        except ValueError as exc:  # a value JSON cannot hold (from a Python caller)
            errors = [f"not a JSON value ({exc})"]
        if not errors:
            return []
        return [f"{OUTPUT_FIELD} is not a valid result: {'; '.join(errors)}; {allowed}"]


async def _latent_handler(args: Any, ctx: ToolContext) -> Any:
    # The executor checked `_output` before this runs (whatever its validate_arguments).
    return args[OUTPUT_FIELD]


def _summary(schema: Mapping[str, Any]) -> str:
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 1] + "…"


def latent_tool(definition: ToolDefinition) -> LatentTool:
    """The latent tool of `definition`: its offered parameters require `_output`.

    The output schema is the `_output` property the parameters already declare (seed form),
    else `definition.output_schema`.

    Raises:
        ValueError: when the definition gives no output schema at all.
    """
    if definition.retry is not None or definition.breaker is not None:
        # Nothing runs: the model writes the result, so nothing can fail or be retried.
        raise ValueError(
            f"tool {definition.name!r} has no handler (it is latent): retry and breaker "
            "apply only to tools that run a handler"
        )
    parameters = definition.json_schema
    properties = dict(parameters.get("properties") or {})
    output = properties.get(OUTPUT_FIELD)
    if output is None:
        output = definition.output_schema
    if not isinstance(output, dict):
        raise ValueError(
            f"tool {definition.name!r} has no handler, so it is latent: the model writes its "
            f"result, and it needs a schema for that result: pass output_schema={{...}} to "
            f"ToolDefinition or declare an {OUTPUT_FIELD!r} property (or give a handler)"
        )
    offered_output = dict(output)
    offered_output.setdefault("description", _OUTPUT_NOTE)
    properties[OUTPUT_FIELD] = offered_output
    required = [name for name in parameters.get("required", ()) if name != OUTPUT_FIELD]
    offered = {**parameters, "properties": properties, "required": [*required, OUTPUT_FIELD]}
    # A pydantic parameters model cannot hold `_output`: the latent tool validates a dict.
    latent = replace(definition, parameters=offered, output_schema=output)
    return LatentTool(latent, output)


def _function_handler(
    fn: Callable[..., Any], context_param: str | None, positional: tuple[str, ...]
) -> ToolHandler:
    def arguments(args: BaseModel, ctx: ToolContext) -> tuple[list[Any], dict[str, Any]]:
        # Field values straight from the instance, so nested models stay model instances.
        kwargs = dict(args.__dict__)
        pos = [kwargs.pop(name) for name in positional]
        if context_param is not None:
            kwargs[context_param] = ctx
        return pos, kwargs

    if _is_async_callable(fn):

        async def async_handler(args: BaseModel, ctx: ToolContext) -> Any:
            pos, kwargs = arguments(args, ctx)
            return await fn(*pos, **kwargs)

        return async_handler

    def sync_handler(args: BaseModel, ctx: ToolContext) -> Any:
        pos, kwargs = arguments(args, ctx)
        return fn(*pos, **kwargs)

    return sync_handler


def _warn_if_incomplete(definition: ToolDefinition, unannotated: tuple[str, ...]) -> None:
    # stacklevel 4: this helper, build(), tool() or decorate(), then the user's decorator line.
    if not definition.description.strip():
        warnings.warn(
            f"tool {definition.name!r} has no description, so the model sees only its name; "
            "add a docstring or pass @tool(description=...)",
            ToolDefinitionWarning,
            stacklevel=4,
        )
    for name in unannotated:
        warnings.warn(
            f"tool {definition.name!r}: parameter {name!r} has no type hint, so the model is "
            f"told nothing about it and any JSON value is accepted; annotate it (e.g. "
            f"'{name}: str')",
            ToolDefinitionWarning,
            stacklevel=4,
        )


@overload
def tool(fn: Callable[..., Any], /) -> FunctionTool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    execution_policy: ExecutionPolicy | None = None,
    timeout: float | None = None,
    sensitive_fields: Sequence[str] = (),
    on_interrupt: InterruptPolicy = "cancel",
    background: bool = False,
    on_duplicate: DuplicatePolicy = "allow",
    retry: RetryPolicy | None = None,
    breaker: CircuitBreaker | None = None,
    resources: Sequence[str] = (),
    needs_approval: bool | Callable[[ToolCall], bool] = False,
    namespace: str | None = None,
    version: str = DEFAULT_TOOL_VERSION,
    tags: Sequence[str] = (),
    aliases: Sequence[str] = (),
    side_effects: Sequence[str] = (),
    examples: Sequence[Mapping[str, Any]] = (),
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    execution_policy: ExecutionPolicy | None = None,
    timeout: float | None = None,
    sensitive_fields: Sequence[str] = (),
    on_interrupt: InterruptPolicy = "cancel",
    background: bool = False,
    on_duplicate: DuplicatePolicy = "allow",
    retry: RetryPolicy | None = None,
    breaker: CircuitBreaker | None = None,
    resources: Sequence[str] = (),
    needs_approval: bool | Callable[[ToolCall], bool] = False,
    namespace: str | None = None,
    version: str = DEFAULT_TOOL_VERSION,
    tags: Sequence[str] = (),
    aliases: Sequence[str] = (),
    side_effects: Sequence[str] = (),
    examples: Sequence[Mapping[str, Any]] = (),
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Make a tool from a function's signature and Google-style docstring.

    Type hints become the JSON Schema (pydantic handles `Literal`, `Enum`, `Optional`, defaults,
    nested models and `Annotated[..., Field(description=...)]`); the docstring summary becomes the
    description and its `Args:` entries the parameter descriptions. A parameter annotated
    `ToolContext` is injected at call time and hidden from the model.

    Example:
        @tool(timeout=5.0)
        async def lookupWeather(city: str, units: Literal["celsius", "fahrenheit"] = "celsius"):
            '''Current weather for a city.

            Args:
                city: City name, e.g. "Tokyo".
                units: Temperature units.
            '''

    Args:
        fn: The function (when used as a bare `@tool`).
        name: Tool name; defaults to the function's name.
        description: Overrides the docstring summary.
        execution_policy: `"parallel"`, `"sequential"` or None (the executor's default).
        timeout: Seconds the call may run; overrides the executor's default.
        sensitive_fields: Argument/result keys always masked in recorded telemetry content.
        on_interrupt: What a barge-in does to a running call: `"cancel"` (default) or
            `"finish"` (runs to completion under its own timeout; see `ToolDefinition`).
        background: The batch does not wait for the call: it is answered at once with a
            `"running"` result and its final result comes later (see `ToolDefinition`).
        on_duplicate: `"allow"` (default), `"reuse"` (a repeated call gets the first call's
            result; the handler runs once) or `"reject"` (status `"duplicate"`).
        retry: A `RetryPolicy`: failed attempts are tried again within `timeout`.
        breaker: A `CircuitBreaker`: after repeated failures, calls end `"unavailable"`.
        resources: Named resources a call holds while it runs (`ToolExecutor(resource_limits=)`).
        needs_approval: Ask the executor's `approver` first (True, or a per-call predicate).
        namespace: Groups the tool; it is then named `namespace.name` (wire: `namespace__name`).
        version: Semver of the tool (`tool_id` is `namespace:name@version`).
        tags: Keywords for catalog search and filtering.
        aliases: Other names or phrases (any language) the catalog finds the tool by.
        side_effects: What a call changes in the world, in words.
        examples: Example argument objects (checked against the schema).
    """

    def build(func: Callable[..., Any], call_site: dict[str, Any]) -> FunctionTool:
        tool_name = name or func.__name__
        signature = signature_model(func, tool_name, call_site)
        definition = ToolDefinition(
            name=tool_name,
            description=description if description is not None else signature.description,
            parameters=signature.model,
            execution_policy=execution_policy,
            timeout=timeout,
            sensitive_fields=sensitive_fields,
            on_interrupt=on_interrupt,
            background=background,
            on_duplicate=on_duplicate,
            retry=retry,
            breaker=breaker,
            resources=resources,
            needs_approval=needs_approval,
            namespace=namespace,
            version=version,
            tags=tags,
            aliases=aliases,
            side_effects=side_effects,
            examples=examples,
        )
        _warn_if_incomplete(definition, signature.unannotated)
        handler = _function_handler(func, signature.context_param, signature.positional)
        return FunctionTool(definition, handler, func)

    # The decorator's call site supplies names that postponed annotations refer to but the
    # function's globals lack: classes defined in the same function body.
    if fn is not None:
        return build(fn, sys._getframe(1).f_locals)

    def decorate(func: Callable[..., Any]) -> FunctionTool:
        return build(func, sys._getframe(1).f_locals)

    return decorate
