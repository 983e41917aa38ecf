"""How the provider talks to llama.cpp with the small Qwen2.5-Coder models: the
`LLAMA_CPP_PROFILE` compatibility profile, its prompt sentences, and `local_provider`.

Why text tool calls: given `tools`, llama.cpp parses the answer with a parser derived from the
chat template, which accepts a call only in the exact form the template renders. On ordinary
questions ("Is it raining in Oslo?") the 1.5B model writes a sentence, then the call as a
pretty-printed JSON object inside a ```json fence; the server's parser rejects that mid-stream
("does not match the expected peg-native format") and the answer dies. Sent as text instead,
the tools go into the system prompt in Qwen's own wording (what the template would render), the
server never parses a call, and `TextToolCallParser` accepts every form these models write.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from llmrtc.llm.compat import CompatProfile, RetryPolicy
from llmrtc.llm.settings import ModelSettings
from llmrtc.tools.definition import ToolDefinition

if TYPE_CHECKING:
    from llmrtc.llm.local.server import LocalModelServer
    from llmrtc.llm.openai_provider import OpenAIProvider, ToolCallFormat

__all__ = [
    "LLAMA_CPP_PROFILE",
    "LOCAL_RETRY",
    "LOCAL_TOOL_CALL_FORMAT",
    "PLAIN_ANSWER_HINT",
    "TOOL_HINT",
    "local_provider",
    "qwen_tool_prompt",
]

TOOL_HINT: Final = (
    "Only call a tool when the user's request needs it; to call one, reply with just the JSON "
    'object {"name": ..., "arguments": ...}, otherwise answer in plain text.'
)
"""System-prompt sentence to append when tools are offered to a local model.

Without it the small Qwen models often wrap the call in prose or markdown fences. Its exact
wording moved tool decisions from 5/12 to 10/12 in measurements: change it only with numbers.

Not added, by measurement (1.5B, temperature 0; 12 shop questions with four tools, 8 needing
one; six chat questions with the weather tool): this hint gives 11/12 decisions, and on four
of the six the model names the tool in a lead-in ("you can use the `lookupWeather` function.
Here's how you can call it:"). Every sentence that stopped the lead-in ("no words before it",
"never mention a tool or a function to the user") also made it call a tool for every question
(8/12: "What is 2 plus 2?" became a weather call); milder ones ("Do not explain how to call a
tool": 10/12, 2 of 6 lead-ins) traded decisions for part of the fix. `TextToolCallParser`
holds such talk back instead: from a declared tool named as code until the call, then drops it.
"""

PLAIN_ANSWER_HINT: Final = (
    "Answer the user in plain words. Do not write JSON, code or tool calls; no tools are "
    "available for this answer."
)
"""Appended when a request goes without tools: after tool results, and on the retry of an
answer that was nothing but a call to an undeclared tool."""


def qwen_tool_prompt(tools: Sequence[ToolDefinition]) -> str:
    """The tools section of the system prompt, word for word as the Qwen2.5 template renders
    it (one JSON line per tool), with the call format in single braces."""
    lines = "\n".join(json.dumps(tool.to_openai(), ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        f"{lines}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments "
        "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )


LLAMA_CPP_PROFILE: Final = CompatProfile(
    name="llama.cpp",
    tool_hint=TOOL_HINT,
    tool_prompt=qwen_tool_prompt,
    plain_answer_hint=PLAIN_ANSWER_HINT,
    retry_without_tools=True,
    continue_after_stream_error=True,
    omit_tools_after_tool_results=True,
    route_tools=True,
    prompt_cache=True,
)
"""llama.cpp serving a small Qwen model: the tool hint, Qwen's own tools section, one retry
without tools on a server error (continuing text already streamed by prefill, which llama.cpp
supports), and no tools after tool results (these models repeat a call otherwise).

`route_tools` is on: without it the 1.5B stops calling tools once its own plain answers are in
the history (benchmarks/tool_use.py, 70 turns: 40/70 right without, 64/70 with routing and the
grammar; in whole conversations 11/24 against 23/24).

`grammar` (a call or prose, for every free answer) is off: with it, a model that means to write
a lead-in sentence and then the call's JSON ("To run the customers.get_customer tool, you can
use the following JSON object:") may not write the JSON and repeats the sentence until its
token limit (tests/catalog/test_discovery_local_model.py, 5 minutes). Without it the
parser holds such talk back and runs the call. The router and a routed call are constrained
by their own grammars either way."""

LOCAL_RETRY: Final = RetryPolicy(max_retries=1, base_delay=0.05, retry_status_errors=False)
"""The local server's HTTP errors are deterministic at temperature 0 (a retry only adds
latency), but a reused keep-alive connection the server just closed is worth one quick retry."""


LOCAL_TOOL_CALL_FORMAT: Final[ToolCallFormat] = "text"
"""The offline default's tool-call format, by measurement (`benchmarks/composed.py`, 1.5B,
12 shop questions, idle machine): `text` 11/12 correct decisions, median 1.41 s per answer;
`auto` 11/12, 1.33 s (but llama.cpp fails mid-stream on calls it cannot parse: see the module
docstring); `composed` 10/12, 1.79 s. Composed decoding never produced a malformed or invented
call and answered all four no-tool questions right ("capital of France" was a weather call in
the other two), but it answered both transfer requests in words ("I will transfer you to a
human agent.") instead of calling `transferToHuman`. Change it only with numbers."""


def local_provider(
    server: LocalModelServer, *, tool_call_format: ToolCallFormat | None = None
) -> OpenAIProvider:
    """An `OpenAIProvider` for a running `LocalModelServer`: `LOCAL_TOOL_CALL_FORMAT` tool
    calls unless `tool_call_format` says otherwise, temperature 0 unless a request sets one,
    and `LLAMA_CPP_PROFILE`'s quirks."""
    from llmrtc.llm.openai_provider import OpenAIProvider

    if server.base_url is None:
        raise RuntimeError("LocalModelServer is not running; start it (async with) first")
    return OpenAIProvider(
        server.model,
        base_url=server.base_url,
        api_key=server.api_key,
        tool_call_format=tool_call_format or LOCAL_TOOL_CALL_FORMAT,
        settings=ModelSettings(temperature=0.0),
        retry=LOCAL_RETRY,
        compat=LLAMA_CPP_PROFILE,
        provider_name="llmrtc.local",
    )
