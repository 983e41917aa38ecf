"""The `requires` mechanism of the suite itself (tests/_requirements.py, tests/conftest.py): a
missing requirement skips locally and fails under CI=true, an unknown name is an error, a
hand-written skip fails a CI run, and `--without` deselects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The suite's own hooks, with `espeak` made missing and `trio` present, whatever this machine has.
CONFTEST = """
from tests._requirements import REQUIREMENTS, Requirement
from tests.conftest import *  # noqa: F403

GONE = "espeak-ng gone (apt-get install espeak-ng)"
REQUIREMENTS["espeak"] = Requirement("espeak", "espeak-ng", lambda: GONE)
REQUIREMENTS["trio"] = Requirement("trio", "trio", lambda: None)
"""


def run(
    tmp_path: Path, test_code: str, *args: str, ci: bool = False
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_it.py").write_text(test_code)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            *args,
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


MARKED = """
import pytest

@pytest.mark.requires("espeak")
def test_needs_espeak():
    pass

@pytest.mark.requires("trio")
def test_needs_trio():
    pass
"""


def test_a_missing_requirement_skips_locally_with_what_is_missing(tmp_path: Path) -> None:
    done = run(tmp_path, MARKED)
    assert done.returncode == 0, done.stdout
    assert "requires espeak: espeak-ng gone (apt-get install espeak-ng)" in done.stdout
    assert "1 passed, 1 skipped" in done.stdout


def test_a_missing_requirement_fails_under_ci(tmp_path: Path) -> None:
    done = run(tmp_path, MARKED, ci=True)
    assert done.returncode == 1, done.stdout
    assert "requires espeak: espeak-ng gone" in done.stdout
    assert "1 passed, 1 error" in done.stdout  # the setup fails


def test_the_fixture_and_module_form_fails_under_ci_too(tmp_path: Path) -> None:
    code = "from tests._requirements import require\nrequire('espeak')\n\ndef test_a():\n    pass\n"
    locally = run(tmp_path, code)
    assert locally.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, locally.stdout
    assert "1 skipped" in locally.stdout
    done = run(tmp_path, code, ci=True)
    assert done.returncode == pytest.ExitCode.INTERRUPTED, done.stdout
    assert "requires espeak: espeak-ng gone" in done.stdout


def test_an_unknown_requirement_is_an_error_at_collection(tmp_path: Path) -> None:
    code = "import pytest\n\n@pytest.mark.requires('espeek')\ndef test_a():\n    pass\n"
    done = run(tmp_path, code)
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
    assert "unknown requirement(s) ['espeek']" in done.stderr


def test_a_hand_written_skip_fails_a_ci_run_but_an_allowed_one_does_not(tmp_path: Path) -> None:
    code = (
        "import pytest\n\ndef test_a():\n    pytest.skip('no numpy here')\n\n"
        "@pytest.mark.skipif(True, reason='no SO_REUSEPORT on this platform')\n"
        "def test_b():\n    pass\n"
    )
    assert run(tmp_path, code).returncode == 0
    done = run(tmp_path, code, ci=True)
    assert done.returncode == 1, done.stdout
    assert "test_a: no numpy here" in done.stdout
    assert "test_b" not in done.stdout.split("skips that are not on ALLOWED_SKIPS")[1]


def test_without_deselects_instead_of_skipping_even_under_ci(tmp_path: Path) -> None:
    done = run(tmp_path, MARKED, "--without", "espeak", ci=True)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 1 deselected" in done.stdout


def test_each_requirement_is_also_a_marker_for_selection(tmp_path: Path) -> None:
    done = run(tmp_path, MARKED, "-m", "trio")
    assert done.returncode == 0, done.stdout
    assert "1 passed, 1 deselected" in done.stdout


def test_without_reaches_a_conftest_that_requires_at_import(tmp_path: Path) -> None:
    # pytest imports the conftest of a folder named on the command line before
    # `pytest_configure` runs: its module-level require() must still see --without.
    sub = tmp_path / "needs_espeak"
    sub.mkdir()
    (sub / "conftest.py").write_text(  # the pattern of tests/rtc/conftest.py
        "from tests._requirements import Settings, require\n\n"
        "if 'espeak' in Settings.left_out:\n"
        "    collect_ignore_glob = ['*']\n"
        "else:\n"
        "    require('espeak')\n"
    )
    (sub / "test_sub.py").write_text("def test_speaks():\n    pass\n")
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_it.py").write_text("def test_plain():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env["CI"] = "true"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "--without", "espeak", str(sub)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 5), done.stdout + done.stderr
    assert "requires espeak: espeak-ng gone" not in done.stdout
