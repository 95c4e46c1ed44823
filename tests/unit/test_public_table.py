"""The public surface is one table (``asyncdeploy._PUBLIC``): ``__all__``, the lazy look-up and
the type checkers' view are made from it, and every name a user can be handed is in it.

``python tests/unit/test_public_table.py`` rewrites the view in ``asyncdeploy/__init__.py``
from the table (the test below fails, showing it, whenever they differ)."""

from __future__ import annotations

import inspect
import sys
import typing
from pathlib import Path

import attrs

import asyncdeploy
from asyncdeploy import _errors as errors

INIT = Path(asyncdeploy.__file__)
BEGIN = "if TYPE_CHECKING:  # the type checkers' view, written from _PUBLIC\n"
END = "\n\n\ndef __getattr__"


def _order(name: str) -> tuple[int, str]:
    """isort's order within an import (ruff's default): constants, classes, then the rest."""
    if name.isupper() and len(name) > 1:
        return (0, name.lower())
    return (1, name.lower()) if name[:1].isupper() else (2, name.lower())


def written_view() -> str:
    """The ``if TYPE_CHECKING:`` block as the table makes it (``import X as X``: re-exported)."""
    lines = [BEGIN.rstrip("\n")]
    for module in sorted(asyncdeploy._PUBLIC):
        names = sorted(asyncdeploy._PUBLIC[module], key=_order)
        lines += [f"    from {module} import {name} as {name}" for name in names]
    return "\n".join(lines)


def current_view() -> str:
    text = INIT.read_text()
    start = text.index(BEGIN)
    return text[start : text.index(END, start)]


def test_the_type_checkers_view_is_the_table() -> None:
    assert current_view() == written_view(), (
        "asyncdeploy/__init__.py's TYPE_CHECKING block differs from _PUBLIC: "
        "run python tests/unit/test_public_table.py"
    )


def test_every_public_name_is_found_where_the_table_says() -> None:
    """Each name once, loaded lazily from its module (the same object), listed by ``dir``."""
    names = [name for names in asyncdeploy._PUBLIC.values() for name in names]
    assert len(names) == len(set(names))
    assert asyncdeploy.__all__ == sorted(names)
    for module, members in asyncdeploy._PUBLIC.items():
        for name in members:
            assert getattr(asyncdeploy, name) is getattr(sys.modules[module], name), name
    assert set(asyncdeploy.__all__) <= set(dir(asyncdeploy))


def _classes_in(hint: object) -> set[type]:
    """The asyncdeploy classes a type hint names (through unions, generics and aliases)."""
    found: set[type] = set()
    if isinstance(hint, type):
        if hint.__module__.startswith("asyncdeploy"):
            found.add(hint)
        return found
    for arg in typing.get_args(hint):
        found |= _classes_in(arg)
    return found


def _received(start: set[type]) -> set[type]:
    """Every asyncdeploy class reachable from ``start`` through attrs fields and the public
    methods' and properties' return types: what a user can be handed."""
    seen: set[type] = set()
    todo = list(start)
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints: list[object] = []
        if attrs.has(cls):
            hints += typing.get_type_hints(cls).values()
        for name, member in inspect.getmembers(cls):
            if name.startswith("_") and name not in ("__aiter__", "__aenter__"):
                continue
            function = member.fget if isinstance(member, property) else member
            if inspect.isfunction(function):
                hints.append(typing.get_type_hints(function).get("return"))
        for hint in hints:
            todo += _classes_in(hint) - seen
    return seen


def test_every_name_a_user_can_receive_is_exported() -> None:
    """What the deployer's methods return (and what those values hold), every error and every
    event: each is importable from ``asyncdeploy`` itself."""
    start = {asyncdeploy.Deployer, asyncdeploy.WorkloadPlan}
    start |= {getattr(errors, name) for name in errors.__all__}
    for alias in (asyncdeploy.DrainEvent, asyncdeploy.PullEvent, asyncdeploy.ReplaceEvent):
        start |= _classes_in(alias)
    missing = {
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in _received(start)
        if getattr(asyncdeploy, cls.__name__, None) is not cls
    }
    assert not missing, f"handed to users but not exported: {sorted(missing)}"


def _write() -> None:
    text = INIT.read_text()
    INIT.write_text(text.replace(current_view(), written_view()))


if __name__ == "__main__":
    _write()
