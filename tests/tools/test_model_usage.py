"""`ModelUsage`: an LLM-backed tool reports its models on its context; the executor puts the
report on the call's result and its end hook, and hands `models=` to every handler."""

from __future__ import annotations

from typing import Any

import pytest

from llmrtc import (
    ToolCall,
    ToolContext,
    ToolDefinition,
    ToolExecutor,
    ToolRegistry,
    define_tool,
)
from llmrtc.testing import RecordingHooks
from llmrtc.tools import ModelUsage

pytestmark = pytest.mark.anyio


def _registry(fail: bool) -> ToolRegistry:
    async def handler(args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.report_model_usage(
            ModelUsage(model=f"pool/{ctx.models}", attempts=2, input_tokens=5, output_tokens=3)
        )
        if fail:
            raise RuntimeError("every model failed")
        return "done"

    registry = ToolRegistry()
    registry.register(
        define_tool(ToolDefinition(name="summarize", description="Summarise"), handler)
    )
    return registry


@pytest.mark.parametrize("fail", [False, True])
async def test_usage_reaches_result_and_hook(fail: bool) -> None:
    hooks = RecordingHooks()
    executor = ToolExecutor(_registry(fail), models="M", hooks=hooks)
    [result] = await executor.execute([ToolCall("c1", "summarize", {})])
    assert result.status == ("error" if fail else "ok")
    assert result.model_usage == ModelUsage("pool/M", 2, 5, 3)
    [end] = [e for e in hooks.events if type(e).__name__ == "ToolEndEvent"]
    assert end.model_usage == result.model_usage


async def test_plain_tools_have_no_usage() -> None:
    registry = ToolRegistry()
    registry.register(define_tool(ToolDefinition(name="t", description="d"), lambda a, c: 1))
    [result] = await ToolExecutor(registry).execute([ToolCall("c1", "t", {})])
    assert result.model_usage is None
    assert ToolContext("c", None).models is None  # type: ignore[arg-type]
