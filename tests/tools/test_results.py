"""ToolCallResult.to_content always gives valid JSON for the model."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
from typing import Any

import pytest
from pydantic import BaseModel

from llmrtc import ToolCallResult


class Weather(BaseModel):
    city: str
    temp: float


@dataclasses.dataclass
class Reading:
    at: datetime.date
    values: list[int]


class Color(enum.Enum):
    RED = "red"


class Opaque:
    def __str__(self) -> str:
        return "opaque-thing"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Weather(city="Tokyo", temp=21.5), {"city": "Tokyo", "temp": 21.5}),
        (Reading(datetime.date(2026, 1, 2), [1, 2]), {"at": "2026-01-02", "values": [1, 2]}),
        (None, None),
        ("sunny", "sunny"),
        ('say "hi"', 'say "hi"'),
        (42, 42),
        (1.5, 1.5),
        (True, True),
        ([Color.RED, {"k": (1, 2)}], ["red", {"k": [1, 2]}]),
        (Opaque(), "opaque-thing"),
    ],
)
def test_ok_results_serialize_to_valid_json(value: Any, expected: Any) -> None:
    result = ToolCallResult("c1", "t", "ok", value, None, 1.0)
    assert result.success
    assert json.loads(result.to_content()) == expected


def test_errors_serialize_with_status() -> None:
    result = ToolCallResult("c1", "t", "timeout", None, "tool 't' timed out after 1 s", 1000.0)
    assert not result.success
    assert json.loads(result.to_content()) == {
        "error": "tool 't' timed out after 1 s",
        "status": "timeout",
    }


def test_the_executors_fast_constructors_build_equal_objects() -> None:
    from llmrtc import AbortController, ToolContext
    from llmrtc.tools.calls import new_result
    from llmrtc.tools.context import new_context

    made = new_result("c1", "t", "error", None, "tool 't' failed", 2.5)
    plain = ToolCallResult("c1", "t", "error", None, "tool 't' failed", 2.5)
    assert made == plain and hash(made) == hash(plain) and repr(made) == repr(plain)
    signal = AbortController().signal
    assert new_context("c", signal, "s", "t", {"k": 1}) == ToolContext(
        "c", signal, "s", "t", {"k": 1}
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.status = "ok"  # type: ignore[misc]
