"""Playbook models: stages, transitions, conditions, and the playbook's runtime queries (which
transitions may fire from a stage). References between them (stage and tool names) are
checked by `validate_playbook`."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmrtc.llm.settings import ModelSettings

__all__ = [
    "TRANSITION_TOOL",
    "Condition",
    "CustomCondition",
    "IntentCondition",
    "KeywordCondition",
    "LLMConfig",
    "LLMDecisionCondition",
    "MCPServerConfig",
    "MaxTurnsCondition",
    "Playbook",
    "Stage",
    "TimeoutCondition",
    "ToolCallCondition",
    "Transition",
    "TransitionAction",
]


TRANSITION_TOOL = "playbook_transition"
"""The built-in tool the model moves to another stage with (never listed in a playbook)."""


class _Model(BaseModel):
    # Unknown keys are mistakes in a hand-written file: say so instead of ignoring them.
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)


class LLMConfig(_Model):
    """Model settings for a stage (or the playbook default); None keeps the provider's."""

    model: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, gt=0)
    top_p: float | None = Field(default=None, gt=0, le=1)

    def to_settings(self) -> ModelSettings:
        """The same settings as the library's `ModelSettings` (merge them with `merged`)."""
        return ModelSettings(
            model=self.model,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            top_p=self.top_p,
        )


class ToolCallCondition(_Model):
    """Fires after a tool batch in which `tool_name` was called with status `ok` (and, when
    given, with these argument values)."""

    type: Literal["tool_call"] = "tool_call"
    tool_name: str
    arguments: dict[str, Any] | None = None


class KeywordCondition(_Model):
    """Fires after the turn's answer when any keyword appears as a whole word (any case)."""

    type: Literal["keyword"] = "keyword"
    keywords: list[str] = Field(min_length=1)
    source: Literal["user", "assistant", "any"] = "user"


class IntentCondition(_Model):
    """Fires after the turn's answer when the intent set by `engine.set_intent(...)` (or a tool
    through `ctx.metadata["playbook"]`) matches with enough confidence."""

    type: Literal["intent"] = "intent"
    intent: str
    min_confidence: float = Field(default=0.5, ge=0, le=1)


class LLMDecisionCondition(_Model):
    """Fires when the model calls `playbook_transition` with this transition's target."""

    type: Literal["llm_decision"] = "llm_decision"
    description: str | None = None
    """Shown to the model in the tool description: when this move is right."""


class MaxTurnsCondition(_Model):
    """Fires when the turns in the stage reach `count` (after the turn's answer)."""

    type: Literal["max_turns"] = "max_turns"
    count: int = Field(ge=1)


class TimeoutCondition(_Model):
    """Timer-driven: fires after `seconds` in the stage without a user turn, and starts a turn in
    the new stage (the voice layer speaks it)."""

    type: Literal["timeout"] = "timeout"
    seconds: float = Field(gt=0)


class CustomCondition(_Model):
    """Fires when `evaluate(engine_view)` returns true (after the turn's answer). In files,
    `evaluate` is `"module:function"`."""

    type: Literal["custom"] = "custom"
    evaluate: str | Callable[..., bool]

    @field_validator("evaluate")
    @classmethod
    def _reference_shape(cls, value: Any) -> Any:
        if isinstance(value, str) and (value.count(":") != 1 or not all(value.split(":"))):
            raise ValueError(f"must be 'module:function', got {value!r}")
        return value


Condition = Annotated[
    ToolCallCondition
    | KeywordCondition
    | IntentCondition
    | LLMDecisionCondition
    | MaxTurnsCondition
    | TimeoutCondition
    | CustomCondition,
    Field(discriminator="type"),
]
"""A transition's condition: a mapping with a `type` key validates into the right class."""


class TransitionAction(_Model):
    """What happens when a transition fires."""

    target_stage: str
    transition_message: str | None = None
    """Added to the history as a system message (never spoken), kept until a clear_history."""
    clear_history: bool = False
    """Forget the chat so far (the current user message and the transition message stay)."""
    data: dict[str, Any] = Field(default_factory=dict)
    """Merged into the playbook context."""


class Transition(_Model):
    """A move from one stage (or any, `"*"`) to another when its condition holds."""

    id: str
    from_stage: str
    """A stage id, or `"*"` for any stage."""
    condition: Condition
    action: TransitionAction
    priority: int = 0
    """Higher is checked first; ties keep file order."""


_MCP_SERVER_NAME = r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$"


class MCPServerConfig(_Model):
    """An MCP server whose tools the playbook uses (`mcp_servers:`): a stdio `command` (with
    `args` and `env`), or a streamable HTTP `url` (with `headers`). Its tools are named
    `mcp_<name>.<tool>` (catalog id `mcp_<name>:<tool>@<server version>`); stages list them
    like any tool."""

    name: str
    """Letters, digits, '-' and single inner '_': the tools' namespace is `mcp_<name>`."""
    command: str | None = Field(default=None, min_length=1)
    """The program of a stdio server (`python`, `npx`); it runs in the playbook's folder."""
    args: list[str] = Field(default_factory=list)
    """The program's arguments (a relative path is relative to the playbook's folder)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables for the program, over a safe default set (`PATH`, `HOME`, ...;
    nothing else of llmrtc's environment is passed on). `${NAME}` in a value is replaced by
    llmrtc's own variable `NAME` (`GITHUB_TOKEN: ${GITHUB_TOKEN}`)."""
    url: str | None = None
    """The streamable HTTP endpoint (`http://127.0.0.1:8000/mcp`)."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers for a `url` server (`Authorization: Bearer ${API_TOKEN}`; `${NAME}` as
    in `env`)."""

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not re.match(_MCP_SERVER_NAME, value):
            raise ValueError(
                f"MCP server name {value!r}: use letters, digits, '-' and single '_' between "
                "them (e.g. weather, git-hub, my_server); it becomes the tools' namespace "
                "mcp_<name>"
            )
        return value

    @field_validator("url")
    @classmethod
    def _url_shape(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"url {value!r} must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"MCP server {self.name!r}: give either command (with args, env) for a stdio "
                "server or url for a streamable HTTP one, not both or neither"
            )
        if self.url is not None and (self.args or self.env):
            raise ValueError(
                f"MCP server {self.name!r}: args and env apply to a command, not to a url"
            )
        if self.command is not None and self.headers:
            raise ValueError(
                f"MCP server {self.name!r}: headers apply to a url, not to a command (a stdio "
                "server takes env)"
            )
        return self


class Stage(_Model):
    """One stage of the conversation."""

    id: str
    name: str | None = None
    description: str = ""
    """What the stage is for; shown to the model as a `playbook_transition` target."""
    system_prompt: str = ""
    """Appended to the playbook's global prompt while in this stage."""
    tools: list[str] = Field(default_factory=list)
    """Tools offered (and executable) in this stage, besides the global ones: tool names
    (`crm.lookup`), wire names (`crm__lookup`), catalog ids (`crm:lookup@1.2.0`) or toolkit
    keys (a toolkit stands for its permitted members; see `stage_tool_names`)."""
    tool_choice: Literal["auto", "required", "none"] | dict[str, str] = "auto"
    llm_config: LLMConfig | None = None
    """Overrides the playbook's default model settings in this stage."""
    two_phase: bool = True
    """After a transition fired by a tool batch, answer once more, without tools, in the new
    stage (False: keep looping with the new stage's prompt and tools)."""
    on_enter: str | Callable[..., Any] | None = None
    """Called with a `StageHookEvent` when the stage is entered (`"module:function"` in files)."""
    on_exit: str | Callable[..., Any] | None = None
    """Called with a `StageHookEvent` when the stage is left."""
    terminal: bool = False
    """Completes the playbook: no transition fires from it; turns still answer in it."""
    metadata: dict[str, Any] = Field(default_factory=dict)


class Playbook(_Model):
    """A declarative stage machine for a conversation."""

    id: str
    name: str | None = None
    description: str = ""
    version: str = "1"
    stages: list[Stage] = Field(min_length=1)
    transitions: list[Transition] = Field(default_factory=list)
    initial_stage: str
    global_tools: list[str] = Field(default_factory=list)
    """Tools offered in every stage (the same kinds of entries as a stage's `tools`)."""
    global_system_prompt: str = ""
    default_llm_config: LLMConfig | None = None
    tools_file: str | None = None
    """A Python file with the playbook's tools, relative to the playbook file."""
    mcp_servers: list[MCPServerConfig] = Field(default_factory=list)
    """MCP servers whose tools stages may list (`mcp_<name>.<tool>`); `llmrtc chat` and
    `llmrtc serve` connect them for the playbook's lifetime."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    source_path: str | None = Field(default=None, exclude=True)
    """Where the playbook was loaded from (set by `load_playbook`)."""

    @field_validator("mcp_servers")
    @classmethod
    def _unique_mcp_names(cls, servers: list[MCPServerConfig]) -> list[MCPServerConfig]:
        names = [server.name for server in servers]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(
                    f"two MCP servers are named {name!r}; names must be unique (they become "
                    f"the tools' namespaces mcp_<name>): {names}"
                )
        return servers

    def stage(self, stage_id: str) -> Stage:
        """The stage with that id.

        Raises:
            KeyError: naming the known stage ids.
        """
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(f"no stage {stage_id!r}; stages: {[s.id for s in self.stages]}")

    # Runtime queries: which transitions may fire from a stage ------------------------------

    def transitions_from(self, stage_id: str) -> list[Transition]:
        """Transitions that may fire from `stage_id`: its own and `"*"` ones, by descending
        priority, ties in file order (whether the stage is terminal is not considered)."""
        own = [t for t in self.transitions if t.from_stage in (stage_id, "*")]
        return sorted(own, key=lambda t: -t.priority)  # sorted() is stable: file order on ties

    def llm_decision_targets(self, stage_id: str) -> list[Transition]:
        """The `llm_decision` transitions the model may take from `stage_id`, one per target
        (the highest-priority one), in the order checked."""
        seen: set[str] = set()
        out: list[Transition] = []
        for transition in self.transitions_from(stage_id):
            target = transition.action.target_stage
            if isinstance(transition.condition, LLMDecisionCondition) and target not in seen:
                seen.add(target)
                out.append(transition)
        return out

    def timeout_transition(self, stage_id: str) -> Transition | None:
        """The highest-priority `timeout` transition from `stage_id`, if any."""
        for transition in self.transitions_from(stage_id):
            if isinstance(transition.condition, TimeoutCondition):
                return transition
        return None
