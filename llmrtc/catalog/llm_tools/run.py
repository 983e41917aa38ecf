"""How an LLM-backed tool answers one call: resolve its models on the pool, then per model
build the prompt (variant, template, JSON rules, token limit), ask, read the output, and fall
back to the next model when one fails; the usage goes onto the call's context throughout."""

from __future__ import annotations

import functools
import inspect
import json
import logging
from collections.abc import Sequence
from typing import Any

import anyio.lowlevel

from llmrtc.catalog.injection import estimate_tokens
from llmrtc.catalog.llm_tools.model_pool import (
    MissingCredentialsError,
    ModelPool,
    ModelUnavailableError,
    ToolPrompt,
    parse_model_id,
)
from llmrtc.catalog.llm_tools.spec import (
    UNSET,
    LLMToolSpec,
    MaxTokensContext,
    schema_error,
    select_variant,
)
from llmrtc.catalog.llm_tools.text import (
    OutputParseError,
    json_response_format,
    json_system_prompt,
    parse_json_output,
    render_template,
    shorten,
)
from llmrtc.errors import LLMRTCError
from llmrtc.telemetry.events import ModelFallbackEvent, ToolWarningEvent
from llmrtc.telemetry.hooks import emit
from llmrtc.tools.arguments import compile_validator
from llmrtc.tools.calls import ModelUsage
from llmrtc.tools.context import ToolContext
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.errors import ToolError
from llmrtc.tools.validation import prepare_arguments

__all__ = ["LLMToolError", "PromptRunner"]

logger = logging.getLogger(__name__)


class LLMToolError(ToolError):
    """An LLM-backed tool failed on every model it tried. Its text is safe for the calling
    model (what each model's output was wrong about, or that the model service failed);
    `failures` has the full reason per model, for logs."""

    def __init__(self, message: str, failures: Sequence[str]) -> None:
        super().__init__(message)
        self.failures: tuple[str, ...] = tuple(failures)
        """`"provider/model: why"` per model tried, in order."""


class _OutputError(LLMRTCError):
    """A model answered, but not with usable output. Its text is safe for the calling model."""


class PromptRunner:
    """The handler of one `LLMTool` (its `run` method)."""

    def __init__(self, definition: ToolDefinition, spec: LLMToolSpec) -> None:
        self.definition = definition
        self.spec = spec

    async def run(self, args: Any, ctx: ToolContext) -> Any:
        """Answer one call (the tool's handler)."""
        pool = ctx.models
        spec = self.spec
        if not isinstance(pool, ModelPool):
            raise RuntimeError(
                f"LLM tool {spec.tool_id!r} needs a ModelPool: ToolExecutor(registry, "
                f"models=ModelPool(...)) (ctx.models is {pool!r})"
            )
        preference = spec.model_preference
        models = pool.resolve(spec.tool_id, preference.preferred, preference.fallbacks)
        if not models:
            raise ModelUnavailableError(
                f"LLM tool {spec.tool_id!r} names no model: give it a model_preference or the "
                "pool a default_model"
            )
        # Defaults filled even when called outside an executor (idempotent under one).
        values = prepare_arguments(self.definition, args, validate=False)
        if spec.prepare_input is not None:
            prepared = spec.prepare_input(dict(values))
            values = await prepared if inspect.isawaitable(prepared) else prepared
        schema, validator = self._output_schema(values)
        failures: list[str] = []
        safe: list[str] = []
        missing: list[tuple[str, MissingCredentialsError]] = []
        attempts = 0
        last = models[-1]  # the model usage names the last model tried
        for index, model_id in enumerate(models):
            provider_name, model = parse_model_id(model_id)
            failure: Exception | None = None
            try:
                provider = await pool.provider(provider_name)
            except MissingCredentialsError as exc:
                missing.append((model_id, exc))
                failures.append(f"{model_id}: unavailable ({exc})")
                continue
            except Exception as exc:  # a provider that failed to open: this model failed
                failure = exc
            attempts += 1
            last = model_id
            ctx.report_model_usage(ModelUsage(model_id, attempts, failures=tuple(failures)))
            if failure is None:
                try:
                    output, result = await self._ask(provider, model_id, model, values, schema, ctx)
                except ToolError:
                    raise  # aborted: no other model is tried
                except Exception as exc:
                    failure = exc
            if failure is not None:
                if ctx.abort_signal.aborted:  # a request cut by the abort: not the model's fault
                    await anyio.lowlevel.checkpoint()
                    raise ToolError(f"{self.definition.name} was aborted") from failure
                output_error = isinstance(failure, _OutputError)
                why = str(failure) if output_error else _describe(failure)
                failures.append(f"{model_id}: {why}")
                safe.append(f"{model_id}: {failure if output_error else 'the model failed'}")
                ctx.report_model_usage(ModelUsage(model_id, attempts, failures=tuple(failures)))
                await self._fell_back(pool, ctx, model_id, why, models[index + 1 :], attempts)
                continue
            usage = ModelUsage(
                model_id,
                attempts,
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                failures=tuple(failures),
            )
            ctx.report_model_usage(usage)
            if validator is not None:
                await self._check_output(pool, ctx, model_id, output, validator)
            return output
        ctx.report_model_usage(ModelUsage(last, attempts, failures=tuple(failures)))
        if attempts == 0:
            raise self._unavailable(missing)
        logger.warning("LLM tool %r failed on every model: %s", spec.tool_id, "; ".join(failures))
        raise LLMToolError(
            f"{self.definition.name} failed on {attempts} model(s): " + "; ".join(safe),
            failures,
        )

    async def _ask(
        self,
        provider: Any,
        model_id: str,
        model: str,
        values: dict[str, Any],
        schema: dict[str, Any] | None,
        ctx: ToolContext,
    ) -> tuple[Any, Any]:
        spec = self.spec
        variant = select_variant(spec.variants, model_id)
        system_template = spec.system_prompt
        user_template = spec.user_template
        example = spec.output_example
        preference = spec.model_preference
        max_tokens, temperature = preference.max_tokens, preference.temperature
        if variant is not None:
            system_template = variant.system_prompt or system_template
            user_template = variant.user_template or user_template
            if variant.output_example is not UNSET:
                example = variant.output_example
            max_tokens = variant.max_tokens or max_tokens
            temperature = variant.temperature if variant.temperature is not None else temperature
        system = render_template(system_template, values)
        user = render_template(user_template, values)
        response_format = None
        if spec.output_format == "json":
            system = json_system_prompt(system, schema, example)
            response_format = json_response_format(self.definition.wire_name, schema)
        if spec.resolve_max_tokens is not None:
            provider_name, _ = parse_model_id(model_id)
            sizing = MaxTokensContext(
                model_id, provider_name, model, estimate_tokens(system) + estimate_tokens(user)
            )
            max_tokens = spec.resolve_max_tokens(values, sizing) or max_tokens
        prompt = ToolPrompt(
            system=system,
            user=user,
            model=model,
            max_tokens=max_tokens,
            temperature=temperature,
            response_format=response_format,
        )
        result = await provider.complete_prompt(prompt, abort_signal=ctx.abort_signal)
        if result.stop_reason == "aborted" or ctx.abort_signal.aborted:
            # The executor is cancelling this call (abort or timeout): let it, at once.
            await anyio.lowlevel.checkpoint()
            raise ToolError(f"{self.definition.name} was aborted")
        text = result.text.strip()
        if not text:
            raise _OutputError("the model returned an empty answer")
        if spec.output_format == "text":
            return text, result
        try:
            return parse_json_output(text), result
        except OutputParseError as exc:
            raise _OutputError(str(exc)) from exc

    async def _fell_back(
        self,
        pool: ModelPool,
        ctx: ToolContext,
        model_id: str,
        why: str,
        rest: list[str],
        attempts: int,
    ) -> None:
        following = [m for m in rest if pool.unavailable(parse_model_id(m)[0]) is None]
        if not following:
            return
        logger.warning(
            "LLM tool %r: model %s failed (%s); trying %s",
            self.spec.tool_id,
            model_id,
            why,
            following[0],
        )
        event = ModelFallbackEvent(
            tool_name=self.definition.name,
            tool_id=self.spec.tool_id,
            call_id=ctx.call_id,
            failed_model=model_id,
            error=why,
            next_model=following[0],
            attempt=attempts,
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
        )
        await emit(pool.hooks, event)

    def _output_schema(self, values: dict[str, Any]) -> tuple[dict[str, Any] | None, Any]:
        """The output schema of this call and its validator (None, None without one)."""
        spec = self.spec
        if spec.resolve_output_schema is None:
            return spec.output_schema, spec.output_validator
        schema = spec.resolve_output_schema(values)
        if schema is None:
            return spec.output_schema, spec.output_validator
        try:
            return schema, _compiled(json.dumps(schema, sort_keys=True))
        except (TypeError, ValueError) as exc:  # not JSON, or not a valid schema
            # Built from the arguments: the calling model can correct them.
            raise ToolError(
                f"{self.definition.name}: the output schema is invalid: {schema_error(exc)}"
            ) from None

    async def _check_output(
        self, pool: ModelPool, ctx: ToolContext, model_id: str, output: Any, validator: Any
    ) -> None:
        errors = validator.errors(output)
        if not errors:
            return
        message = "; ".join(errors)
        logger.warning(
            "LLM tool %r (call %s): the output of %s does not match output_schema: %s",
            self.spec.tool_id,
            ctx.call_id,
            model_id,
            shorten(message, 400),
        )
        event = ToolWarningEvent(
            tool_name=self.definition.name,
            tool_id=self.spec.tool_id,
            call_id=ctx.call_id,
            code="output_schema_mismatch",
            message=message,
            model=model_id,
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
        )
        await emit(pool.hooks, event)

    def _unavailable(
        self, missing: list[tuple[str, MissingCredentialsError]]
    ) -> ModelUnavailableError:
        keys = list(dict.fromkeys(key for _, exc in missing for key in exc.keys))
        reasons = "; ".join(f"{model_id}: {exc}" for model_id, exc in missing)
        needed = f" (set {' or '.join(keys)})" if keys else ""
        return ModelUnavailableError(
            f"LLM tool {self.spec.tool_id!r} has no usable model{needed}: {reasons}",
            missing_keys=keys,
        )


@functools.lru_cache(maxsize=64)
def _compiled(schema_json: str) -> Any:
    """A per-call output schema compiled once per distinct schema: checking and compiling one
    costs ~12 ms, four times the rest of a call (a classify call with the same labels, an
    extraction into the same schema)."""
    return compile_validator(json.loads(schema_json))


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    kind = type(exc).__name__
    return f"{kind}: {shorten(text, 300)}" if text else kind
