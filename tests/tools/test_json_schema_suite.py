"""The official JSON Schema Test Suite (draft 2020-12, its optional tests and formats), run
through `ToolExecutor` exactly as a model's tool call would be.

Each case's schema becomes the schema of a tool argument `value`; the case's instance is sent
as that argument (as the JSON string a model produces) and the call must come back `ok` when
the suite says valid and `invalid_arguments` when it says invalid. Remote refs
(`http://localhost:1234/...`) are embedded into the tool's schema from the vendored `remotes/`
(a tool's schema is self-contained: definitions never fetch, and the model sees the schema
too). The vendored copy and its origin are described in `json_schema_suite/README.md`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest

from llmrtc import ToolCall, ToolDefinition, ToolExecutor, ToolRegistry, define_tool

SUITE = Path(__file__).parent / "json_schema_suite"
TESTS = SUITE / "tests" / "draft2020-12"
REMOTES = SUITE / "remotes"
REMOTE_BASE = "http://localhost:1234/"

DEFAULT_BREAKS_SCHEMA = {
    ("default.json", "invalid type for default"),
    ("default.json", "invalid string value for default"),
    ("default.json", "the default keyword does not do anything if the property is missing"),
}
"""Schemas whose `default` breaks its own subschema. JSON Schema treats `default` as a mere
annotation, so the suite calls every instance valid; a tool's defaults are handed to its
handler, so such a tool is refused when it is defined (a `ValueError`) instead."""

SKIPPED: dict[tuple[str, str], str] = {}
"""(file, group description) → the reason it is not run. Keep this empty or nearly so."""


def _remote(uri: str) -> Any | None:
    path = REMOTES / uri.removeprefix(REMOTE_BASE)
    return json.loads(path.read_text()) if path.is_file() else None


def _remote_refs(schema: Any, base: str, found: dict[str, Any]) -> None:
    """Every vendored remote document `schema` refers to, directly or through another remote."""
    if isinstance(schema, list):
        for item in schema:
            _remote_refs(item, base, found)
        return
    if not isinstance(schema, dict):
        return
    if isinstance(schema.get("$id"), str):
        base = urljoin(base, schema["$id"])
    for key in ("$ref", "$dynamicRef", "$schema"):
        if isinstance(schema.get(key), str):
            uri = urljoin(base, schema[key]).partition("#")[0]
            if uri.startswith(REMOTE_BASE) and uri not in found:
                document = found[uri] = _remote(uri)
                if document is not None:
                    _remote_refs(document, uri, found)
    for value in schema.values():
        _remote_refs(value, base, found)


def _groups() -> list[Any]:
    params = []
    files = sorted(TESTS.glob("*.json")) + sorted(TESTS.glob("optional/**/*.json"))
    for path in files:
        name = path.relative_to(TESTS).as_posix()
        # The core format.json follows the spec's default, `format` as an annotation: it runs
        # with formats off, and again with the tools' default (formats asserted).
        modes = (False, True) if name == "format.json" else (True,)
        for group in json.loads(path.read_text()):
            key = (name, group["description"])
            marks = [pytest.mark.skip(reason=SKIPPED[key])] if key in SKIPPED else []
            for formats in modes:
                suffix = "" if formats else " (formats off)"
                params.append(
                    pytest.param(
                        name,
                        group,
                        formats,
                        id=f"{name}::{group['description']}{suffix}",
                        marks=marks,
                    )
                )
    return params


def expected_status(file: str, test: dict[str, Any], formats: bool) -> str:
    """What the executor must return for one suite test."""
    if file == "format.json" and formats and "only an annotation by default" in test["description"]:
        return "invalid_arguments"  # tools assert formats: a hallucinated date is refused
    return "ok" if test["valid"] else "invalid_arguments"


def tool_parameters(schema: Any) -> dict[str, Any]:
    """A tool's parameters whose one argument, `value`, must satisfy the case's `schema`.

    The schema is embedded as its own resource (an `$id` if it has none), so its `#/$defs/x`
    refs still point into it. The remote documents it refers to are embedded beside it under
    the URI they would be fetched from (a compound schema document, as JSON Schema defines),
    so refs to them resolve with nothing fetched.
    """
    if isinstance(schema, dict):
        schema = {"$id": "urn:llmrtc-suite:case", **schema}
    remotes: dict[str, Any] = {}
    _remote_refs(schema, "", remotes)
    parameters = {
        "type": "object",
        "properties": {"value": schema},
        "required": ["value"],
        "additionalProperties": False,
    }
    if remotes:
        parameters["$defs"] = {
            f"remote{n}": {**document, "$id": uri}
            for n, (uri, document) in enumerate(remotes.items())
            if document is not None
        }
    return parameters


def test_the_vendored_suite_is_complete() -> None:
    cases = sum(len(p.values[1]["tests"]) for p in _groups() if p.values[2])
    assert cases == 2225  # draft2020-12: 1299 core, 162 optional, 764 optional/format
    assert len(list(REMOTES.rglob("*.json"))) > 40


@pytest.mark.anyio
@pytest.mark.parametrize(("file", "group", "formats"), _groups())
async def test_suite_case_through_the_executor(
    file: str, group: dict[str, Any], formats: bool
) -> None:
    name = "suite_case"
    parameters = tool_parameters(group["schema"])
    if (file, group["description"]) in DEFAULT_BREAKS_SCHEMA:
        with pytest.raises(ValueError, match=r"the default at .*default breaks its own schema"):
            ToolDefinition(name, "suite case", parameters)
        return
    definition = ToolDefinition(name, "suite case", parameters)
    registry = ToolRegistry([define_tool(definition, lambda args, ctx: None)])
    # formats=False is the spec's default (an annotation); tools assert formats by default.
    executor = ToolExecutor(registry, validate_formats=formats)
    tests = group["tests"]
    calls = [
        ToolCall(str(n), name, json.dumps({"value": test["data"]})) for n, test in enumerate(tests)
    ]
    results = await executor.execute(calls)
    wrong = [
        f"{test['description']!r}: expected {expected}, got {result.status} {result.error or ''}"
        for test, result in zip(tests, results, strict=True)
        if result.status != (expected := expected_status(file, test, formats))
    ]
    assert not wrong, "\n".join(wrong)
