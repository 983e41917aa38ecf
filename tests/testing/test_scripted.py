"""ScriptedLLM, the scripted model users test their bots with: it fails loudly on an exhausted
script and on a history a chat API would refuse."""

from __future__ import annotations

import pytest

from llmrtc import ToolCall


def test_scripted_llm_fails_loudly() -> None:
    import anyio

    from llmrtc.llm import AssistantMessage, LLMRequest, SystemMessage, ToolMessage, UserMessage
    from llmrtc.testing import ScriptedLLM, ScriptExhaustedError

    async def main() -> None:
        llm = ScriptedLLM(["only one"])
        ok = LLMRequest([SystemMessage("s"), UserMessage("hi")])
        assert (await llm.complete(ok)).text == "only one"
        with pytest.raises(ScriptExhaustedError, match="has only 1"):
            await llm.complete(ok)
        bad_histories = {
            "first message must be the system prompt": [UserMessage("hi")],
            "have no tool message": [
                SystemMessage("s"),
                AssistantMessage("", (ToolCall("c1", "book", {}),)),
                UserMessage("next"),
            ],
            "no matching assistant tool call": [SystemMessage("s"), ToolMessage("zz", "{}")],
        }
        for message, messages in bad_histories.items():
            with pytest.raises(AssertionError, match=message):
                await ScriptedLLM(["x"]).complete(LLMRequest(messages))
        leftover = ScriptedLLM(["a", "b"])
        await leftover.complete(ok)
        with pytest.raises(AssertionError, match="1 scripted response"):
            leftover.assert_consumed()

    anyio.run(main)
