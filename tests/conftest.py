"""Shared fixtures: async tests run on anyio's pytest plugin (asyncio unless a test says trio)."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
