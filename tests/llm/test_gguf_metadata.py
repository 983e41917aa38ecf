"""The GGUF header reader that finds the local model's chat template: it skips every value
before the key by its size (strings, string arrays, numeric arrays), returns None for a key
that is absent, and turns a file that is not GGUF, cut short, or of another version into a
`LocalModelError` that says so. (The real model: tests/llm/test_local_model.py checks it
against the `gguf` package's reader.)"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from llmrtc.llm.local import LocalModelError, gguf_string_metadata


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(value: Any) -> bytes:
    if isinstance(value, str):
        return struct.pack("<I", 8) + _string(value)
    if isinstance(value, bool):
        return struct.pack("<IB", 7, value)
    if isinstance(value, int):
        return struct.pack("<IQ", 10, value)
    if isinstance(value, float):
        return struct.pack("<If", 6, value)
    assert isinstance(value, list)
    if value and isinstance(value[0], str):
        return struct.pack("<IIQ", 9, 8, len(value)) + b"".join(map(_string, value))
    return struct.pack("<IIQ", 9, 5, len(value)) + struct.pack(f"<{len(value)}i", *value)


def gguf_file(tmp_path: Path, fields: dict[str, Any], *, version: int = 3) -> Path:
    body = b"".join(_string(key) + _value(value) for key, value in fields.items())
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", version, 0, len(fields)) + body)
    return path


FIELDS = {
    "general.architecture": "qwen2",
    "qwen2.context_length": 32768,
    "general.flag": True,
    "rope.scale": 1.5,
    "tokenizer.ggml.tokens": ["hello", "wörld", ""] * 1000,
    "tokenizer.ggml.token_type": [1, 2, 3] * 1000,
    "tokenizer.chat_template": "{% for message in messages %}☃{% endfor %}",
}


def test_a_string_after_arrays_of_strings_and_numbers_is_found(tmp_path: Path) -> None:
    path = gguf_file(tmp_path, FIELDS)
    assert (
        gguf_string_metadata(path, "tokenizer.chat_template") == FIELDS["tokenizer.chat_template"]
    )
    assert gguf_string_metadata(path, "general.architecture") == "qwen2"
    assert gguf_string_metadata(path, "tokenizer.missing") is None
    assert gguf_string_metadata(gguf_file(tmp_path, FIELDS, version=2), "general.architecture")


def test_a_key_that_is_not_a_string_says_so(tmp_path: Path) -> None:
    path = gguf_file(tmp_path, FIELDS)
    with pytest.raises(LocalModelError, match=r"'qwen2\.context_length' is not a string"):
        gguf_string_metadata(path, "qwen2.context_length")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"PK\x03\x04 a zip file", "no GGUF magic"),
        (b"GGUF" + struct.pack("<IQQ", 1, 0, 0), "version 1 is not supported"),
        (b"", "not a readable GGUF file"),
    ],
)
def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / "other.bin"
    path.write_bytes(content)
    with pytest.raises(LocalModelError, match=problem):
        gguf_string_metadata(path, "tokenizer.chat_template")


def test_a_file_cut_short_is_refused_not_misread(tmp_path: Path) -> None:
    whole = gguf_file(tmp_path, FIELDS).read_bytes()
    for cut in (30, len(whole) // 2, len(whole) - 5):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(whole[:cut])
        with pytest.raises(LocalModelError, match="not a readable GGUF file"):
            gguf_string_metadata(path, "tokenizer.chat_template")


def _raw(tmp_path: Path, body: bytes, count: int, *, name: str = "raw.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, count) + body)
    return path


HUGE = 2**64 - 1


@pytest.mark.parametrize(
    ("body", "count"),
    [
        (struct.pack("<Q", HUGE) + b"abc", 2),  # a key name's length
        (_string("a") + struct.pack("<IQ", 8, HUGE) + b"xx", 2),  # another key's string value
        (_string("tokenizer.chat_template") + struct.pack("<IQ", 8, HUGE) + b"xx", 1),  # the key's
        (_string("a") + struct.pack("<IIQ", 9, 8, 2) + struct.pack("<Q", HUGE), 2),  # an element
        # The last key's string runs past the end: the file is cut short, not "no template".
        (_string("general.name") + struct.pack("<IQ", 8, 2**63) + b"xx", 1),
        (_string("general.name") + struct.pack("<IQ", 8, 50) + b"xx", 1),
    ],
    ids=["key-name", "other-value", "the-value", "array-element", "last-huge", "last-short"],
)
def test_a_length_past_the_end_is_a_cut_file_not_a_crash_or_a_missing_key(
    tmp_path: Path, body: bytes, count: int
) -> None:
    with pytest.raises(LocalModelError, match="cut short"):
        gguf_string_metadata(_raw(tmp_path, body, count), "tokenizer.chat_template")


def test_a_big_endian_file_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "be.gguf"
    path.write_bytes(b"GGUF" + struct.pack(">IQQ", 3, 0, 1) + struct.pack(">Q", 1) + b"a")
    with pytest.raises(LocalModelError, match="big-endian"):
        gguf_string_metadata(path, "tokenizer.chat_template")
