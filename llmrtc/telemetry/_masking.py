"""Masking of sensitive tool fields in recorded content: by key at any depth, and by value
wherever a sensitive argument's value reappears (a tool that echoes a card number under another
key, inside a sentence, as a dict key, or escaped in an error message, stays masked)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MASK = "***"
# Short secrets (a CVV, a PIN) are masked where they stand as a whole word; longer ones
# anywhere, even inside other words.
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


def _spellings(value: Any) -> set[str]:
    """The ways a value may be written in text: as is, JSON- and repr-escaped, a whole float
    as an integer."""
    text = str(value)
    forms = {text, json.dumps(text)[1:-1], repr(text)[1:-1]}
    if isinstance(value, float) and value.is_integer():
        forms.add(str(int(value)))
    return {form for form in forms if form}


def _key_pattern(fields: Sequence[str]) -> re.Pattern[str]:
    keys = "|".join(re.escape(f) for f in fields)
    return re.compile(rf'("(?:{keys})"\s*:\s*)("(?:[^"\\]|\\.)*"?|[^,}}\]\s]+)')


def sensitive_values(arguments: Any, fields: Sequence[str]) -> list[str]:
    """The values that sensitive keys hold anywhere in `arguments` (a dict or JSON string),
    in every spelling they may reappear in, longest first."""
    if not fields:
        return []
    keys = set(fields)
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                if key in keys:
                    for leaf in _leaves(item):
                        found.update(_spellings(leaf))
                else:
                    walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    parsed = _parsed(arguments)
    if isinstance(parsed, str):  # arguments that do not parse: find the values by key
        for match in _key_pattern(fields).finditer(parsed):
            found.update(_spellings(match.group(2).strip('"')))
    else:
        walk(parsed)
    return sorted(found, key=len, reverse=True)  # a secret containing another goes first


def mask_text(text: str, secrets: Sequence[str]) -> str:
    """Replace each secret inside `text` (short ones only as whole words)."""
    for secret in secrets:
        if text == secret:
            return MASK
        if len(secret) >= _MIN_SUBSTRING:
            text = text.replace(secret, MASK)
        elif secret in text:
            text = re.sub(rf"(?<!\w){re.escape(secret)}(?!\w)", MASK, text)
    return text


def _mask(value: Any, keys: frozenset[str], secrets: Sequence[str]) -> Any:
    if isinstance(value, Mapping):
        return {
            mask_text(str(k), secrets): MASK if k in keys else _mask(v, keys, secrets)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_mask(v, keys, secrets) for v in value]
    if isinstance(value, str):
        return mask_text(value, secrets)
    if value is not None and not isinstance(value, bool) and _spellings(value) & set(secrets):
        return MASK
    return value


def mask_content(content: Any, fields: Sequence[str], secrets: Sequence[str]) -> str:
    """`content` (a dict, a JSON string, or plain text) as a string with sensitive keys and
    values replaced by `"***"`; JSON stays JSON."""
    value = _parsed(content)
    if not fields and not secrets:
        return content if isinstance(content, str) else json.dumps(value, default=str)
    if isinstance(value, str):  # not JSON (e.g. malformed arguments): mask by key, then value
        if fields:
            value = _key_pattern(fields).sub(lambda m: f'{m.group(1)}"{MASK}"', value)
        return mask_text(value, secrets)
    masked = _mask(value, frozenset(fields), secrets)
    return json.dumps(masked, default=str, ensure_ascii=False)
