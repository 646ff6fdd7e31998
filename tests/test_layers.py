"""Imports point one way: rrt's layers downwards, then runtime, then jobs and serve, then the CLI."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT

# rrt's subpackages, lowest first; rrt.config sits under all of them.
LAYERS = ["recipes", "corpus", "modelling", "evaluation"]
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
