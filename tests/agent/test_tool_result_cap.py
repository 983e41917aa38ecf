"""Every tool result the model is sent has a size cap (`max_tool_result_chars`, 16 000 by
default): a longer one becomes a JSON note saying it was cut at K of M characters, holding
the start of the result. The caller's `ToolCallResult` keeps the whole result. (The same cap
on an MCP server's result: tests/catalog/test_mcp_official_servers.py.)"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from llmrtc import ToolCall, ToolExecutor, ToolRegistry, tool
from llmrtc.agent import ToolCallFinished, TurnCompleted, TurnRunner, TurnSettings
from llmrtc.agent.settings import DEFAULT_MAX_TOOL_RESULT_CHARS
from llmrtc.llm import ToolMessage
from llmrtc.playbook import Playbook, PlaybookOrchestrator
from llmrtc.testing import ScriptedLLM, ScriptedResponse
from llmrtc.testing.scripted import check_chat_messages

pytestmark = pytest.mark.anyio


@tool
async def read_log(lines: int) -> str:
    """Read the last lines of the log.

    Args:
        lines: How many lines.
    """
    return "\n".join(f'line {i}: "quoted" \\ text' for i in range(lines))


@tool
async def weather(city: str) -> dict[str, Any]:
    """Current weather.

    Args:
        city: The city.
    """
    return {"city": city, "temp": 21}


REGISTRY = ToolRegistry([read_log, weather])


async def tool_message_sent(
    lines: int, **options: Any
) -> tuple[str, ToolCallFinished, TurnCompleted]:
    """Run a turn whose model reads `lines` log lines; what the model was sent next."""
    llm = ScriptedLLM(
        [ScriptedResponse(tool_calls=[ToolCall("c1", "read_log", {"lines": lines})]), "Done."]
    )
    options.setdefault("system_prompt", "You read logs.")
    runner = TurnRunner(llm, ToolExecutor(REGISTRY), **options)
    events = [event async for event in runner.run_turn("What does the log say?")]
    check_chat_messages(runner.history.for_request("sys"))
    (message,) = [m for m in llm.requests[1].messages if isinstance(m, ToolMessage)]
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    completed = events[-1]
    assert isinstance(completed, TurnCompleted)
    return message.content, finished, completed


async def test_a_long_result_is_cut_for_the_model_with_a_note_saying_so() -> None:
    content, finished, completed = await tool_message_sent(20_000)
    text = finished.result.result
    assert isinstance(text, str) and len(text) > 500_000
    assert len(content) <= DEFAULT_MAX_TOOL_RESULT_CHARS
    cut = json.loads(content)  # still JSON, like every tool message
    # A string result: the string's own start, counted in its own characters (not its JSON).
    assert cut["truncated"] is True and cut["total_chars"] == len(text)
    assert cut["partial_result"] == text[: cut["shown_chars"]]
    assert f"first {cut['shown_chars']} of the {len(text)} characters of its text" in cut["note"]
    # Quotes and backslashes double when escaped once: most of the room still holds the text.
    assert cut["shown_chars"] > DEFAULT_MAX_TOOL_RESULT_CHARS * 0.6
    # The caller (and hooks) keep the whole result.
    assert completed.tool_results[0].result == text


@tool
async def quotes(count: int) -> str:
    """Quotes and backslashes.

    Args:
        count: How many pairs.
    """
    return '"\\' * count


async def test_a_string_result_is_escaped_once_not_twice() -> None:
    # Its JSON inside a JSON string would escape every quote and backslash twice (4 characters
    # each): the model saw 3,950 of them with a cap of 16,000.
    llm = ScriptedLLM(
        [ScriptedResponse(tool_calls=[ToolCall("c1", "quotes", {"count": 50_000})]), "Done."]
    )
    runner = TurnRunner(llm, ToolExecutor(ToolRegistry([quotes])), system_prompt="s")
    [event async for event in runner.run_turn("quote")]
    (message,) = [m for m in llm.requests[1].messages if isinstance(m, ToolMessage)]
    cut = json.loads(message.content)
    assert len(message.content) <= DEFAULT_MAX_TOOL_RESULT_CHARS
    assert cut["partial_result"] == ('"\\' * 50_000)[: cut["shown_chars"]]
    assert cut["shown_chars"] > 7_800 and cut["total_chars"] == 100_000


@tool
async def stats(rows: int) -> dict[str, Any]:
    """Many numbers.

    Args:
        rows: How many.
    """
    return {f"row{i}": i for i in range(rows)}


async def test_a_structured_result_shows_the_start_of_its_json() -> None:
    llm = ScriptedLLM(
        [ScriptedResponse(tool_calls=[ToolCall("c1", "stats", {"rows": 5000})]), "Done."]
    )
    runner = TurnRunner(
        llm, ToolExecutor(ToolRegistry([stats])), system_prompt="s", max_tool_result_chars=1000
    )
    events = [event async for event in runner.run_turn("stats")]
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    (message,) = [m for m in llm.requests[1].messages if isinstance(m, ToolMessage)]
    cut = json.loads(message.content)
    whole = finished.result.to_content()
    assert len(message.content) <= 1000 and cut["total_chars"] == len(whole)
    assert whole.startswith(cut["partial_result"]) and cut["partial_result"].startswith('{"row0"')
    assert "characters of its JSON text" in cut["note"]


@tool
async def failing(size: int) -> str:
    """Fails with a long message.

    Args:
        size: How long.
    """
    from llmrtc import ToolError

    raise ToolError("the disk said: " + "e" * size)


async def test_a_long_error_keeps_its_status_and_the_start_of_its_text() -> None:
    llm = ScriptedLLM(
        [ScriptedResponse(tool_calls=[ToolCall("c1", "failing", {"size": 50_000})]), "Sorry."]
    )
    runner = TurnRunner(
        llm, ToolExecutor(ToolRegistry([failing])), system_prompt="s", max_tool_result_chars=600
    )
    [event async for event in runner.run_turn("go")]
    (message,) = [m for m in llm.requests[1].messages if isinstance(m, ToolMessage)]
    sent = json.loads(message.content)
    assert len(message.content) <= 600
    assert sent["status"] == "error"  # the model still knows the call failed
    assert sent["error"].startswith("the disk said: eee")
    assert sent["error"].endswith("characters]") and "[cut: " in sent["error"]


async def test_the_cut_is_logged_with_what_the_model_was_shown(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="llmrtc.agent.turn")
    await tool_message_sent(2000, max_tool_result_chars=1000)
    (line,) = [r.getMessage() for r in caplog.records if "max_tool_result_chars" in r.message]
    assert "'read_log' (call c1)" in line and "max_tool_result_chars=1000" in line
    assert "it was shown the first " in line and " characters of its text" in line


async def test_a_short_result_is_sent_whole() -> None:
    content, finished, _ = await tool_message_sent(3)
    assert json.loads(content) == finished.result.result


async def test_the_cap_is_configurable_and_none_sends_everything() -> None:
    content, _, _ = await tool_message_sent(200, max_tool_result_chars=1000)
    assert len(content) <= 1000 and json.loads(content)["truncated"] is True
    content, finished, _ = await tool_message_sent(20_000, max_tool_result_chars=None)
    assert json.loads(content) == finished.result.result
    settings = TurnSettings(system_prompt="You read logs.", max_tool_result_chars=2000)
    content, _, _ = await tool_message_sent(200, settings=settings, system_prompt=None)
    assert 1900 < len(content) <= 2000


@pytest.mark.parametrize(
    ("value", "error"),
    [(10, ValueError), (0, ValueError), (True, TypeError), (1.5e4, TypeError), ("16k", TypeError)],
)
def test_a_cap_too_small_for_the_note_or_not_an_integer_is_refused(
    value: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="max_tool_result_chars"):
        TurnSettings(system_prompt="x", max_tool_result_chars=value)


def test_the_cap_and_settings_are_not_both_given() -> None:
    with pytest.raises(ValueError, match="not both"):
        TurnRunner(
            ScriptedLLM([]),
            ToolExecutor(REGISTRY),
            settings=TurnSettings(system_prompt="x"),
            max_tool_result_chars=1000,
        )


async def test_a_playbook_orchestrator_caps_results_in_every_stage() -> None:
    playbook = Playbook.model_validate(
        {
            "id": "logs",
            "initial_stage": "read",
            "stages": [{"id": "read", "system_prompt": "Read logs.", "tools": ["read_log"]}],
        }
    )
    llm = ScriptedLLM(
        [ScriptedResponse(tool_calls=[ToolCall("c1", "read_log", {"lines": 2000})]), "Done."]
    )
    orchestrator = PlaybookOrchestrator(playbook, llm, REGISTRY, max_tool_result_chars=800)
    [event async for event in orchestrator.run_turn("What does the log say?")]
    (message,) = [m for m in llm.requests[1].messages if isinstance(m, ToolMessage)]
    assert len(message.content) <= 800 and json.loads(message.content)["truncated"] is True
