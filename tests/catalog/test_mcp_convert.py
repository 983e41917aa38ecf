"""How MCP servers' names, versions, schemas and results become llmrtc's (no server needed)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from llmrtc.catalog.mcp.convert import (
    MAX_ERROR_TEXT,
    content_text,
    error_text,
    mcp_definition,
    namespace_for,
    result_value,
    semver_of,
    task_required,
    tool_names,
)
from llmrtc.tools.ids import parse_tool_id


@pytest.mark.parametrize(
    ("version", "semver"),
    [
        ("2.1", "2.1.0"),
        ("1.4.2", "1.4.2"),
        ("v1.4.2-beta+7", "1.4.2"),
        ("2024.10.07", "2024.10.7"),
        ("3", "3.0.0"),
        ("1.2.3.4", "1.2.3"),
        ("", "1.0.0"),
        (None, "1.0.0"),
        ("dev", "1.0.0"),
    ],
)
def test_a_servers_version_becomes_semver(version: str | None, semver: str) -> None:
    assert semver_of(version) == semver
    parse_tool_id(f"x@{semver}")  # a valid tool-id version


def test_mcp_names_become_unique_valid_names_whose_wire_form_fits() -> None:
    namespace = namespace_for("files")
    names = tool_names(
        namespace,
        ["read", "fs/read", "fs.read", "fs read", "...", "x" * 128, "x" * 128 + "y"],
    )
    assert names["read"] == "read"
    assert names["fs/read"] == "fs_read"
    assert names["fs.read"] == "fs_read_2" and names["fs read"] == "fs_read_3"
    assert names["..."] == "tool"
    long_a, long_b = names["x" * 128], names["x" * 128 + "y"]
    assert long_a != long_b
    for name in names.values():
        assert len(f"{namespace}__{name}") <= 64


def test_a_definition_keeps_the_schema_and_reads_the_annotations() -> None:
    mcp_tool = NS(
        name="delete_file",
        title="Delete a file",
        description="Delete a file.",
        input_schema={
            "$schema": "http://json-schema.org/draft-07/schema#",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        annotations=NS(title=None, read_only_hint=False, destructive_hint=True),
    )
    definition = mcp_definition(
        mcp_tool, namespace="mcp_fs", name="delete_file", version="1.2.0", server="fs"
    )
    assert definition is not None
    assert definition.tool_id == "mcp_fs:delete_file@1.2.0"
    assert definition.parameters == {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    }
    assert definition.aliases == ("Delete a file",)
    assert definition.side_effects == ("may delete or overwrite data",)
    assert set(definition.tags) == {"mcp", "fs"}


def test_a_tool_with_an_unusable_schema_is_left_out(caplog: pytest.LogCaptureFixture) -> None:
    broken = NS(name="odd", description="", input_schema={"type": "array"}, annotations=None)
    assert (
        mcp_definition(broken, namespace="mcp_x", name="odd", version="1.0.0", server="x") is None
    )
    assert "tool 'odd' is left out" in caplog.text


def test_results_prefer_structured_content_else_join_the_blocks() -> None:
    text = NS(type="text", text="line one")
    image = NS(type="image", mime_type="image/png")
    resource = NS(type="resource", resource=NS(uri="file:///a.txt", text="file text"))
    blob = NS(type="resource", resource=NS(uri="file:///b.bin"))
    link = NS(type="resource_link", uri="file:///c")
    assert result_value(NS(structured_content={"n": 1}, content=[text])) == {"n": 1}
    assert result_value(NS(structured_content=None, content=[text, image])) == (
        "line one\n[image image/png]"
    )
    assert content_text([resource, blob, link]) == (
        "file text\n[resource file:///b.bin]\n[resource file:///c]"
    )


def test_media_is_named_with_its_size_never_sent_as_base64() -> None:
    png = NS(type="image", mime_type="image/png", data="A" * 1_333_336)
    wav = NS(type="audio", mime_type="audio/wav", data="QUJD" * 3000)
    blob = NS(
        type="resource",
        resource=NS(uri="file:///r.pdf", mime_type="application/pdf", blob="QUI="),
    )
    assert content_text([png, wav, blob]) == (
        "[image image/png, 1.0 MB]\n[audio audio/wav, 9.0 kB]\n"
        "[resource file:///r.pdf, application/pdf, 2 B]"
    )


def test_media_inside_structured_content_becomes_a_placeholder_too() -> None:
    # server-filesystem's read_media_file mirrors its image block in structuredContent.
    image = {"type": "image", "data": "A" * 1_333_336, "mimeType": "image/png"}
    blob = {"uri": "file:///a.bin", "mimeType": "application/octet-stream", "blob": "A" * 400}
    structured = {
        "content": [image, {"type": "resource", "resource": blob}],
        "nested": {"deeper": [blob]},
        "count": 2,
        "note": None,
    }
    assert result_value(NS(structured_content=structured, content=[])) == {
        "content": [
            "[image image/png, 1.0 MB]",
            "[resource file:///a.bin, application/octet-stream, 300 B]",
        ],
        "nested": {"deeper": ["[resource file:///a.bin, application/octet-stream, 300 B]"]},
        "count": 2,
        "note": None,
    }
    # A mapping that merely has a "type" of image but no data is data, not media.
    plain = {"type": "image", "caption": "a cat"}
    assert result_value(NS(structured_content=plain, content=[])) == plain


@pytest.mark.parametrize(
    "value",
    [
        {"type": "image", "data": "not really", "mimeType": "text/plain", "caption": "keep me"},
        {"type": "image", "data": "A" * 400},  # no mimeType: not the spec's block
        {"type": "audio", "data": "plain words, not base64", "mimeType": "audio/wav"},
        {"type": "image", "data": "QUJD", "mimeType": "audio/wav"},  # not an image type
    ],
)
def test_a_mapping_that_only_looks_like_media_is_data(value: dict[str, object]) -> None:
    structured = {"items": [value], "top": value}
    assert result_value(NS(structured_content=structured, content=[])) == structured
    assert result_value(NS(structured_content=value, content=[])) == value


def test_media_with_keys_of_its_own_keeps_them_and_the_result_stays_a_dict() -> None:
    image = {"type": "image", "data": "A" * 4000, "mimeType": "image/png", "caption": "a cat"}
    # The whole structuredContent is one image block: call() still returns a dict.
    top = result_value(NS(structured_content=image, content=[]))
    assert top == {**image, "data": "[image image/png, 3.0 kB]"}
    nested = result_value(NS(structured_content={"figures": [image]}, content=[]))
    assert nested == {"figures": [{**image, "data": "[image image/png, 3.0 kB]"}]}
    blob = {"uri": "file:///a.bin", "blob": "QUI=", "size": 2}
    assert result_value(NS(structured_content={"files": [blob]}, content=[])) == {
        "files": [{"uri": "file:///a.bin", "blob": "[resource file:///a.bin, 2 B]", "size": 2}]
    }


def test_a_tool_that_requires_tasks_is_recognised() -> None:
    assert task_required(NS(execution=NS(task_support="required")))
    assert not task_required(NS(execution=NS(task_support="optional")))
    assert not task_required(NS(execution=None))
    assert not task_required(NS())


def test_error_text_is_the_servers_own_words_cut_to_length() -> None:
    long = NS(content=[NS(type="text", text="e" * 5000)])
    assert len(error_text(long, "s", "t")) == MAX_ERROR_TEXT
    empty = NS(content=[])
    assert error_text(empty, "s", "t") == (
        "the tool 't' of MCP server 's' reported an error without details"
    )
