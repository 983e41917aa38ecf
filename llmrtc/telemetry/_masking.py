"""Masking of sensitive tool fields in recorded content: by key at any depth, and by value
wherever a sensitive argument's value reappears (a tool that echoes a card number under another
key, or inside a sentence, stays masked)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MASK = "***"
# Shorter secrets are masked only where they are a whole value: replacing every "1" inside
# every string would destroy the content and protect nothing.
_MIN_SUBSTRING = 4


def _parsed(content: Any) -> Any:
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return content


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _leaves(item)
    elif value is not None and not isinstance(value, bool):
        yield value


def sensitive_values(arguments: Any, fields: Sequence[str]) -> list[str]:
    """The values that sensitive keys hold anywhere in `arguments` (a dict or JSON string)."""
    if not fields:
        return []
    keys = set(fields)
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                if key in keys:
                    found.extend(str(leaf) for leaf in _leaves(item))
                else:
                    walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(_parsed(arguments))
    # Longest first, so a secret that contains another is replaced whole.
    return sorted(set(found), key=len, reverse=True)


def mask_text(text: str, secrets: Sequence[str]) -> str:
    """Replace each secret inside `text` (long ones as substrings, short ones as whole text)."""
    for secret in secrets:
        if text == secret:
            return MASK
        if len(secret) >= _MIN_SUBSTRING and secret in text:
            text = text.replace(secret, MASK)
    return text


def _mask(value: Any, keys: frozenset[str], secrets: Sequence[str]) -> Any:
    if isinstance(value, Mapping):
        return {k: MASK if k in keys else _mask(v, keys, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mask(v, keys, secrets) for v in value]
    if isinstance(value, str):
        return mask_text(value, secrets)
    if value is not None and not isinstance(value, bool) and str(value) in secrets:
        return MASK
    return value


def mask_content(content: Any, fields: Sequence[str], secrets: Sequence[str]) -> str:
    """`content` (a dict, a JSON string, or plain text) as a JSON string with sensitive keys
    and values replaced by `"***"`."""
    value = _parsed(content)
    if not fields and not secrets:
        return content if isinstance(content, str) else json.dumps(value, default=str)
    masked = _mask(value, frozenset(fields), secrets)
    return json.dumps(masked, default=str, ensure_ascii=False)
