"""MCP ⇄ llmrtc conversions for `MCPBackend`: names, versions, tool definitions and results.

Nothing here imports the `mcp` SDK: MCP objects are read by attribute, so `import llmrtc`
stays free of it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any

from llmrtc.tools.definition import TOOL_NAME_PATTERN, ToolDefinition
from llmrtc.tools.ids import DEFAULT_TOOL_VERSION, WIRE_SEPARATOR

__all__ = [
    "MAX_ERROR_TEXT",
    "content_text",
    "error_text",
    "mcp_definition",
    "result_value",
    "namespace_for",
    "semver_of",
    "task_required",
    "tool_names",
    "without_media",
]

logger = logging.getLogger(__name__)

MAX_ERROR_TEXT = 1000
"""An MCP `isError` result's text is cut to this many characters for the model."""

_INVALID = re.compile(r"[^A-Za-z0-9_-]+")
_SERVER_NAME = re.compile(r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$")
_NUMBERS = re.compile(r"\d+")
_WIRE_LIMIT = 64


def namespace_for(server: str) -> str:
    """`"weather"` → `"mcp_weather"`: the namespace of a server's tools.

    Raises:
        ValueError: if `server` is not letters, digits, '-' and single inner '_' (the wire
            form joins namespace and name with '__', so a namespace may hold no '__' nor end
            with '_').
    """
    if not isinstance(server, str) or not _SERVER_NAME.match(server):
        raise ValueError(
            f"MCP server name {server!r}: use letters, digits, '-' and single '_' between them "
            "(e.g. 'weather', 'git-hub', 'my_server'); it becomes the tools' namespace "
            f"'mcp_<name>'"
        )
    return f"mcp_{server}"


def semver_of(version: str | None) -> str:
    """A server's version as the tools' semver: its first three numbers, missing ones 0.

    `"2.1"` → `"2.1.0"`, `"v1.4.2-beta+7"` → `"1.4.2"`, `"2024.10.07"` → `"2024.10.7"`; a
    version with no number (or none at all) → `DEFAULT_TOOL_VERSION` (`"1.0.0"`), the version
    of a local tool that declares none.
    """
    numbers = [str(int(n)) for n in _NUMBERS.findall(version or "")[:3]]
    if not numbers:
        return DEFAULT_TOOL_VERSION
    return ".".join([*numbers, "0", "0"][:3])


def tool_names(namespace: str, mcp_names: Iterable[str]) -> dict[str, str]:
    """Each MCP tool name → the llmrtc local name it gets (unique within the server).

    MCP names may hold dots, slashes or spaces and be up to 128 characters; llmrtc names are
    `^[A-Za-z0-9_-]{1,64}$` and the wire name `namespace__name` must fit in 64 characters.
    Invalid runs become '_', the name is cut to fit, and a clash gets `_2`, `_3`, ...
    """
    room = _WIRE_LIMIT - len(namespace) - len(WIRE_SEPARATOR)
    out: dict[str, str] = {}
    taken: set[str] = set()
    for original in mcp_names:
        base = _INVALID.sub("_", original).strip("_") or "tool"
        base = base[:room]
        name, n = base, 1
        while name in taken:
            n += 1
            suffix = f"_{n}"
            name = base[: room - len(suffix)] + suffix
        taken.add(name)
        out[original] = name
    return out


def mcp_definition(
    mcp_tool: Any, *, namespace: str, name: str, version: str, server: str
) -> ToolDefinition | None:
    """The `ToolDefinition` of an MCP `Tool` (None, logged, when its schema is unusable).

    The input schema is kept as the server sent it (the executor validates against it); the
    title and annotations go into the catalog's search fields.
    """
    schema = dict(getattr(mcp_tool, "input_schema", None) or {"type": "object"})
    schema.setdefault("type", "object")
    schema.pop("$schema", None)  # a draft URI the validator would follow; 2020-12 is used
    annotations = getattr(mcp_tool, "annotations", None)
    title = getattr(mcp_tool, "title", None) or getattr(annotations, "title", None)
    side_effects = _side_effects(annotations)
    assert TOOL_NAME_PATTERN.match(name)
    try:
        return ToolDefinition(
            name=name,
            namespace=namespace,
            version=version,
            description=(getattr(mcp_tool, "description", None) or title or "").strip(),
            parameters=schema,
            tags=("mcp", server),
            aliases=(title,) if title and title.strip() else (),
            side_effects=side_effects,
        )
    except ValueError as exc:
        logger.warning(
            "MCP server %r: tool %r is left out: %s", server, getattr(mcp_tool, "name", "?"), exc
        )
        return None


def task_required(mcp_tool: Any) -> bool:
    """Whether the tool accepts only task-augmented calls (`execution.taskSupport:
    "required"`, MCP 2025-11-25): a plain `tools/call` to it fails with -32601."""
    execution = getattr(mcp_tool, "execution", None)
    return getattr(execution, "task_support", None) == "required"


def _side_effects(annotations: Any) -> tuple[str, ...]:
    if annotations is None or getattr(annotations, "read_only_hint", None):
        return ()
    out = []
    if getattr(annotations, "destructive_hint", None):
        out.append("may delete or overwrite data")
    if getattr(annotations, "open_world_hint", None):
        out.append("reaches systems outside this server")
    return tuple(out)


def _size(base64_data: str) -> str:
    """The decoded size of base64 data, in words: `"1.0 MB"`, `"12.3 kB"`, `"512 B"`."""
    n = len(base64_data.rstrip("=")) * 3 // 4
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _placeholder(kind: str, *labels: Any, data: Any = None) -> str:
    """`[image image/png, 1.0 MB]`: what the model is told instead of media's bytes."""
    first, *rest = labels or (None,)
    parts = [f"{kind} {first}" if first else kind, *(str(label) for label in rest if label)]
    if isinstance(data, str):
        parts.append(_size(data))
    return f"[{', '.join(parts)}]"


def content_text(blocks: Iterable[Any]) -> str:
    """The text of MCP content blocks, joined by newlines; media and binary resources are
    named in brackets with their size (`[image image/png, 1.0 MB]`, `[resource file:///a.bin,
    application/pdf, 20.1 kB]`) so the model knows they exist, never their base64 bytes."""
    parts: list[str] = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(
                str(text)
                if text is not None
                else _placeholder(
                    "resource",
                    getattr(resource, "uri", ""),
                    getattr(resource, "mime_type", None),
                    data=getattr(resource, "blob", None),
                )
            )
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(block, 'uri', '')}]")
        elif kind in ("image", "audio"):
            parts.append(
                _placeholder(
                    kind, getattr(block, "mime_type", None), data=getattr(block, "data", None)
                )
            )
        else:
            parts.append(f"[{kind or 'content'}]")
    return "\n".join(parts)


_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")

_MEDIA_KEYS = frozenset({"type", "data", "mimeType", "annotations", "_meta"})
"""The keys of an MCP `ImageContent`/`AudioContent` block."""

_BLOB_KEYS = frozenset({"uri", "mimeType", "blob", "_meta"})
"""The keys of an MCP `BlobResourceContents`."""

_EMBEDDED_KEYS = frozenset({"type", "resource", "annotations", "_meta"})
"""The keys of an MCP `EmbeddedResource` block."""


def _is_base64(data: Any) -> bool:
    return isinstance(data, str) and _BASE64.fullmatch(data) is not None


def _media_placeholder(value: Mapping[str, Any]) -> tuple[str, str] | None:
    """(the key holding the bytes, its placeholder) if `value` has the shape of an MCP
    image/audio block (a `type`, an `image/...` or `audio/...` `mimeType`, base64 `data`) or of
    a `BlobResourceContents` (a `uri`, base64 `blob`), else None."""
    kind = value.get("type")
    mime = value.get("mimeType")
    if (
        kind in ("image", "audio")
        and isinstance(mime, str)
        and mime.startswith(f"{kind}/")
        and _is_base64(value.get("data"))
    ):
        return "data", _placeholder(str(kind), mime, data=value["data"])
    if isinstance(value.get("uri"), str) and _is_base64(value.get("blob")):
        return "blob", _placeholder(
            "resource", value["uri"], value.get("mimeType"), data=value["blob"]
        )
    return None


def without_media(value: Any) -> Any:
    """`value` (a result's `structuredContent`) with every MCP image/audio/blob block in it,
    at any depth, reduced to its placeholder (`[image image/png, 1.0 MB]`), as `content_text`
    does for content blocks: a server may mirror its content blocks in `structuredContent`
    (server-filesystem's `read_media_file` does), and base64 bytes are nothing a model can read.

    Only the spec's shapes count (an image/audio block needs an `image/...`/`audio/...`
    `mimeType` and base64 `data`; a blob a `uri` and base64 `blob`): other mappings are data.
    A block holding only the spec's keys becomes the placeholder string; one with keys of its
    own (a caption) keeps them, its bytes replaced by the placeholder; a mapping stays a mapping
    (the top level is always one)."""
    return _without_media(value, top=True)


def _without_media(value: Any, *, top: bool = False) -> Any:
    if isinstance(value, Mapping):
        found = _media_placeholder(value)
        if found is not None:
            key, placeholder = found
            spec_keys = _MEDIA_KEYS if key == "data" else _BLOB_KEYS
            if not top and value.keys() <= spec_keys:
                return placeholder
            return {k: placeholder if k == key else _without_media(v) for k, v in value.items()}
        resource = value.get("resource")
        if (
            not top
            and value.get("type") == "resource"
            and isinstance(resource, Mapping)
            and value.keys() <= _EMBEDDED_KEYS
        ):
            inner = _without_media(resource)
            if isinstance(inner, str):  # an embedded blob: its placeholder alone
                return inner
        return {key: _without_media(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_media(item) for item in value]
    return value


def result_value(result: Any) -> Any:
    """A successful `CallToolResult` as a handler's return value: `structuredContent` when
    the server sent it (media in it replaced by placeholders), else the content blocks' text."""
    structured = getattr(result, "structured_content", None)
    if isinstance(structured, Mapping):
        return without_media(dict(structured))
    return content_text(getattr(result, "content", None) or ())


def error_text(result: Any, server: str, tool: str) -> str:
    """The text an `isError` result shows the model (the server wrote it for the model,
    as MCP intends tool errors to be), cut to `MAX_ERROR_TEXT` characters."""
    text = content_text(getattr(result, "content", None) or ()).strip()
    if not text:
        return f"the tool {tool!r} of MCP server {server!r} reported an error without details"
    if len(text) > MAX_ERROR_TEXT:
        text = text[: MAX_ERROR_TEXT - 1] + "…"
    return text
