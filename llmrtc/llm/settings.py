"""`ModelSettings`: the sampling options of a model request, in one frozen object."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["ModelSettings"]


@dataclass(frozen=True, slots=True)
class ModelSettings:
    """What to ask a model for, beyond the messages and tools. None means "not set here": the
    next layer down decides (a stage's settings over the playbook's, over the runner's, over
    the provider's own defaults, over the server's).

    Example:
        base = ModelSettings(model="gpt-4o-mini", temperature=0.3)
        stage = ModelSettings(temperature=0.0)
        base.merged(stage)  # ModelSettings(model="gpt-4o-mini", temperature=0.0, ...)
    """

    model: str | None = None
    """The model name; None uses the provider's."""
    temperature: float | None = None
    """Sampling temperature (0 to 2)."""
    max_tokens: int | None = None
    """Output token limit per request."""
    top_p: float | None = None
    """Nucleus sampling (0 < top_p <= 1)."""

    def __post_init__(self) -> None:
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature must be between 0 and 2, got {self.temperature!r}")
        if self.max_tokens is not None and (
            isinstance(self.max_tokens, bool)
            or not isinstance(self.max_tokens, int)
            or self.max_tokens < 1
        ):
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")

    def merged(self, override: ModelSettings | None) -> ModelSettings:
        """These settings with every field `override` sets (not None) taking its place."""
        if override is None:
            return self
        changes: dict[str, Any] = {
            f.name: value
            for f in fields(override)
            if (value := getattr(override, f.name)) is not None
        }
        return replace(self, **changes) if changes else self

    def to_dict(self) -> dict[str, Any]:
        """The fields that are set, by name."""
        return {f.name: value for f in fields(self) if (value := getattr(self, f.name)) is not None}
