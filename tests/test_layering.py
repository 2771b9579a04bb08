"""The package's architecture, checked: layers import only downwards, and no modules import each other.

Layers, lowest first (``docs/design.md``): ``errors`` (imports nothing of the project) < ``extras``
(the optional packages) < ``target`` < ``dsl`` < ``lowering`` < ``backends`` < ``autoschedule`` < ``nn_ops`` < the face
(``__init__``, ``cli``, ``demo``, ...).  Inside ``nn_ops``: ``ops`` < ``network`` < ``onnx_import`` <
``compile_once`` < ``compile``/``testing``/``nn_ops/__init__``; ``onnx_import`` only imports (it builds
no kernel: no backend, no compute or schedule of the DSL).  Every import statement counts, also one inside a
function: hiding an import there does not change which way the dependency runs.
"""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Dict, Set

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "loopweave"
NOT_PACKAGE = {"tests", "benchmarks", "notebooks", "docs", ".venv", "build", ".git"}

LAYERS = ["errors", "extras", "target", "dsl", "lowering", "backends", "autoschedule", "nn_ops", "face"]
NN_OPS_LAYERS = ["ops", "network", "onnx_import", "compile_once", "top"]


def package_modules() -> Dict[str, Path]:
    """Every module of the package by dotted name (packages by their own name)."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in NOT_PACKAGE or any(p.startswith(".") for p in rel.parts):
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join([PACKAGE] + parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: Dict[str, Path]) -> Set[str]:
    """The project modules ``path`` imports, anywhere in the file; ``from P import m`` names module P.m
    when m is a submodule, else P."""
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules and "." in t:
                t = t.rsplit(".", 1)[0]
            if t in modules and t != name and t != PACKAGE:
                found.add(t)
    return found


def layer_of(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "face"
    return parts[0] if parts[0] in LAYERS else "face"


def nn_ops_layer_of(module: str) -> str:
    parts = module.split(".")[2:]
    return parts[0] if parts and parts[0] in NN_OPS_LAYERS[:-1] else "top"


@pytest.fixture(scope="module")
def graph():
    modules = package_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_the_scan_sees_the_package(graph):
    assert {"loopweave.dsl.expr", "loopweave.lowering.lower", "loopweave.backends.build",
            "loopweave.nn_ops.network.executable", "loopweave.cli"} <= set(graph)
    assert "loopweave.dsl.expr" in graph["loopweave.dsl.schedule"]


def test_layers_import_only_downwards(graph):
    wrong = []
    for module, targets in graph.items():
        mine = LAYERS.index(layer_of(module))
        for t in targets:
            theirs = LAYERS.index(layer_of(t))
            if theirs > mine or (theirs == mine and layer_of(module) in ("errors", "extras", "target")):
                wrong.append(f"{module} ({layer_of(module)}) imports {t} ({layer_of(t)})")
    assert not wrong, "imports against the layers:\n" + "\n".join(sorted(wrong))


def test_nn_ops_subpackages_import_one_way(graph):
    wrong = []
    for module, targets in graph.items():
        if layer_of(module) != "nn_ops":
            continue
        mine = NN_OPS_LAYERS.index(nn_ops_layer_of(module))
        for t in targets:
            if layer_of(t) == "nn_ops" and NN_OPS_LAYERS.index(nn_ops_layer_of(t)) > mine:
                wrong.append(f"{module} imports {t}")
    assert not wrong, ("nn_ops: ops < network < onnx_import < compile_once < compile/testing, broken by:\n"
                       + "\n".join(sorted(wrong)))


#: what building a kernel takes: a backend, or a computation and its schedule in the DSL
KERNEL_BUILDING = ("loopweave.backends", "loopweave.dsl.tensor", "loopweave.dsl.schedule", "loopweave.lowering")


def test_the_importer_builds_no_kernel(graph):
    """``onnx_import`` turns a model into a graph; the network compilers build the kernels."""
    wrong = [f"{module} imports {t}" for module, targets in graph.items()
             if module.startswith("loopweave.nn_ops.onnx_import") for t in targets
             if t.startswith(KERNEL_BUILDING)]
    assert not wrong, "onnx_import builds kernels (move it to nn_ops/network or compile_once):\n" + "\n".join(sorted(wrong))


def backend_private_uses(path: Path, package: str, modules: Dict[str, Path]) -> Set[str]:
    """``backends`` names starting with ``_`` that ``path`` imports or reads off an imported backends
    module (``from ...backends import build; build._loaded``)."""
    found, aliases = set(), {}
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")
            source = ".".join(base[:len(base) - (node.level - 1)] + ([node.module] if node.module else [])) \
                if node.level else (node.module or "")
            if not source.startswith(f"{PACKAGE}.backends"):
                continue
            for a in node.names:
                if a.name.startswith("_"):
                    found.add(f"{source}.{a.name}")
                elif f"{source}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{source}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith(f"{PACKAGE}.backends") and a.asname:
                    aliases[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases \
                and node.attr.startswith("_"):
            found.add(f"{aliases[node.value.id]}.{node.attr}")
    return found


def test_the_network_compiler_uses_only_the_backends_public_names():
    """The network compilers load and run code through what ``backends`` offers (``loaded_objects``,
    ``llvm/runner.py``, ...), never through its private state: that state is the backend's to change."""
    modules = package_modules()
    wrong = []
    for name, path in modules.items():
        if name.startswith((f"{PACKAGE}.nn_ops.network", f"{PACKAGE}.nn_ops.compile_once")):
            package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
            wrong += [f"{name} uses {use}" for use in sorted(backend_private_uses(path, package, modules))]
    assert not wrong, "private names of backends used by the network compiler:\n" + "\n".join(wrong)


def test_no_import_cycles(graph):
    """No module reaches itself through imports (Tarjan's strongly connected components)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "modules that import each other:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_every_package_folder_ships_in_the_wheel():
    """pyproject lists packages explicitly (the root is the package): a new folder must be added there."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    folders = {name for name, path in package_modules().items() if path.name == "__init__.py"}
    assert folders == listed, f"missing from pyproject: {sorted(folders - listed)}; listed but absent: " \
                              f"{sorted(listed - folders)}"
