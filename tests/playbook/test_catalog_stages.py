"""Playbook stages that name toolkits and catalog ids in `tools:`, checked by validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmrtc.catalog.toolkits import Toolkit
from llmrtc.playbook.loading import load_playbook
from llmrtc.playbook.models import Playbook
from llmrtc.playbook.validation import PlaybookError, stage_tool_names, validate_playbook
from llmrtc.tools import ToolDefinition, ToolRegistry, define_tool

BILLING = Toolkit("billing", tools=["billing.refund", "billing.lookup_invoice"])


def _registry() -> ToolRegistry:
    names = [("crm.lookup", "1.2.0"), ("billing.refund", "1.0.0"), ("lookupWeather", "1.0.0")]
    return ToolRegistry(
        define_tool(ToolDefinition(name=n, version=v), lambda args, ctx: None) for n, v in names
    )


def _playbook(tools: list[str], **stage: object) -> Playbook:
    return Playbook.model_validate(
        {
            "id": "p",
            "initial_stage": "main",
            "stages": [{"id": "main", "system_prompt": "Help.", "tools": tools, **stage}],
        }
    )


def test_stages_may_name_toolkits_ids_and_wire_names() -> None:
    entries = ["billing", "crm:lookup@1.2.0", "crm:lookup", "crm__lookup", "lookupWeather"]
    findings = validate_playbook(_playbook(entries), _registry(), toolkits=[BILLING])
    assert [f for f in findings if f.severity == "error"] == []
    # a toolkit stands for the members the registry has (lookup_invoice is not permitted here)
    names = stage_tool_names(entries, _registry(), [BILLING])
    assert names == ["billing.refund", "crm.lookup", "lookupWeather"]


def test_unknown_entries_are_reported_with_the_known_ones() -> None:
    findings = validate_playbook(
        _playbook(["crm:lookup@9.9.9", "shop"]), _registry(), toolkits=[BILLING]
    )
    errors = [f for f in findings if f.severity == "error"]
    assert [f.path for f in errors] == ["stages[0].tools[0]", "stages[0].tools[1]"]
    assert "unknown tool 'crm:lookup@9.9.9' in stage 'main'" in errors[0].message
    assert "registered: ['billing.refund', 'crm.lookup', 'lookupWeather']" in errors[0].message
    assert "toolkits: ['billing']" in errors[1].message


def test_a_toolkit_is_not_a_single_tool_to_force() -> None:
    forced = _playbook(["billing"], tool_choice={"name": "billing"})
    errors = [f for f in validate_playbook(forced, _registry(), toolkits=[BILLING])]
    assert any("forces tool 'billing'" in f.message for f in errors)
    member = _playbook(["billing"], tool_choice={"name": "billing.refund"})
    assert not [
        f
        for f in validate_playbook(member, _registry(), toolkits=[BILLING])
        if f.severity == "error"
    ]


def test_load_playbook_checks_toolkits_with_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "p.yaml"
    file.write_text(
        "id: p\ninitial_stage: main\nstages:\n  - id: main\n    tools: [billing, nope]\n",
        encoding="utf-8",
    )
    with pytest.raises(PlaybookError) as caught:
        load_playbook(file, registry=_registry(), toolkits=[BILLING])
    (finding,) = [f for f in caught.value.findings if f.severity == "error"]
    assert finding.path == "stages[0].tools[1] (line 5)"
    assert "unknown tool 'nope'" in finding.message


TOOLS_FILE = """
from llmrtc.catalog import Toolkit
from llmrtc.tools import tool


@tool(namespace="billing")
def refund(payment_id: str) -> str:
    \"\"\"Refund a card payment.\"\"\"
    return "ok"


@tool(namespace="billing")
def lookup_invoice(invoice_id: str) -> str:
    \"\"\"Look up an invoice.\"\"\"
    return "inv"


billing_kit = Toolkit(
    "billing_kit",
    tools=["billing.refund", "billing.lookup_invoice"],
    policy="Read the invoice back first.",
    title="Billing",
)
"""

PLAYBOOK_FILE = """
id: demo
tools_file: tools.py
initial_stage: start
stages:
  - id: start
    system_prompt: Help.
    tools: [billing_kit]
    terminal: true
"""


def _files(tmp_path: Path) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS_FILE)
    (tmp_path / "pb.yaml").write_text(PLAYBOOK_FILE)
    return tmp_path / "pb.yaml"


def test_a_playbook_may_name_the_toolkits_its_tools_file_defines(tmp_path: Path) -> None:
    from llmrtc.playbook.loading import load_playbook_toolkit_tools

    playbook = load_playbook(_files(tmp_path))  # raised "unknown tool 'billing_kit'"
    registry, toolkits = load_playbook_toolkit_tools(playbook)
    assert [kit.key for kit in toolkits] == ["billing_kit"]
    assert stage_tool_names(["billing_kit"], registry, toolkits) == [
        "billing.refund",
        "billing.lookup_invoice",
    ]


@pytest.mark.anyio
async def test_a_stage_toolkit_policy_reaches_the_model() -> None:
    from llmrtc.playbook.orchestrator import PlaybookOrchestrator
    from llmrtc.testing import ScriptedLLM

    kit = Toolkit("billing", tools=["billing.refund"], policy="Read it back.", title="Billing")
    unused = Toolkit("crm", tools=["crm.lookup"], policy="Never mentioned.", title="CRM")
    llm = ScriptedLLM(["ok"])
    orchestrator = PlaybookOrchestrator(
        _playbook(["billing"]), llm, _registry(), toolkits=[kit, unused]
    )
    [event async for event in orchestrator.run_turn("hi")]
    assert llm.requests[0].messages[0].content == "Help.\n\nBilling: Read it back."


@pytest.mark.anyio
async def test_a_stage_naming_a_tool_not_permitted_warns_and_goes_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from llmrtc.playbook.orchestrator import PlaybookOrchestrator
    from llmrtc.testing import ScriptedLLM

    registry = _registry().refuse(
        ToolDefinition(name="shell.run"), "not permitted by the tools configuration"
    )
    playbook = _playbook(["shell.run", "crm.lookup"])
    findings = [f for f in validate_playbook(playbook, registry) if ".tools[" in f.path]
    assert [(f.severity, f.path) for f in findings] == [("warning", "stages[0].tools[0]")]
    assert "not permitted; not offered" in findings[0].message
    llm = ScriptedLLM(["ok"])
    orchestrator = PlaybookOrchestrator(playbook, llm, registry)  # raised "unknown tool"
    [event async for event in orchestrator.run_turn("hi")]
    assert [t.name for t in llm.requests[0].tools] == ["crm.lookup"]
    assert "not permitted; not offered" in caplog.text


def test_two_toolkits_with_one_key_are_an_error_naming_both(tmp_path: Path) -> None:
    """Which one a stage got would depend on each consumer's dict order: refuse it."""
    from llmrtc.playbook.loading import load_playbook_toolkit_tools
    from llmrtc.playbook.orchestrator import PlaybookOrchestrator
    from llmrtc.testing import ScriptedLLM

    other = 'billing_kit_2 = Toolkit("billing_kit", tools=["billing.refund"], policy="Other.")\n'
    (tmp_path / "tools.py").write_text(TOOLS_FILE + other)
    (tmp_path / "pb.yaml").write_text(PLAYBOOK_FILE)
    with pytest.raises(PlaybookError) as raised:
        load_playbook(tmp_path / "pb.yaml")
    message = str(raised.value)
    assert "two toolkits have the key 'billing_kit'" in message
    assert "Read the invoice back first." in message and "'Other.'" in message
    playbook = Playbook.model_validate(
        {"id": "p", "initial_stage": "s", "stages": [{"id": "s", "system_prompt": "Hi."}]}
    )
    registry, toolkits = _registry(), [BILLING, Toolkit("billing", tools=["billing.refund"])]
    with pytest.raises(PlaybookError, match="two toolkits have the key 'billing'"):
        PlaybookOrchestrator(playbook, ScriptedLLM([]), registry, toolkits=toolkits)
    # One object bound to two names (imported and re-exported) is one toolkit, not a clash.
    (tmp_path / "tools.py").write_text(TOOLS_FILE + "alias_kit = billing_kit\n")
    playbook = load_playbook(tmp_path / "pb.yaml")
    assert [kit.key for kit in load_playbook_toolkit_tools(playbook)[1]] == ["billing_kit"]
