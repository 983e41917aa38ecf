"""Shared pieces of the injection tests: small and large business catalogs."""

from __future__ import annotations

from typing import Any

from llmrtc.catalog.backend import LocalBackend
from llmrtc.catalog.catalog import ToolCatalog
from llmrtc.tools import Tool, ToolDefinition, define_tool


def business_tools() -> list[Tool]:
    """Four namespaced tools whose handlers echo what they got."""

    def echo(name: str) -> Any:
        return lambda args, ctx: {"tool": name, "args": args}

    specs = [
        ToolDefinition(
            name="crm.lookup_customer",
            description="Find a customer by id and return their name and plan.",
            parameters={
                "type": "object",
                "properties": {"customer_id": {"type": "string", "pattern": "^C[0-9]+$"}},
                "required": ["customer_id"],
            },
            tags=("crm",),
        ),
        ToolDefinition(
            name="billing.refund",
            description="Refund a card payment.",
            parameters={
                "type": "object",
                "properties": {
                    "payment_id": {"type": "string"},
                    "amount": {
                        "type": "object",
                        "properties": {"value": {"type": "number", "exclusiveMinimum": 0}},
                        "required": ["value"],
                    },
                },
                "required": ["payment_id", "amount"],
            },
            side_effects=("moves money back to the card",),
            examples=({"payment_id": "pay_1", "amount": {"value": 5}},),
        ),
        ToolDefinition(
            name="files.read",
            description="Read a text file.",
            parameters={
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
            aliases=("lire un fichier",),
        ),
        ToolDefinition(
            name="shell.run",
            description="Run a shell command.",
            parameters={
                "type": "object",
                "properties": {"cmd": {"type": "string"}},
                "required": ["cmd"],
            },
        ),
    ]
    return [define_tool(d, echo(d.name)) for d in specs]


def catalog_of(tools: list[Tool]) -> ToolCatalog:
    """A keyword-only catalog (no embedding model: these tests are about injection)."""
    return ToolCatalog([LocalBackend(tools)], embedder=None)


def many_tools(count: int, namespaces: int = 6) -> list[Tool]:
    """`count` small tools spread over `namespaces` namespaces."""
    tools = []
    for index in range(count):
        namespace = f"ns{index % namespaces}"
        definition = ToolDefinition(
            name=f"{namespace}.action_{index}",
            description=f"Action number {index} of {namespace}.",
            parameters={
                "type": "object",
                "properties": {"value": {"type": "integer"}},
                "required": ["value"],
            },
        )
        tools.append(define_tool(definition, lambda args, ctx, i=index: {"ran": i, **args}))
    return tools
