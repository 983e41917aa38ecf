"""The models LLM-backed tools (`define_llm_tool`, `llmrtc.catalog.UTIL_TOOLS`) run on in a
command: one `ModelPool` with a single provider, `default`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llmrtc.catalog import ModelPool
    from llmrtc.llm import LLMProvider
    from llmrtc.tools import ToolRegistry

__all__ = ["default_model_pool", "has_llm_tools", "tool_models"]


def has_llm_tools(registry: ToolRegistry) -> bool:
    """Whether `registry` holds an LLM-backed tool (then the command needs a `ModelPool`)."""
    from llmrtc.catalog import LLMTool

    return any(isinstance(registry.get(name), LLMTool) for name in registry.names())


def _pool(provider: Any, model: str) -> ModelPool:
    """The pool of every command: `provider` as `default`, `model` its default model."""
    from llmrtc.catalog import ModelPool

    return ModelPool({"default": provider}, default_model=f"default/{model}")


def tool_models(llm: LLMProvider) -> ModelPool:
    """A `ModelPool` running LLM-backed tools on the command's own, already open `llm`
    (provider `default`, model `default/<llm.model>`); the pool never closes `llm`."""
    from llmrtc.llm import PromptCompleter

    provider: Any = llm if callable(getattr(llm, "complete_prompt", None)) else None
    if provider is None:
        provider = PromptCompleter(llm)
    return _pool(provider, getattr(llm, "model", None) or "default")


def default_model_pool() -> ModelPool:
    """A `ModelPool` whose one provider, `default`, is `llmrtc.open_default_provider` (opened
    at the first LLM-backed call, closed with the pool): the API that `OPENAI_API_KEY` /
    `OPENAI_BASE_URL` name (model `LLMRTC_MODEL`, default `gpt-4o-mini`), else the offline
    model. Its `default_model` is the model every LLM-backed tool falls back to."""
    from llmrtc.llm.default import DEFAULT_OPENAI_MODEL, open_default_provider

    model = os.environ.get("LLMRTC_MODEL")
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        model = model or DEFAULT_OPENAI_MODEL
    else:  # the offline server answers to any model name; send the one it loads
        from llmrtc.llm.local import LOCAL_MODELS

        model = LOCAL_MODELS.get(model or "1.5b", LOCAL_MODELS["1.5b"]).name
    return _pool(open_default_provider, model)
