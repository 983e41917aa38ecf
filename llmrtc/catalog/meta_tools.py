"""Discovery mode's five meta-tools (seed 001), generated from a catalog: `search_tools`,
`get_tool`, `execute_tool`, `list_categories` and `browse_category`.

Results list tools as objects with `name` (what `get_tool` / `execute_tool` take), `id` and
`description`. Categories are namespaces; tools without one are in `GENERAL_CATEGORY`.

`execute_tool` never runs a tool itself: it is a `CallRouter`. The executor resolves each call
through its registry first (`ToolRegistry.resolve`), which turns `execute_tool(name, params)`
into the call of the real tool under the same call id. That call then runs like any other:
its own schema validates `params` (errors name the path inside `params`), its own timeout,
policy and interrupt policy apply, it takes one concurrency slot, and hooks and spans name
the real tool. A nested run from inside a handler would hold two slots (a deadlock at
`max_concurrency=1`), nest two spans, and run a `"finish"` tool under a `"cancel"` parent.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Sequence
from typing import Any

from llmrtc.catalog.catalog import ToolCatalog
from llmrtc.tools.calls import ToolCall
from llmrtc.tools.context import ToolContext
from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.errors import ToolError
from llmrtc.tools.registry import ToolRegistry
from llmrtc.tools.tool import Tool

__all__ = [
    "GENERAL_CATEGORY",
    "MAX_QUERY_CHARS",
    "META_TOOL_NAMES",
    "ExecuteTool",
    "build_meta_tools",
    "tool_summary",
]

META_TOOL_NAMES = (
    "search_tools",
    "get_tool",
    "execute_tool",
    "list_categories",
    "browse_category",
)
"""The meta-tools, in the order they are offered."""

GENERAL_CATEGORY = "general"
"""The category of tools without a namespace."""

MAX_SEARCH_RESULTS = 20
MAX_QUERY_CHARS = 300
"""`search_tools`' longest query: a few words saying what a tool should do (search scores only
the first `llmrtc.catalog.search.MAX_QUERY_WORDS` words anyway)."""
MAX_PAGE_SIZE = 50
DEFAULT_PAGE_SIZE = 10


def tool_summary(tool: Tool) -> dict[str, Any]:
    """How a meta-tool result lists a tool: `name`, `id`, `description`."""
    definition = tool.definition
    return {
        "name": definition.name,
        "id": definition.tool_id,
        "description": definition.description,
    }


def tool_details(definition: ToolDefinition) -> dict[str, Any]:
    """What `get_tool` returns: everything needed to call the tool right."""
    details: dict[str, Any] = {
        "name": definition.name,
        "id": definition.tool_id,
        "description": definition.description,
        "parameters": definition.parameters,
        "category": definition.namespace or GENERAL_CATEGORY,
        "version": definition.version,
    }
    for key in ("tags", "aliases", "side_effects", "examples"):
        value = getattr(definition, key)
        if value:
            details[key] = list(value)
    details["how_to_call"] = (
        f'execute_tool with {{"name": "{definition.name}", "params": {{...}}}} matching '
        "`parameters`"
    )
    return details


class StepTool(Tool):
    """A meta-tool whose result prepares the next call (a `ChainStep`): the provider keeps
    offering tools after it, so search → get_tool → execute_tool fits in one turn."""

    __slots__ = ()
    leads_to_call = True


class ExecuteTool(Tool):
    """`execute_tool(name, params)`: a `CallRouter` the executor re-targets to the real tool.

    Its handler runs only when nothing resolved the call (an executor that does not call
    `ToolRegistry.resolve`); it then refuses with a `ToolError` rather than run the target
    outside the executor's policies.
    """

    def route_call(self, call: ToolCall) -> ToolCall | None:
        """`execute_tool({"name": n, "params": p})` → the call `n(p)` under the same id; None
        when the arguments are not that shape (the executor then validates them against
        `execute_tool`'s own schema and says what is wrong)."""
        arguments: Any = call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except ValueError:
                return None
        if not isinstance(arguments, dict) or not isinstance(arguments.get("name"), str):
            return None
        params = arguments.get("params", {})
        if isinstance(params, str):  # small models often send the object as a JSON string
            try:
                params = json.loads(params or "{}")
            except ValueError:
                return None
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return None
        return ToolCall(call.call_id, arguments["name"], params)


async def _not_routed(args: dict[str, Any], ctx: ToolContext) -> Any:
    raise ToolError(
        f"execute_tool could not run {args.get('name')!r}: the tool executor did not route "
        "the call (it must resolve calls through ToolRegistry.resolve)"
    )


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _page(items: Sequence[Tool], page: int, page_size: int) -> dict[str, Any]:
    pages = max(1, math.ceil(len(items) / page_size))
    start = (page - 1) * page_size
    return {
        "page": page,
        "page_size": page_size,
        "pages": pages,
        "total": len(items),
        "tools": [tool_summary(t) for t in items[start : start + page_size]],
        "next_page": page + 1 if page < pages else None,
    }


def build_meta_tools(catalog: ToolCatalog, tools: Sequence[Tool]) -> list[Tool]:
    """The five meta-tools over `tools` (the permitted tools, one version each).

    `catalog` (already restricted to what is permitted) answers `search_tools`; the others
    read `tools`, so every name they return is one `execute_tool` runs. A tool that is not
    permitted is invisible here: `get_tool` answers it exactly as an unknown name (only
    execution, where the model already names it, says it is refused).
    """
    by_name = ToolRegistry(tools)  # lookup by name, wire name or id
    offered_ids = frozenset(t.definition.tool_id for t in tools)
    categories: dict[str, list[Tool]] = {}
    for item in tools:
        categories.setdefault(item.definition.namespace or GENERAL_CATEGORY, []).append(item)

    async def search_tools(args: dict[str, Any], ctx: ToolContext) -> Any:
        # Never waits for the semantic index (a turn would stall, uncancellable by barge-in
        # for the build's length): by keyword until ToolInjection.build's build is ready.
        limit = args.get("max_results", 5)
        # Only the tools this injection runs, chosen before the cut to `limit` (the catalog
        # may rank more since: a backend back after a failure), so a match is never cut away.
        found = await catalog.search(args["query"], limit=limit, wait=False, ids=offered_ids)
        listed = [tool_summary(t) for t in found]
        return {"query": args["query"], "tools": listed}

    async def get_tool(args: dict[str, Any], ctx: ToolContext) -> Any:
        found = by_name.get(args["name"])
        if found is None:
            raise ToolError(_unknown(args["name"], [t.definition.name for t in tools]))
        return tool_details(found.definition)

    async def list_categories(args: dict[str, Any], ctx: ToolContext) -> Any:
        return {
            "categories": [
                {"name": name, "tools": len(members)}
                for name, members in sorted(categories.items())
            ]
        }

    async def browse_category(args: dict[str, Any], ctx: ToolContext) -> Any:
        name = args["category"]
        members = categories.get(name)
        if members is None:
            raise ToolError(
                f"unknown category {name!r}; categories: {', '.join(sorted(categories))}."
            )
        page_size = args.get("page_size", DEFAULT_PAGE_SIZE)
        result = _page(members, args.get("page", 1), page_size)
        if args.get("page", 1) > result["pages"]:
            raise ToolError(f"category {name!r} has {result['pages']} page(s) of {page_size}.")
        return {"category": name, **result}

    count = f"{len(tools)} tools in {len(categories)} categories"
    search = ToolDefinition(
        name="search_tools",
        description=f"Search the {count} by what you need, in words; returns matching tools.",
        parameters={
            "type": "object",
            "properties": {
                # The description's wording is the one the offline 1.5B model follows into
                # calling the tool it found ("in a few words" made it only describe the tool).
                "query": {
                    **_string("What the tool should do, e.g. 'refund a payment'."),
                    "maxLength": MAX_QUERY_CHARS,
                },
                "max_results": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SEARCH_RESULTS,
                    "default": 5,
                },
            },
            "required": ["query"],
        },
    )
    details = ToolDefinition(
        name="get_tool",
        description="The full parameter schema, examples and side effects of one tool.",
        parameters={
            "type": "object",
            "properties": {"name": _string("The tool's name, e.g. 'crm.lookup_customer'.")},
            "required": ["name"],
        },
    )
    execute = ToolDefinition(
        name="execute_tool",
        description="Run a tool by name with its parameters (see get_tool for the schema).",
        parameters={
            "type": "object",
            "properties": {
                "name": _string("The tool's name, e.g. 'crm.lookup_customer'."),
                "params": {"type": "object", "description": "The tool's arguments."},
            },
            "required": ["name", "params"],
        },
    )
    listing = ToolDefinition(
        name="list_categories",
        description="The tool categories and how many tools each holds.",
    )
    browse = ToolDefinition(
        name="browse_category",
        description="The tools of one category, a page at a time.",
        parameters={
            "type": "object",
            "properties": {
                "category": _string("A name from list_categories."),
                "page": {"type": "integer", "minimum": 1, "default": 1},
                "page_size": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_PAGE_SIZE,
                    "default": DEFAULT_PAGE_SIZE,
                },
            },
            "required": ["category"],
        },
    )
    return [
        StepTool(search, search_tools),
        StepTool(details, get_tool),
        ExecuteTool(execute, _not_routed),  # its result is the real tool's: not a step
        StepTool(listing, list_categories),
        StepTool(browse, browse_category),
    ]


def _unknown(name: str, names: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else "."
    return f"unknown tool {name!r}{hint} Use search_tools to find tools by what they do."
