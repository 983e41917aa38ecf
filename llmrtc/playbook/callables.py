"""`import_callable`: the `"module:function"` references of playbook files, resolved."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["import_callable"]


def import_callable(reference: str) -> Callable[..., Any]:
    """Import `"module:function"` (e.g. `"myapp.rules:is_vip"`).

    Raises:
        ImportError: when the module or the attribute is missing or not callable.
    """
    module_name, _, attribute = reference.partition(":")
    module = importlib.import_module(module_name)
    target = getattr(module, attribute, None)
    if not callable(target):
        raise ImportError(f"{module_name!r} has no callable {attribute!r}")
    return target  # type: ignore[no-any-return]
