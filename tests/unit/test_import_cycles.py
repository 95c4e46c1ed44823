"""No import cycle inside ``asyncdeploy``: every import counts, the ones under ``TYPE_CHECKING``
and the ones inside functions included (a cycle there is still two modules that need each
other). import-linter's contracts cannot say this: its layers allow a cycle inside one layer."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "asyncdeploy"


def module_files(package: Path) -> dict[str, Path]:
    """Dotted module name → file, for every module of ``package``."""
    found = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports anywhere in its file."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:  # ``from a.b import c``: the module a.b.c, else a.b
                named.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {name for name in named if name in known and name != module}


def import_graph(package: Path) -> dict[str, set[str]]:
    known = module_files(package)
    return {module: imports_of(module, path, known) for module, path in known.items()}


def cycle_in(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, str] = {}  # "open" while on the walk's path, "done" once left
    path: list[str] = []

    def walk(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for imported in sorted(graph[module]):
            if state.get(imported) == "open":
                return [*path[path.index(imported) :], imported]
            if imported not in state and (found := walk(imported)):
                return found
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := walk(module)):
            return found
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert "asyncdeploy.drivers.engine._api" in graph  # the walk found the package
    cycle = cycle_in(graph)
    assert cycle is None, " -> ".join(cycle or ())


def test_a_type_checking_import_back_is_a_cycle(tmp_path: Path) -> None:
    """The check is real: an import back under ``TYPE_CHECKING`` (the shape the engine wing
    had: ``_create`` ↔ ``_api``) is found."""
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "_api.py").write_text("from pkg._create import CreateAttempt\n")
    (root / "_create.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import _api\n"
    )
    (root / "_ready.py").write_text("def f():\n    from ._api import x\n")
    cycle = cycle_in(import_graph(root))
    assert cycle == ["pkg._api", "pkg._create", "pkg._api"]
    (root / "_create.py").write_text("")
    assert cycle_in(import_graph(root)) is None
