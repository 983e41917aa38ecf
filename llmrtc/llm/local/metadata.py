"""GGUF metadata of the local model, and the chat template changed so llama.cpp's tool-call
parsing matches what the Qwen2.5-Coder models write."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Final

from llmrtc.llm.local.weights import LocalModelError

__all__ = ["chat_template_for_tools", "gguf_string_metadata"]

# GGUF value types (the format's own numbering) of fixed size, in bytes; 8 is a string (u64
# length + UTF-8), 9 an array (u32 element type, u64 count, elements).
_FIXED_SIZES: Final = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING: Final = 8
_ARRAY: Final = 9


def gguf_string_metadata(path: Path, key: str) -> str | None:
    """One string value of a GGUF file's metadata, or None if the key is absent.

    Reads the key/value header only, skipping the values before `key` by their sizes: the
    `gguf` package's reader decodes every field (the 1.5B's 150k-token vocabulary and merges)
    and took 12-21 s of every offline start for this one string; this takes about 0.1 s.

    Raises:
        LocalModelError: The file is not a GGUF file (version 2 or 3, little-endian), it is
            cut short (a length or count points past its end), or the value is not a string.
    """
    try:
        with open(path, "rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return _read_string(m, key.encode(), path)
    # UnicodeDecodeError is a ValueError; OverflowError: a length too big to even index with.
    except (OSError, ValueError, OverflowError, struct.error) as exc:
        raise LocalModelError(f"{path} is not a readable GGUF file: {exc}") from exc


def _length(m: mmap.mmap, offset: int) -> int:
    """The u64 length at `offset` of the bytes that follow it, checked against the file's end
    (a corrupt length must not be skipped past the end, nor sliced with)."""
    (length,) = struct.unpack_from("<Q", m, offset)
    if offset + 8 + length > len(m):
        raise ValueError(
            f"the metadata is cut short (a length of {length} bytes at byte {offset} points "
            f"past the end of the file, {len(m)} bytes)"
        )
    return int(length)


def _read_string(m: mmap.mmap, key: bytes, path: Path) -> str | None:
    unpack = struct.unpack_from
    if m[:4] != b"GGUF":
        raise LocalModelError(f"{path} is not a GGUF file (no GGUF magic)")
    (version,) = unpack("<I", m, 4)
    if version not in (2, 3):
        if unpack(">I", m, 4)[0] in (2, 3):
            raise LocalModelError(
                f"{path}: a big-endian GGUF file is not supported (little-endian GGUF 2 or 3)"
            )
        raise LocalModelError(
            f"{path}: GGUF version {version} is not supported (2 or 3, little-endian)"
        )
    (count,) = unpack("<Q", m, 16)  # after the tensor count
    offset = 24
    for _ in range(count):
        length = _length(m, offset)
        name = m[offset + 8 : offset + 8 + length]
        offset += 8 + length
        (kind,) = unpack("<I", m, offset)
        offset += 4
        if kind == _STRING:
            length = _length(m, offset)
            if name == key:
                return m[offset + 8 : offset + 8 + length].decode()
            offset += 8 + length
            continue
        if name == key:
            raise LocalModelError(f"{path}: GGUF metadata {key.decode()!r} is not a string")
        if kind == _ARRAY:
            element, items = unpack("<IQ", m, offset)
            offset += 12
            if element == _STRING:
                for _ in range(items):
                    offset += 8 + _length(m, offset)
            elif element in _FIXED_SIZES:
                offset += _FIXED_SIZES[element] * items
            else:  # nested arrays: no model we ship has them before the template
                raise ValueError(f"unsupported array element type {element}")
        elif kind in _FIXED_SIZES:
            offset += _FIXED_SIZES[kind]
        else:
            raise ValueError(f"unknown metadata value type {kind}")
        if offset > len(m):
            raise ValueError("the metadata is cut short")
    return None


# The Qwen2.5-Coder templates render an assistant tool call as
#     <tool_call>\n{"name": "...", "arguments": ...}\n</tool_call>
# and llama.cpp derives its tool-call parser from how the template renders a tool call. These
# models write the bare JSON object without the tags, so their calls came back as plain text.
# Rendering the object bare makes llama.cpp parse exactly what the models emit.
_TAGGED_CALL_OPEN: Final = '\'\\n<tool_call>\\n{"name": "\''
_BARE_CALL_OPEN: Final = '\'\\n{"name": "\''
_TAGGED_CALL_CLOSE: Final = "'}\\n</tool_call>'"
_BARE_CALL_CLOSE: Final = "'}'"
# The 1.5B template's system prompt shows the call format with doubled braces ({{"name": ...}})
# - a Jinja escaping slip inside a string literal that the model sees verbatim.
_DOUBLED_FORMAT: Final = '{{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}}'
_SINGLE_FORMAT: Final = '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}'


def chat_template_for_tools(model_path: Path) -> str:
    """Return the model's own chat template, changed so tool calls come back structured.

    The one change: assistant tool calls are rendered as a bare ``{"name": ..., "arguments": ...}``
    object instead of inside ``<tool_call>`` tags (and with single braces where the 1.5B template
    doubles them), because llama.cpp only parses tool calls written the way the template renders
    them and these models never write the tags. (The offline provider sends no `tools` at all
    and parses calls itself - see `llmrtc.llm.local.profile` - but a client that uses the
    server's native tool calls gets them parsed.)

    Args:
        model_path: A Qwen2.5-Coder-Instruct GGUF file.

    Returns:
        The Jinja chat template to pass to the server.

    Raises:
        LocalModelError: The file has no ``tokenizer.chat_template`` or the template does not
            render tool calls in the expected Qwen form.
    """
    template = gguf_string_metadata(Path(model_path), "tokenizer.chat_template")
    if template is None:
        raise LocalModelError(f"{model_path}: GGUF metadata has no tokenizer.chat_template")
    for pattern in (_TAGGED_CALL_OPEN, _TAGGED_CALL_CLOSE):
        if template.count(pattern) != 1:
            raise LocalModelError(
                f"{model_path}: chat template does not render assistant tool calls in the "
                f"Qwen2.5 form (expected {pattern!r} exactly once, found "
                f"{template.count(pattern)}); only Qwen2.5-Coder-Instruct GGUFs are supported"
            )
    template = template.replace(_TAGGED_CALL_OPEN, _BARE_CALL_OPEN)
    template = template.replace(_TAGGED_CALL_CLOSE, _BARE_CALL_CLOSE)
    return template.replace(_DOUBLED_FORMAT, _SINGLE_FORMAT)
