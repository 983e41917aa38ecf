"""How `OpenAIProvider` adapts to a server: `RetryPolicy` (when to try again; defined in
`llmrtc.tools.retry`, which tool calls share) and `CompatProfile` (the quirks of a server or
model family, e.g. llama.cpp with a small Qwen)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llmrtc.tools.definition import ToolDefinition
from llmrtc.tools.retry import RetryPolicy

__all__ = ["CompatProfile", "RetryPolicy"]


@dataclass(frozen=True, slots=True)
class CompatProfile:
    """The habits of one kind of server and model that `OpenAIProvider` works around.
    The default profile changes nothing (what OpenAI itself needs); `llmrtc.llm.local`
    defines the one for llama.cpp with the small Qwen models (`LLAMA_CPP_PROFILE`).
    """

    name: str = "openai"
    """For logs and `repr`."""
    tool_hint: str | None = None
    """A sentence appended to the system prompt whenever tools are offered (small models
    need to be told to answer with the JSON object only)."""
    tool_prompt: Callable[[Sequence[ToolDefinition]], str] | None = None
    """How tools are written into the system prompt in `text` tool-call format (default:
    `render_tool_prompt`); a model family's own wording works best."""
    plain_answer_hint: str | None = None
    """A sentence appended to the system prompt when a request that has tools is sent
    without them (tool_choice "none", after tool results, a retry without tools): the model
    is told to answer in plain words instead of writing a call."""
    retry_without_tools: bool = False
    """After a server error with tools offered (HTTP 500, or an error inside the stream),
    try once more without tools."""
    continue_after_stream_error: bool = False
    """When that error came after text was streamed, continue the answer: the streamed
    text is sent as a trailing assistant message the server continues (prefill), so the
    user never gets the same words twice. Without it such an error is an `LLMError`."""
    omit_tools_after_tool_results: bool = False
    """Send no tools with a request whose last message is a tool result (small models then
    answer from the result instead of calling again; calls still written are parsed)."""
    grammar: bool = False
    """The server constrains decoding to a GBNF `grammar` request field (llama.cpp does). In
    the `text` tool-call format every request with tools then sends one: a call to an offered
    tool or plain prose, decided in the first token (`llmrtc.llm.grammar`); and a request
    that must not call (after tool results with `omit_tools_after_tool_results`, tool_choice
    "none") keeps the tools in its prompt, so the prompt stays byte-identical and the
    server's prefix cache keeps hitting, with a grammar that allows prose only."""
    route_tools: bool = False
    """Before answering a user's message with tools offered (`text` format), ask the model
    in a short request of its own which tool the message needs (`llmrtc.llm.tool_routing`);
    when it names one, the answer is constrained to a call to it, kept only if its free-text
    arguments are words the user said. For small models that stop calling tools once their
    own plain answers fill the history. The router's answer and the routed call are
    constrained by GBNF grammars, so the server must accept a `grammar` field (llama.cpp
    does), whether or not `grammar` is on for free answers."""
    prompt_cache: bool = False
    """The server keeps computed prompt prefixes and reuses them (llama.cpp, in this process):
    `llmrtc serve` then sends a session's first prompt once at start (`warm()`), so the first
    caller does not wait for the system prompt and tools to be read (measured: the served
    weather playbook's first turn took 16.0 s cold, 6.2 s once warm). Off for hosted APIs,
    which bill every request."""
    response_format: bool = True
    """The server honours `response_format: {"type": "json_schema", ...}` (OpenAI and
    llama.cpp do, llama.cpp by constraining decoding to the schema): requests with a
    `response_format` send it. False drops it (the JSON instruction in the prompt remains)."""
