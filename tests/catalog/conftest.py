"""Fixtures for the catalog tests: a tool factory and the packaged MiniLM model (loaded once)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from llmrtc.tools import Tool, ToolDefinition, define_tool
from tests._requirements import require

MakeTool = Callable[..., Tool]


def _make_tool(
    name: str,
    description: str = "",
    *,
    version: str = "1.0.0",
    tags: Sequence[str] = (),
    aliases: Sequence[str] = (),
    params: Sequence[str] = (),
    side_effects: Sequence[str] = (),
) -> Tool:
    """A tool whose handler returns its own id (so a test can tell which version ran)."""
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {p: {"type": "string"} for p in params},
    }
    definition = ToolDefinition(
        name=name,
        description=description,
        parameters=parameters,
        version=version,
        tags=tags,
        aliases=aliases,
        side_effects=side_effects,
    )
    return define_tool(definition, lambda args, ctx: definition.tool_id)


@pytest.fixture
def make_tool() -> MakeTool:
    """`make_tool(name, description, *, version, tags, aliases, params, side_effects)`."""
    return _make_tool


@pytest.fixture(scope="session")
def minilm() -> Any:
    """The packaged MiniLM embedder, loaded once for the session; needs the `minilm` requirement."""
    from llmrtc.catalog.embeddings import default_embedder

    require("minilm")
    embedder = default_embedder()
    assert embedder is not None, "minilm is installed, yet default_embedder() found no model"
    embedder.embed(["warm up"])  # load the weights once, here, not inside a timed test
    return embedder
