"""`ModelPool`: the models LLM-backed tools run on, opened once per provider and closed together.

The catalog (floor 1) may not import `llmrtc.llm` (floor 2), so it declares what it needs from
a model as a protocol: `PromptProvider`, anything with `async complete_prompt(prompt, *,
abort_signal)`. `OpenAIProvider` and `llmrtc.testing.ScriptedLLM` have that method; any other
`LLMProvider` gets it from `llmrtc.llm.PromptCompleter(provider)`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

import anyio

from llmrtc.abort import AbortSignal
from llmrtc.errors import LLMRTCError
from llmrtc.telemetry.hooks import Hooks

__all__ = [
    "MissingCredentialsError",
    "ModelPool",
    "ModelUnavailableError",
    "PromptProvider",
    "PromptResult",
    "ProviderFactory",
    "ToolPrompt",
    "parse_model_id",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolPrompt:
    """One request an LLM-backed tool sends: a system prompt and one user message, no tools."""

    system: str
    """The system prompt (the tool's instructions, plus the JSON rules for JSON output)."""
    user: str
    """The user message (the rendered template)."""
    model: str | None = None
    """The model part of `provider/model`, sent with this request."""
    max_tokens: int | None = None
    """Output token limit (None: the provider's default)."""
    temperature: float | None = None
    """Sampling temperature (None: the provider's default)."""
    response_format: Mapping[str, Any] | None = None
    """An OpenAI `response_format` (the output schema as `json_schema`); a provider whose
    server does not honour it drops it."""


class PromptResult(Protocol):
    """What `PromptProvider.complete_prompt` returns (`llmrtc.llm.PromptCompletion` is one)."""

    @property
    def text(self) -> str:
        """The whole answer."""
        ...

    @property
    def model(self) -> str | None:
        """The model the server says answered."""
        ...

    @property
    def input_tokens(self) -> int | None:
        """Prompt tokens, when reported."""
        ...

    @property
    def output_tokens(self) -> int | None:
        """Completion tokens, when reported."""
        ...

    @property
    def stop_reason(self) -> str:
        """Why the answer ended (`stop`, `length`, `aborted`, ...)."""
        ...


@runtime_checkable
class PromptProvider(Protocol):
    """A model an LLM-backed tool can ask: `OpenAIProvider`, `ScriptedLLM`, or any provider
    wrapped in `llmrtc.llm.PromptCompleter`."""

    async def complete_prompt(
        self, prompt: Any, *, abort_signal: AbortSignal | None = None
    ) -> PromptResult:
        """Answer `prompt` (a `ToolPrompt`) whole; an abort ends it with `stop_reason`
        `aborted`. Raises (e.g. `LLMError`) when the request failed."""
        ...


ProviderFactory = Callable[[], Any]
"""Makes a provider: a sync or async callable returning a `PromptProvider`, or returning an
async context manager that yields one (`llmrtc.open_default_provider`). It raises
`MissingCredentialsError` when the provider cannot be used here."""


class MissingCredentialsError(LLMRTCError):
    """Raised by a provider factory that lacks what it needs (an API key): the pool marks the
    provider unavailable and LLM-backed tools skip its models.

    Example:
        def make_openai():
            key = os.environ.get("OPENAI_API_KEY")
            if not key:
                raise MissingCredentialsError("OPENAI_API_KEY")
            return OpenAIProvider("gpt-4o-mini", api_key=key)
    """

    def __init__(self, *keys: str, message: str | None = None) -> None:
        """Name the missing keys (environment variables, settings).

        Args:
            keys: The names of what is missing, e.g. `"OPENAI_API_KEY"`.
            message: Overrides the default message (`"missing OPENAI_API_KEY"`).
        """
        self.keys: tuple[str, ...] = keys
        """The names of the missing keys."""
        super().__init__(message or f"missing {' and '.join(keys) or 'credentials'}")


class ModelUnavailableError(LLMRTCError, RuntimeError):
    """No model of an LLM-backed tool can be used: their providers lack credentials (or the
    pool has no factory for them). Raised before any model request is sent; its text names
    the missing keys (for logs and hooks; the calling model is only told the tool failed)."""

    def __init__(self, message: str, *, missing_keys: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.missing_keys: tuple[str, ...] = tuple(missing_keys)
        """Every missing key named by the providers' factories, in the order tried."""


def parse_model_id(model_id: str) -> tuple[str, str]:
    """`"openai/gpt-4o-mini"` → `("openai", "gpt-4o-mini")`: split at the first `/`.

    Raises:
        ValueError: if either part is empty or there is no `/`.
    """
    if not isinstance(model_id, str):
        raise ValueError(f"a model id must be a string 'provider/model', got {model_id!r}")
    provider, slash, model = model_id.partition("/")
    if not slash or not provider.strip() or not model.strip():
        raise ValueError(
            f"model id {model_id!r} is not 'provider/model' (e.g. 'openai/gpt-4o-mini', "
            "'local/qwen2.5-coder-1.5b')"
        )
    return provider, model


def _compat_entry(tool_id: str, entry: Any) -> tuple[str, ...]:
    # The seed's compat file shape ({"recommended": [...]}) or a plain list of model ids.
    models = entry.get("recommended") if isinstance(entry, Mapping) else entry
    if isinstance(models, str) or not isinstance(models, Sequence):
        raise ValueError(
            f"compat[{tool_id!r}] must be a list of 'provider/model' ids or "
            f"{{'recommended': [...]}}, got {entry!r}"
        )
    for model_id in models:
        try:
            parse_model_id(model_id)
        except ValueError as exc:
            raise ValueError(f"compat[{tool_id!r}]: {exc}") from None
    return tuple(models)


def _given(provider: Any) -> ProviderFactory:
    # The factory of a provider handed in open: the pool already holds it, so this runs only
    # after aclose() (which raises before calling it) and never opens anything.
    def factory() -> Any:
        return provider

    return factory


class ModelPool:
    """The models LLM-backed tools (`define_llm_tool`) run on: give it to the executor.

    Example:
        pool = ModelPool({"local": open_default_provider, "openai": make_openai},
                         default_model="local/qwen2.5-coder-1.5b")
        async with pool:
            executor = ToolExecutor(registry, models=pool)
            ...

    Each provider is opened the first time a tool needs one of its models (once, also under
    concurrent calls), shared by every model id of that provider (the model part is sent per
    request), and closed by `aclose()` / leaving `async with`, in reverse order of opening.
    A factory raising `MissingCredentialsError` marks its provider unavailable for the pool's
    life; any other failure to open is that attempt's failure and is tried again next time.

    A factory returning an async context manager is entered in the task of the first call
    that needs it and left in the task that closes the pool: it must not hold a cancel scope
    or task group open across its `yield` (`open_default_provider` does not).
    """

    def __init__(
        self,
        factories: Mapping[str, ProviderFactory],
        *,
        compat: Mapping[str, Any] | None = None,
        default_model: str | None = None,
        hooks: Hooks | None = None,
    ) -> None:
        """Create a pool; nothing is opened yet.

        Args:
            factories: Provider name → factory (see `ProviderFactory`), or → an open provider
                (an object with `complete_prompt`, e.g. `OpenAIProvider(...)`: used as it is
                and never closed by the pool, its caller owns it); the name is the `provider`
                part of model ids.
            compat: Tool id → the models measured to do that tool well, cheapest first (a list
                of model ids, or the seed's `{"recommended": [...]}`); tried before the tool's
                own preference. A key may name a version (`util:summarize@1.0.0`) or not.
            default_model: Tried after every tool's own models (the last resort).
            hooks: Told about model fallbacks (`on_model_fallback`) and output warnings
                (`on_tool_warning`) of the tools run on this pool.

        Raises:
            ValueError: for a malformed model id, a compat entry that is not a list of them,
                or a default model whose provider has no factory.
        """
        self._providers: dict[str, Any] = {}
        self.factories: dict[str, ProviderFactory] = {}
        for name, factory in factories.items():
            if not isinstance(name, str) or not name or "/" in name:
                raise ValueError(f"provider name {name!r} must be a non-empty string without '/'")
            if callable(getattr(factory, "complete_prompt", None)):
                # An already-open provider (OpenAIProvider(...)): used as it is, and not
                # closed by the pool because the caller owns it.
                self._providers[name] = factory
                self.factories[name] = _given(factory)
            elif callable(factory):
                self.factories[name] = factory
            else:
                raise ValueError(
                    f"provider {name!r}: expected a factory (a callable) or an open provider "
                    f"(an object with complete_prompt()), got {factory!r}"
                )
        self.compat: dict[str, tuple[str, ...]] = {
            tool_id: _compat_entry(tool_id, entry) for tool_id, entry in (compat or {}).items()
        }
        if default_model is not None:
            provider, _ = parse_model_id(default_model)
            if provider not in self.factories:
                raise ValueError(
                    f"default_model {default_model!r}: no factory for provider {provider!r} "
                    f"(factories: {', '.join(sorted(self.factories)) or 'none'})"
                )
        self.default_model = default_model
        self.hooks = hooks
        self._unavailable: dict[str, MissingCredentialsError] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._stack = AsyncExitStack()
        self._closed = False

    def __repr__(self) -> str:
        opened = ", ".join(self._providers) or "none"
        return f"ModelPool(providers={sorted(self.factories)}, opened={opened})"

    def resolve(self, tool_id: str, preferred: str | None, fallbacks: Sequence[str]) -> list[str]:
        """The model ids a tool tries, in order: compat (for `tool_id`, or the id without its
        version), then `preferred`, then `fallbacks`, then the pool's default; each once."""
        unversioned = tool_id.partition("@")[0]
        chain = [
            *self.compat.get(tool_id, self.compat.get(unversioned, ())),
            *([preferred] if preferred else []),
            *fallbacks,
            *([self.default_model] if self.default_model else []),
        ]
        return list(dict.fromkeys(chain))

    def unavailable(self, provider: str) -> MissingCredentialsError | None:
        """Why `provider` cannot be used (its factory raised `MissingCredentialsError`, or
        the pool has no factory for it), or None while it may be."""
        if provider not in self.factories:
            known = ", ".join(sorted(self.factories)) or "none"
            return MissingCredentialsError(
                message=f"the pool has no factory for provider {provider!r} (it has: {known})"
            )
        return self._unavailable.get(provider)

    async def provider(self, name: str) -> Any:
        """The provider `name`, opened on first use (call it to warm a provider up).

        Raises:
            MissingCredentialsError: the provider is unavailable here.
            RuntimeError: the pool is closed.
            Exception: whatever the factory raised while opening it (tried again next time).
        """
        if name in self._providers:
            return self._providers[name]
        reason = self.unavailable(name)
        if reason is not None:
            raise reason
        lock = self._locks.get(name)
        if lock is None:
            lock = self._locks[name] = anyio.Lock()
        async with lock:  # concurrent first calls open it once
            if name not in self._providers:
                self._providers[name] = await self._open(name)
            return self._providers[name]

    async def _open(self, name: str) -> Any:
        if self._closed:
            raise RuntimeError(f"ModelPool is closed: cannot open provider {name!r}")
        try:
            made = self.factories[name]()
            if inspect.isawaitable(made):
                made = await made
        except MissingCredentialsError as exc:
            self._unavailable[name] = exc
            logger.info("model provider %r is unavailable: %s", name, exc)
            raise
        if hasattr(made, "__aenter__") and hasattr(made, "__aexit__"):
            # A context manager (open_default_provider): entered now, left by aclose().
            provider = await self._stack.enter_async_context(made)
        else:
            provider = made
            close: Callable[[], Awaitable[Any]] | None = getattr(provider, "aclose", None)
            if close is not None:
                self._stack.push_async_callback(close)
        if not callable(getattr(provider, "complete_prompt", None)):
            raise TypeError(
                f"provider {name!r} ({type(provider).__name__}) has no complete_prompt(); wrap "
                "an LLMProvider in llmrtc.llm.PromptCompleter(provider)"
            )
        logger.debug("model provider %r opened", name)
        return provider

    async def aclose(self) -> None:
        """Close every provider the pool opened, in reverse order; later use raises."""
        self._closed = True
        self._providers.clear()
        with anyio.CancelScope(shield=True):
            await self._stack.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
