"""Discovery mode on the real offline model (Qwen2.5-Coder 1.5B through xllamacpp) with a
60-tool catalog: too big to offer directly in a 4k context, so the model gets the five
meta-tools and must find the tool, then run it.

Select with `-m local_model`; skipped when the runtime or the model parts are missing (a
failure under CI=true)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from llmrtc.agent import TurnRunner
from llmrtc.agent.events import ToolCallFinished, TurnCompleted
from llmrtc.catalog.injection import ToolInjection
from llmrtc.execution import ToolExecutor
from llmrtc.llm.messages import AssistantMessage, SystemMessage
from llmrtc.telemetry.events import ToolEndEvent
from llmrtc.testing import RecordingHooks
from llmrtc.testing.scripted import check_chat_messages
from llmrtc.tools import ToolDefinition, define_tool

sys.path.insert(0, str(Path(__file__).parent))  # importlib mode: the shared helpers beside us
from _routing import catalog_of

from tests._requirements import require

pytestmark = [pytest.mark.requires("local_model"), pytest.mark.anyio]
require("local_model")  # the imports below need the runtime

from llmrtc.llm.default import local_provider
from llmrtc.llm.local import LocalModelServer, ensure_model_file

DOMAINS = {
    "customers": "customer",
    "invoices": "invoice",
    "orders": "order",
    "meetings": "meeting",
    "tickets": "support ticket",
    "shipments": "shipment",
}
VERBS = {
    "get": "Fetch one {e} by its id.",
    "list": "List recent {e}s.",
    "create": "Create a new {e}.",
    "update": "Change fields of an existing {e}.",
    "delete": "Delete a {e} permanently.",
    "search": "Search {e}s by keywords.",
    "export": "Export {e}s as a CSV file.",
    "archive": "Archive a {e}.",
    "restore": "Restore an archived {e}.",
    "send": "Send a {e} to someone by email.",
}


def sixty_tools() -> list[Any]:
    tools = []
    for namespace, entity in DOMAINS.items():
        for verb, text in VERBS.items():
            slug = entity.replace(" ", "_")
            definition = ToolDefinition(
                name=f"{namespace}.{verb}_{slug}",
                description=text.format(e=entity),
                parameters={
                    "type": "object",
                    "properties": {"id": {"type": "string", "description": f"The {entity} id."}},
                    "required": ["id"],
                },
                tags=(namespace, verb),
            )
            name = definition.name
            tools.append(
                define_tool(definition, lambda args, ctx, n=name: {"tool": n, "found": args})
            )
    return tools


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[LocalModelServer]:
    ensure_model_file("1.5b")
    async with LocalModelServer("1.5b", n_ctx=4096) as running:
        yield running


async def test_the_offline_model_finds_and_runs_a_tool_in_discovery_mode(
    server: LocalModelServer,
) -> None:
    catalog = catalog_of(sixty_tools())
    injection = await ToolInjection.build(catalog, context_window=server.n_ctx)
    assert injection.mode == "discovery"
    hooks = RecordingHooks()
    runner = TurnRunner(
        local_provider(server),
        ToolExecutor(injection.registry, hooks=hooks),
        system_prompt="You are a helpful business assistant. Answer briefly.\n\n"
        + injection.prompt_section(),
    )
    for text in (
        "Which tool fetches a customer by id? Search for it.",
        "Now run that tool for customer C42.",
    ):
        events = [e async for e in runner.run_turn(text)]
        assert isinstance(events[-1], TurnCompleted)
        print(repr(text), "->", [e for e in events if isinstance(e, ToolCallFinished)])
        print("answer:", events[-1].text)
    names = [e.tool_name for e in hooks.of(ToolEndEvent)]
    print("tools run:", names, "statuses:", [e.status for e in hooks.of(ToolEndEvent)])
    print("arguments:", [e.arguments for e in hooks.of(ToolEndEvent)])
    messages = runner.history.messages
    check_chat_messages([SystemMessage(runner.settings.system_prompt), *messages])
    asked = [c.name for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    print("the model called:", asked)  # execute_tool, or the real name (auto-routed)
    assert names and names[0] in ("search_tools", "list_categories", "browse_category")
    assert "customers.get_customer" in names
