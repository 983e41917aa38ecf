"""Shared fixtures: async tests run on anyio's pytest plugin (asyncio unless a test says trio).

Also the one mechanism for what a test needs from outside the core install (see
`tests/_requirements.py`): the ``requires`` marker, the ``--without`` option, and, under
``CI=true``, a run that fails on any skip not on `ALLOWED_SKIPS` (so a new hand-written guard
cannot go green silently).
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

import pytest

from tests._requirements import (
    REQUIREMENTS,
    Settings,
    left_out_reason,
    require,
    unknown,
)

logger = logging.getLogger(__name__)

# Skips that are not about a missing requirement: a platform that cannot run the test at all.
# Each is a regular expression matched against the whole skip reason.
ALLOWED_SKIPS: tuple[str, ...] = (
    r"no SO_REUSEPORT on this platform",
    r"no network namespace here: .*",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--without",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help="leave these requirements out of the run on purpose: their tests are deselected "
        f"(known: {', '.join(REQUIREMENTS)})",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "requires(*names): the test needs these requirements (tests/_requirements.py); "
        "skipped locally when one is missing, failed under CI=true",
    )
    for requirement in REQUIREMENTS.values():
        # Each name is also a marker of its own, so `-m local_model` selects those tests.
        config.addinivalue_line("markers", f"{requirement.name}: needs {requirement.description}")
    left_out = {name for value in config.getoption("without") for name in value.split(",") if name}
    if bad := unknown(tuple(sorted(left_out))):
        raise pytest.UsageError(f"--without: unknown requirement(s) {bad}")
    Settings.ci = os.environ.get("CI") == "true"
    Settings.left_out = frozenset(left_out)


def _requirements_of(item: pytest.Item) -> tuple[str, ...]:
    return tuple(name for mark in item.iter_markers("requires") for name in mark.args)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the per-name markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        names = _requirements_of(item)
        if not names and item.get_closest_marker("requires") is not None:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.requires() names nothing")
        if bad := unknown(names):
            raise pytest.UsageError(
                f"{item.nodeid}: unknown requirement(s) {bad}; known: {', '.join(REQUIREMENTS)}"
            )
        for name in names:
            item.add_marker(name)
        (dropped if Settings.left_out.intersection(names) else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if names := _requirements_of(item):
        require(*names)


# Every skip of this run, (node id, reason): the CI check at the end reads them.
_SKIPPED: list[tuple[str, str]] = []
_UNEXPECTED: list[tuple[str, str]] = []


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def _allowed(reason: str) -> bool:
    if any(reason == left_out_reason(name) for name in Settings.left_out):
        return True
    return any(re.fullmatch(pattern, reason) for pattern in ALLOWED_SKIPS)


def _record(report: pytest.CollectReport | pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _SKIPPED.append((report.nodeid, _skip_reason(report)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _record(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under ``CI=true``, a skip whose reason is not on `ALLOWED_SKIPS` fails the run."""
    if not Settings.ci:
        return
    _UNEXPECTED[:] = [(nodeid, reason) for nodeid, reason in _SKIPPED if not _allowed(reason)]
    if _UNEXPECTED and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _UNEXPECTED:
        terminalreporter.write_sep("!", "CI=true: skips that are not on ALLOWED_SKIPS", red=True)
        for nodeid, reason in _UNEXPECTED:
            terminalreporter.write_line(f"  {nodeid}: {reason}", red=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
