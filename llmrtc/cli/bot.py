"""The bot a command talks to: loaded from a playbook and/or a tools file (`load_bot`), built
into a playbook's orchestrator or a runner with the tools (`build_handler`).

`llmrtc chat`, `llmrtc voice` and `llmrtc serve` answer with the same handler, built here,
over the tools `open_mcp_tools` adds from the playbook's MCP servers.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from llmrtc.cli.errors import CLIError, describe_tools_file_error, playbook_failure
from llmrtc.cli.models import has_llm_tools, tool_models

if TYPE_CHECKING:
    from llmrtc.agent import TurnHandler
    from llmrtc.catalog import ModelPool, Toolkit
    from llmrtc.catalog.mcp import MCPBackend
    from llmrtc.llm import LLMProvider
    from llmrtc.playbook import Playbook
    from llmrtc.playbook.models import MCPServerConfig
    from llmrtc.telemetry.hooks import Hooks
    from llmrtc.tools import ToolRegistry

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "Bot",
    "build_handler",
    "check_resource_limits",
    "load_bot",
    "load_target",
    "load_tools",
    "open_mcp_tools",
    "run_with_mcp_tools",
]

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Use the tools when they help. Answer briefly."
"""The system prompt of `chat` and `voice` without a playbook (`--system` replaces it)."""

_Loaded = TypeVar("_Loaded")


class Bot(NamedTuple):
    """What a command answers with, as loaded from its files."""

    playbook: Playbook | None
    """The playbook (None: a plain runner with the tools)."""
    registry: ToolRegistry | None
    """The tools (None: none)."""
    toolkits: list[Toolkit]
    """The `Toolkit`s the tools file defines at module level (stages may name them by key)."""
    resource_limits: Mapping[str, int] | None = None
    """The tools file's `RESOURCE_LIMITS` (`ToolExecutor(resource_limits=...)`; None: none)."""


def load_tools(load: Callable[[Any], _Loaded], source: Any, *, failure: str) -> _Loaded:
    """`load(source)` with a tools loader; anything the tools file raises while it is imported
    becomes a `CLIError` reading `failure:` and the short description of what went wrong (the
    file, line and code). The loader's own errors (a missing file, no tools) are one line
    already and propagate as they are."""
    from llmrtc.tools.loader import IMPORT_NOTE

    try:
        return load(source)
    except Exception as exc:
        notes = getattr(exc, "__notes__", ())
        if not any(str(note).startswith(IMPORT_NOTE) for note in notes):
            raise
        detail = describe_tools_file_error(exc).replace("\n", "\n  ")
        raise CLIError(f"{failure}:\n  {detail}") from exc


def load_bot(playbook_path: str | None, tools_path: str | None) -> Bot:
    """The playbook, tools and toolkits a command answers with (a tools file given explicitly
    wins over the playbook's own).

    Raises:
        CLIError: either file cannot be loaded (a playbook's findings, a missing file, what
            the tools file raised), saying why.
    """
    from llmrtc.catalog.toolkits import Toolkit
    from llmrtc.playbook import PlaybookError, load_playbook
    from llmrtc.playbook.loading import load_playbook_tools_file
    from llmrtc.tools.loader import ToolsFile, load_tools_module

    playbook = None
    loaded: ToolsFile | None = None
    toolkits: list[Toolkit] = []
    failure = "cannot load the tools file"
    try:
        if tools_path is not None:
            loaded = load_tools(load_tools_module, tools_path, failure=failure)
            toolkits = [item for item in loaded.objects if isinstance(item, Toolkit)]
        if playbook_path is not None:
            playbook = load_playbook(
                playbook_path,
                registry=loaded.registry if loaded is not None else None,
                toolkits=toolkits,
            )
            if playbook.tools_file and tools_path is None:
                loaded = load_tools(load_playbook_tools_file, playbook, failure=failure)
                toolkits = [item for item in loaded.objects if isinstance(item, Toolkit)]
    except PlaybookError as exc:
        assert playbook_path is not None  # only loading a playbook raises it
        raise playbook_failure(exc, playbook_path) from exc
    except (FileNotFoundError, ValueError) as exc:
        raise CLIError(str(exc)) from exc
    if loaded is None:
        return Bot(playbook, None, toolkits)
    # Now, before any model loads (or, for `serve`, any worker starts): the executor would
    # refuse the same tools later, with advice for code the user does not write.
    check_resource_limits(loaded.registry, loaded.resource_limits, loaded.path)
    return Bot(playbook, loaded.registry, toolkits, loaded.resource_limits)


def check_resource_limits(
    registry: ToolRegistry, limits: Mapping[str, int] | None, tools_file: str | Path
) -> None:
    """Refuse tools holding a resource (`@tool(resources=...)`) that `limits` (the tools
    file's `RESOURCE_LIMITS`) gives no limit, as the executor would.

    Raises:
        CLIError: naming the tools and resources, and the exact `RESOURCE_LIMITS` line to
            put in `tools_file`.
    """
    limits = limits or {}
    hidden = (registry.get(name) for name in registry.hidden_names())
    holders: dict[str, list[str]] = {}
    for tool in [*registry, *(t for t in hidden if t is not None)]:
        for resource in tool.definition.resources:
            if resource not in limits:
                holders.setdefault(resource, []).append(tool.name)
    if not holders:
        return
    from llmrtc.tools.loader import RESOURCE_LIMITS_NAME

    which = "; ".join(
        f"{', '.join(map(repr, tools))} {'holds' if len(tools) == 1 else 'hold'} {name!r}"
        for name, tools in sorted(holders.items())
    )
    entries = [f'"{name}": {limit}' for name, limit in limits.items()]
    entries += [f'"{name}": N' for name in sorted(holders)]
    # The whole line, the file's own limits kept: replacing it is the one edit to make.
    action = "Change it" if limits else "Add it"
    raise CLIError(
        f"resources with no limit: {which}. {action} in {tools_file}:\n"
        f"  {RESOURCE_LIMITS_NAME} = {{{', '.join(entries)}}}\n"
        "with N the number of calls that may hold each at once"
    )


def load_target(target: str | None) -> Bot:
    """`load_bot` for a command's one PLAYBOOK_OR_TOOLS argument: a `.py` file is a tools
    file, anything else a playbook; None: no tools at all."""
    is_tools = target is not None and Path(target).suffix == ".py"
    return load_bot(None if is_tools else target, target if is_tools else None)


def build_handler(
    llm: LLMProvider,
    registry: ToolRegistry | None,
    playbook: Playbook | None,
    *,
    system_prompt: str = DEFAULT_SYSTEM_PROMPT,
    toolkits: Sequence[Toolkit] = (),
    hooks: Hooks | None = None,
    models: ModelPool | None = None,
    resource_limits: Mapping[str, int] | None = None,
) -> TurnHandler:
    """The turn handler of a command: a `PlaybookOrchestrator` for a playbook (its stages
    give the prompts), else a `TurnRunner` with `system_prompt` and the tools (none if
    `registry` is None). `toolkits` are the ones the playbook's stages may name; `hooks`
    (e.g. `--otel`'s) observe the handler's turns, model requests and tools.

    Its executor asks `approve_in_context` to approve calls of tools with `needs_approval`:
    inside a WebRTC session with `ServerConfig(approvals="client")` that session's client
    answers, in `llmrtc chat` the terminal; anywhere else such calls are denied ("no one is
    there to approve it").

    `resource_limits` caps the calls holding each resource the tools name (the tools file's
    `RESOURCE_LIMITS`, `Bot.resource_limits`); every such resource needs one.

    LLM-backed tools (`define_llm_tool`, `llmrtc.catalog.UTIL_TOOLS`) run on `models`; by
    default, when `registry` holds one, on `llm` itself (`tool_models(llm)`: no second model
    is opened, which for the offline model would load it twice).

    Raises:
        PlaybookError: the playbook names a tool the registry lacks.
        ValueError: a tool names a resource `resource_limits` lacks (`load_bot` has said so
            already, as a `CLIError`, for the tools it loaded).
    """
    from llmrtc import (
        PlaybookOrchestrator,
        ToolExecutor,
        ToolRegistry,
        TurnRunner,
        approve_in_context,
    )

    tools = registry if registry is not None else ToolRegistry()
    if models is None and has_llm_tools(tools):
        models = tool_models(llm)
    if playbook is not None:
        return PlaybookOrchestrator(
            playbook,
            llm,
            tools,
            toolkits=toolkits,
            hooks=hooks,
            models=models,
            approver=approve_in_context,
            resource_limits=resource_limits,
        )
    executor = ToolExecutor(
        tools,
        hooks=hooks,
        models=models,
        approver=approve_in_context,
        resource_limits=resource_limits,
    )
    return TurnRunner(llm, executor, system_prompt=system_prompt, hooks=hooks)


@asynccontextmanager
async def open_mcp_tools(
    registry: ToolRegistry | None,
    playbook: Playbook | None = None,
    *,
    servers: Sequence[MCPServerConfig] | None = None,
    base_dir: str | Path | None = None,
    toolkits: Sequence[Toolkit] = (),
) -> AsyncIterator[ToolRegistry | None]:
    """Connect the MCP servers of `playbook` (or `servers`, e.g. a server config's) for the
    block, and yield the registry a handler should run: `registry` with every server's tools
    registered (`mcp_<server>.<tool>`), kept in step when a server's tools change
    (`tools/list_changed`, a reconnect) and unregistered when the block ends. Without
    servers, `registry` is yielded as it is.

    Args:
        registry: The local tools (None: none); MCP tools are added to it in place.
        playbook: Its `mcp_servers` are opened, and it is checked again with the MCP tools
            (its stages may name them; `load_playbook` could not know them).
        servers: MCP servers to open instead of the playbook's.
        base_dir: Where stdio servers run (relative `args` resolve there); by default the
            playbook's folder, else the working directory.
        toolkits: The toolkits the playbook's stages may name (for that check).

    Raises:
        MCPConnectionError: a server cannot be started or reached (naming it and why).
        PlaybookError: a stage names an MCP tool the server does not offer.
    """
    configs = list(servers if servers is not None else playbook.mcp_servers if playbook else [])
    if not configs:
        yield registry
        return
    import anyio

    from llmrtc.playbook import PlaybookError
    from llmrtc.playbook.validation import validate_playbook
    from llmrtc.tools import ToolRegistry

    if base_dir is None and playbook is not None and playbook.source_path:
        base_dir = Path(playbook.source_path).parent
    cwd = Path(base_dir) if base_dir is not None else Path.cwd()
    tools = registry if registry is not None else ToolRegistry()
    registered: dict[str, list[str]] = {}
    locks: dict[str, anyio.Lock] = {}
    open_ = True

    async def sync(backend: MCPBackend) -> None:
        # One listing at a time per server; none once the block has ended.
        async with locks.setdefault(backend.name, anyio.Lock()):
            listed = await backend.list()
            if not open_:
                return
            for name in registered.pop(backend.name, []):
                tools.unregister(name)
            tools.register_all(listed)
            registered[backend.name] = [tool.name for tool in listed]

    async def resync(backend: MCPBackend) -> None:
        try:
            await sync(backend)
        except Exception:
            logger.warning(
                "MCP server %r: its tools could not be listed again; the old list stays",
                backend.name,
                exc_info=True,
            )

    envs = _expanded(configs, playbook.source_path if playbook is not None else None)
    async with AsyncExitStack() as stack:
        backends = [
            await stack.enter_async_context(_backend(config, env, cwd))
            for config, env in zip(configs, envs, strict=True)
        ]
        try:
            for backend in backends:
                await sync(backend)
                backend.on_tools_changed(partial(resync, backend))
            if playbook is not None:
                findings = validate_playbook(playbook, tools, toolkits=toolkits)
                if any(f.severity == "error" for f in findings):
                    raise PlaybookError(findings, playbook.source_path)
            yield tools
        finally:
            open_ = False
            for names in registered.values():
                for name in names:
                    tools.unregister(name)


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expanded(
    configs: Sequence[MCPServerConfig], source: str | None
) -> list[dict[str, str] | None]:
    """Each server's `env` (stdio) or `headers` (url) with `${NAME}` replaced by this
    process's variable (how a playbook passes a token without writing it down; a stdio
    server gets only a safe default environment otherwise).

    Raises:
        PlaybookError: naming the server, the key and the variable that is not set.
    """
    from llmrtc.playbook import PlaybookError
    from llmrtc.playbook.validation import Finding

    out: list[dict[str, str] | None] = []
    findings: list[Finding] = []
    for index, config in enumerate(configs):
        field = "headers" if config.url is not None else "env"
        values: dict[str, str] = {}
        for key, value in getattr(config, field).items():
            for name in _VARIABLE.findall(value):
                if name not in os.environ:
                    findings.append(
                        Finding(
                            "error",
                            f"MCP server {config.name!r}: {field} {key} uses ${{{name}}}, which "
                            "is not set in llmrtc's environment; set it or write the value itself",
                            f"mcp_servers[{index}].{field}.{key}",
                        )
                    )
            values[key] = _VARIABLE.sub(lambda m: os.environ.get(m.group(1), ""), value)
        out.append(values or None)
    if findings:
        raise PlaybookError(findings, source)
    return out


def _backend(config: MCPServerConfig, values: dict[str, str] | None, cwd: Path) -> MCPBackend:
    from llmrtc.catalog.mcp import MCPBackend

    if config.url is not None:
        return MCPBackend(config.name, url=config.url, headers=values)
    assert config.command is not None
    return MCPBackend(config.name, command=[config.command, *config.args], env=values, cwd=cwd)


async def run_with_mcp_tools(
    run: Callable[..., Awaitable[int]],
    args: Any,
    registry: ToolRegistry | None,
    playbook: Playbook | None,
    *rest: Any,
    toolkits: Sequence[Toolkit] = (),
) -> int:
    """`await run(args, tools, playbook, *rest)` inside `open_mcp_tools(registry, playbook)`
    (how `llmrtc chat` runs); a server that cannot be reached, or a playbook naming MCP tools
    its servers lack, is printed as an error and gives exit status 1."""
    from llmrtc.catalog.mcp import MCPConnectionError
    from llmrtc.playbook import PlaybookError

    try:
        async with open_mcp_tools(registry, playbook, toolkits=toolkits) as tools:
            return await run(args, tools, playbook, *rest)
    except (MCPConnectionError, PlaybookError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
