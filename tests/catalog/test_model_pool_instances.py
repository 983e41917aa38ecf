"""`ModelPool` given an open provider (`{"openai": OpenAIProvider(...)}`) instead of a
factory: used as it is on the real `openai` client, and never closed by the pool (the caller
owns it); review R12 #6."""

from __future__ import annotations

import pytest

from llmrtc.catalog.llm_tools.model_pool import ModelPool, ToolPrompt
from llmrtc.llm import OpenAIProvider
from llmrtc.testing import ScriptedLLM, ScriptedOpenAIServer, text_reply

pytestmark = pytest.mark.anyio


class Owned(ScriptedLLM):
    def __init__(self) -> None:
        super().__init__(["owned answer"])
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_an_open_openai_provider_is_used_as_it_is() -> None:
    async with ScriptedOpenAIServer([text_reply("from the instance")]) as server:
        llm = OpenAIProvider("unused", base_url=server.base_url, api_key="test")
        async with ModelPool({"openai": llm}, default_model="openai/gpt-4o-mini") as pool:
            assert await pool.provider("openai") is llm
            assert pool.unavailable("openai") is None
            answer = await llm.complete_prompt(ToolPrompt(system="s", user="u", model="m-1"))
        assert answer.text == "from the instance"
        assert server.requests[0].body["model"] == "m-1"


async def test_an_open_provider_is_not_closed_by_the_pool_and_unusable_after_close() -> None:
    owned = Owned()
    pool = ModelPool({"mine": owned})
    async with pool:
        assert await pool.provider("mine") is owned
    assert owned.closed == 0
    with pytest.raises(RuntimeError, match="closed"):
        await pool.provider("mine")


def test_neither_factory_nor_provider_is_refused() -> None:
    with pytest.raises(ValueError, match="complete_prompt"):
        ModelPool({"a": object()})
