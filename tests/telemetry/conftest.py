"""Fixtures of the telemetry tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from llmrtc import install_log_correlation


@pytest.fixture
def log_correlation() -> Iterator[None]:
    """Correlation ids on the records of the `llmrtc.*` loggers, as an application gets them by
    calling `install_log_correlation()` (importing llmrtc no longer does it); undone after."""
    library = logging.getLogger("llmrtc")
    before = list(library.handlers)
    install_log_correlation()
    try:
        yield
    finally:
        for handler in [h for h in library.handlers if h not in before]:
            library.removeHandler(handler)
