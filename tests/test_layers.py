"""Imports point one way: rrt's layers downwards, then runtime, then jobs and serve, then the CLI."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT

# rrt's subpackages, lowest first; rrt.config sits under all of them.
LAYERS = ["recipes", "corpus", "modelling", "baselines", "training", "evaluation"]
# The project's top-level packages and what each may import of the others.
MAY_IMPORT = {
    "rrt": {"rrt"},
    "runtime": {"rrt", "runtime"},
    "jobs": {"rrt", "runtime", "jobs"},
    "serve": {"rrt", "runtime", "serve"},
    "judge": {"rrt", "runtime", "judge"},
    "cli": {"rrt", "runtime", "serve", "judge", "cli"},
    "testing": {"rrt", "runtime", "serve", "testing"},
}


def imported(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def modules(package: str) -> list[Path]:
    """The Python files of one top-level package."""
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_each_package_imports_only_the_layers_below_it(package):
    ours = set(MAY_IMPORT)
    wrong = {
        f"{path.relative_to(ROOT)} imports {name}"
        for path in modules(package)
        for name in imported(path)
        if name.split(".")[0] in ours and name.split(".")[0] not in MAY_IMPORT[package]
    }
    assert not wrong, sorted(wrong)


def test_the_library_never_imports_ray():
    wrong = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in modules("rrt")
        for name in imported(path)
        if name.split(".")[0] == "ray"
    ]
    assert not wrong, wrong


def test_rrt_subpackages_import_only_their_own_layer_or_lower():
    wrong = []
    for path in modules("rrt"):
        parts = path.relative_to(ROOT / "rrt").parts
        if parts[0] not in LAYERS:
            continue
        level = LAYERS.index(parts[0])
        for name in imported(path):
            bits = name.split(".")
            if (
                bits[0] == "rrt"
                and len(bits) > 1
                and bits[1] in LAYERS
                and LAYERS.index(bits[1]) > level
            ):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, wrong
    # Nothing is left in the flat folder but the settings and the package marker.
    assert sorted(p.name for p in (ROOT / "rrt").glob("*.py")) == ["__init__.py", "config.py"]


def test_a_planted_upward_import_is_caught(tmp_path):
    planted = tmp_path / "tagger.py"
    planted.write_text(
        "def f():\n    from rrt.modelling.rewriter import Rewriter\n    import ray\n"
    )
    assert {"rrt.modelling.rewriter", "ray"} <= imported(planted)


def rrt_module(path: Path) -> str:
    """The dotted name of a file under the project root (`rrt/modelling/x.py` -> `rrt.modelling.x`)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: str = "rrt") -> dict[str, set[str]]:
    """Each module of a package and the modules of the same package it imports (anywhere in it)."""
    files = {rrt_module(path): path for path in modules(package)}
    graph = {}
    for name, path in files.items():
        # `from rrt.modelling import sampling` names a module; `from rrt.modelling.x import f` its module.
        graph[name] = {m for m in imported(path) if m in files and m != name} - {
            m for m in files if files[m].name == "__init__.py"
        }
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of a graph, each as the modules around it (Tarjan's components)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                on.discard(top)
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_library_imports_itself_in_a_circle():
    assert cycles(import_graph("rrt")) == []


def test_a_planted_circle_is_caught():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def private_imports(path: Path, text: str | None = None) -> list[str]:
    """`from x import _name` of one of the project's modules other than the file's own (`text`:
    the file's source, when not read from it)."""
    ours, me = set(MAY_IMPORT), rrt_module(path)
    source = path.read_text(encoding="utf-8") if text is None else text
    wrong = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module.split(".")[0] not in ours or node.module == me:
                continue
            wrong += [
                f"{path.relative_to(ROOT)}: from {node.module} import {alias.name}"
                for alias in node.names
                if alias.name.startswith("_") and not alias.name.startswith("__")
            ]
    return wrong


def test_no_private_name_is_imported_across_modules():
    packages = ("rrt", "jobs", "serve", "runtime", "cli", "judge")
    wrong = [line for p in packages for path in modules(p) for line in private_imports(path)]
    assert not wrong, wrong


def test_a_planted_private_import_is_caught():
    planted = ROOT / "rrt" / "modelling" / "sampling.py"
    text = "from rrt.modelling.static_decode import _capture, SYNC_EVERY\nfrom os import _exit\n"
    assert private_imports(planted, text) == [
        "rrt/modelling/sampling.py: from rrt.modelling.static_decode import _capture"
    ]
