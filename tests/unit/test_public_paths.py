"""One import path per public name, one rule: ``from asyncdeploy import NAME``.

``asyncdeploy._PUBLIC`` names, for each public name, the module that defines it (tested here,
so the table tells the truth), and users reach every name through ``asyncdeploy`` alone: the
docs, the examples and the benchmarks import no public name from anywhere else. The modules
that were only a list of public names (``events``, ``errors``, ``results``, ``selectors``) are
private; their old paths stay one release as aliases that warn (``asyncdeploy._moved``), and the
package never uses them itself. A name's home may still be a public module where that module
is a room of its own (``SECOND_PATHS``, each with why); a new one must say why here."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

import asyncdeploy

ROOT = Path(asyncdeploy.__file__).resolve().parents[1]
MOVED = {
    f"asyncdeploy.{m}": f"asyncdeploy._{m}" for m in ("events", "errors", "results", "selectors")
}
SECOND_PATHS = {
    "asyncdeploy.deployer": "the deployer's own room (the Deployer and its options); its home "
    "moves with the seam's re-cut of the deployer this round",
    "asyncdeploy.drivers.registry": "the driver registry, which a driver package extends",
    "asyncdeploy.drivers.base": "the seam a driver author implements (Driver, Found): being cut "
    "by concern this round (issue 33 item 3)",
    "asyncdeploy.replace.events": "the replace room's events, beside the replace code",
}


def _defined_at_top(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_table_names_the_module_that_defines_each_name() -> None:
    wrong = {}
    for module, names in asyncdeploy._PUBLIC.items():
        home = importlib.import_module(module)
        defined = _defined_at_top(Path(inspect.getfile(home)))
        for name in names:
            value = getattr(home, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                if value.__module__ != module:
                    wrong[name] = (module, value.__module__)
            elif name not in defined:
                wrong[name] = (module, "not defined there")
    assert wrong == {}, wrong


def test_every_home_is_private_or_says_why_not() -> None:
    public_homes = {
        m for m in asyncdeploy._PUBLIC if not any(p.startswith("_") for p in m.split("."))
    }
    assert public_homes <= set(SECOND_PATHS), sorted(public_homes - set(SECOND_PATHS))


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_answers_every_name_it_had_with_a_warning(old: str) -> None:
    new = importlib.import_module(MOVED[old])
    module = importlib.import_module(old)
    names = sorted(n for n in _defined_at_top(Path(inspect.getfile(new))) if not n.startswith("_"))
    assert names
    for name in names:
        with pytest.warns(DeprecationWarning, match=re.escape(f"{old}.{name} is deprecated")):
            assert getattr(module, name) is getattr(new, name)
    public = [n for n in names if n in asyncdeploy.__all__]
    with pytest.warns(DeprecationWarning, match="from asyncdeploy import"):
        exec(f"from {old} import {public[0]}", {})  # noqa: S102 - the user's own spelling
    assert set(names) <= set(dir(module))
    assert not hasattr(module, "NoSuchName")


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every ``from asyncdeploy... import`` in a file (Python source,
    or the Python blocks of a Markdown page)."""
    text = path.read_text()
    if path.suffix == ".md":
        blocks = re.findall(r"```(?:python|py)\n(.*?)```", text, flags=re.DOTALL)
        text = "\n".join(blocks)
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        hit = re.match(r"\s*from (asyncdeploy[\w.]*) import \(?([\w, ]+)", line)
        if hit:
            found.append((number, hit[1], [n.strip() for n in hit[2].split(",") if n.strip()]))
    return found


def test_the_package_never_imports_an_old_path() -> None:
    used = []
    for path in sorted((ROOT / "asyncdeploy").rglob("*.py")):
        if path.stem in {p.rsplit(".", 1)[1] for p in MOVED} and path.parent.name == "asyncdeploy":
            continue  # the aliases themselves
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in MOVED:
                used.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.Import):
                used += [
                    f"{path.relative_to(ROOT)}:{node.lineno}" for a in node.names if a.name in MOVED
                ]
    assert used == [], used


def test_the_docs_examples_and_benchmarks_import_public_names_from_asyncdeploy_alone() -> None:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted((ROOT / "examples").rglob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py"))
    elsewhere = [
        f"{path.relative_to(ROOT)}:{line}: {name} from {module}"
        for path in files
        for line, module, names in _imports(path)
        if module != "asyncdeploy"
        for name in names
        if name in asyncdeploy.__all__
    ]
    assert elsewhere == [], elsewhere
