"""One name per concept: no two modules of the package define a class or a type alias of the
same name (a ``Role`` in four places, two ``Front``s, ``DrainState`` twice: a reader cannot
tell which is meant). Private and constant names aside; a re-export is not a definition."""

from __future__ import annotations

import ast
import collections
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "asyncdeploy"


def defined_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if n[:1].isupper() and not n.isupper()}


def test_no_two_modules_define_the_same_name() -> None:
    homes = collections.defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in defined_names(path):
            homes[name].append(str(path.relative_to(PACKAGE)))
    twice = {name: where for name, where in homes.items() if len(where) > 1}
    assert twice == {}
