"""GGUF metadata of the local model (read with the `gguf` package), and the chat template
changed so llama.cpp's tool-call parsing matches what the Qwen2.5-Coder models write."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from llmrtc.llm.local.weights import LocalModelError

__all__ = ["chat_template_for_tools", "gguf_string_metadata"]


def gguf_string_metadata(path: Path, key: str) -> str | None:
    """One string value of a GGUF file's metadata, or None if the key is absent.

    Raises:
        LocalModelError: The file is not a GGUF file, or the value is not a string.
    """
    try:
        from gguf import GGUFReader
    except ImportError as exc:  # pragma: no cover - part of the `local` extra
        raise ImportError(
            "reading the model's metadata needs gguf: pip install 'llmrtc[local]'"
        ) from exc
    try:
        reader: Any = GGUFReader(str(path))  # memory-mapped: only the header is read
    except (ValueError, OSError) as exc:
        raise LocalModelError(f"{path} is not a readable GGUF file: {exc}") from exc
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.contents()
    if not isinstance(value, str):
        raise LocalModelError(f"{path}: GGUF metadata {key!r} is not a string")
    return value


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
