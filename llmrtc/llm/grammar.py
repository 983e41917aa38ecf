"""GBNF grammars for the `text` tool-call format on a server that constrains decoding to one
(llama.cpp's `grammar` request field): an answer is either a call to an offered tool or plain
prose, decided in its first token, never prose about a call written as code or JSON.

Plain prose here cannot contain `{`, `<` or a backtick: a spoken answer needs none of them,
and they are how small models start a call wrapped in talk (a ```json fence, a `<tool_call>`
tag, a tool named as code). The model can still choose prose, so whether it calls a tool stays
its decision; what it can no longer do is write a call anywhere but at the very start.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from llmrtc.tools.definition import ToolDefinition

__all__ = ["ARGUMENTS_GRAMMAR", "PROSE_GRAMMAR", "call_prefix", "tool_call_grammar"]

_PROSE: Final = "prose ::= [^{<`] [^{<`]*"

# JSON values, as llama.cpp's own grammars/json.gbnf writes them (whitespace bounded, so a
# model at temperature 0 cannot loop on blanks).
_JSON: Final = "\n".join(
    [
        'object ::= "{" ws ( string ws ":" ws value ( "," ws string ws ":" ws value )* )? ws "}"',
        'array ::= "[" ws ( value ( "," ws value )* )? ws "]"',
        'value ::= object | array | string | number | "true" | "false" | "null"',
        'string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] | "\\\\" ( ["\\\\/bfnrt] '
        '| "u" [0-9a-fA-F]{4} ) )* "\\""',
        'number ::= "-"? ( [0-9] | [1-9] [0-9]{1,15} ) ( "." [0-9]{1,15} )? '
        "( [eE] [-+]? [0-9]{1,4} )?",
        "ws ::= [ \\t\\n]{0,8}",
    ]
)

PROSE_GRAMMAR: Final = f"root ::= prose\n{_PROSE}"
"""Plain prose only: for a request whose tools stay in the prompt (so the server's prompt
cache keeps the prefix) but that must not call one (after tool results, tool_choice none)."""


def tool_call_grammar(
    tools: Sequence[str] | Sequence[ToolDefinition], *, allow_prose: bool = True
) -> str:
    """One call to an offered tool, `{"name": "<wire name>", "arguments": {...}}` (bare or in
    `<tool_call>` tags), or (with `allow_prose`) plain prose. Arguments are any JSON object:
    the executor validates them against the tool's schema and answers a bad one with
    `invalid_arguments` the model can correct.

    Args:
        tools: The tools the call may name (or their wire names, what the prompt shows).
        allow_prose: False: a call is the only answer (a forcing tool_choice).

    Raises:
        ValueError: for no tools (a grammar with no call is `PROSE_GRAMMAR`).
    """
    names = [t.wire_name if isinstance(t, ToolDefinition) else t for t in tools]
    if not names:
        raise ValueError("tool_call_grammar needs at least one tool; use PROSE_GRAMMAR")
    alternatives = " | ".join(_literal(json.dumps(name)) for name in names)
    return "\n".join(
        [
            "root ::= call | prose" if allow_prose else "root ::= call",
            # Bare, or in the `<tool_call>` tags Qwen's template teaches: the model's own form.
            'call ::= object-call | "<tool_call>" ws object-call ws "</tool_call>"',
            'object-call ::= "{" ws "\\"name\\"" ws ":" ws name ws "," ws "\\"arguments\\"" '
            'ws ":" ws object ws "}"',
            f"name ::= {alternatives}",
            _PROSE,
            _JSON,
        ]
    )


ARGUMENTS_GRAMMAR: Final = "\n".join(['root ::= object ws "}"', _JSON])
"""The rest of a call whose start, `call_prefix(name)`, is already written (a prefilled
assistant message): its arguments object and the call's closing brace."""


def call_prefix(wire_name: str) -> str:
    """The start of a call to `wire_name`, up to its arguments, as the model writes it: sent as
    a prefilled answer when the call is decided before the model runs (tool routing), so the
    model writes only the arguments (the ~10 tokens of the call's frame cost nothing)."""
    return '{"name": ' + json.dumps(wire_name) + ', "arguments": '


def _literal(text: str) -> str:
    """`text` as a GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
