"""`llmrtc serve` warms the first prompt of a session when the model server keeps prompt
prefixes (`CompatProfile.prompt_cache`, on for the offline model): the handler's `warm()`,
in the background, and a failure only costs the first turn its head start."""

from __future__ import annotations

import logging

import pytest

from llmrtc import ToolExecutor, TurnRunner
from llmrtc.agent.handler import WarmableHandler
from llmrtc.cli.serve_process import _keeps_prompts, _warm
from llmrtc.llm.compat import CompatProfile
from llmrtc.llm.local.profile import LLAMA_CPP_PROFILE
from llmrtc.testing import ScriptedLLM
from llmrtc.tools import ToolRegistry

pytestmark = pytest.mark.anyio


def test_only_the_local_server_profile_keeps_prompt_prefixes() -> None:
    from llmrtc.llm import OpenAIProvider

    assert LLAMA_CPP_PROFILE.prompt_cache  # llama.cpp: warming pays
    assert not CompatProfile().prompt_cache  # a hosted API bills every request
    local = OpenAIProvider(
        "qwen", base_url="http://127.0.0.1:9/v1", api_key="k", compat=LLAMA_CPP_PROFILE
    )
    hosted = OpenAIProvider("gpt-4o-mini", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert _keeps_prompts(local) and not _keeps_prompts(hosted)
    assert not _keeps_prompts(ScriptedLLM([]))  # --fake-engines: its script is not spent


async def test_warm_sends_the_first_prompt_once() -> None:
    llm = ScriptedLLM(["x"])
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([])), system_prompt="Be brief.")
    assert isinstance(runner, WarmableHandler)
    await _warm(runner)
    (request,) = llm.requests
    assert request.messages[0].content == "Be brief." and request.settings.max_tokens == 1
    assert len(runner.history) == 0


async def test_a_failed_warm_up_is_logged_and_serving_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = TurnRunner(ScriptedLLM([]), ToolExecutor(ToolRegistry([])), system_prompt="Hi.")
    with caplog.at_level(logging.WARNING, logger="llmrtc.cli.serve_process"):
        await _warm(runner)  # the script is empty: the request fails
    assert "warming the first prompt failed" in caplog.text


async def test_a_handler_without_warm_is_left_alone() -> None:
    class Plain:  # an application's own TurnHandler, without warm()
        history = None

        def run_turn(self) -> None: ...
        def next_deadline(self) -> None: ...
        def run_timeout_turn(self) -> None: ...

    assert not isinstance(Plain(), WarmableHandler)
    await _warm(Plain())  # type: ignore[arg-type]  # nothing to call, nothing raised
