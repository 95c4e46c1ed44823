"""Deprecated path: import these names from ``asyncdeploy`` (``from asyncdeploy import ...``),
their one path. An alias of the private ``asyncdeploy._results`` for one release
(``asyncdeploy._moved``): each name still answers, with a ``DeprecationWarning``."""

from __future__ import annotations

from typing import Any

from asyncdeploy._moved import moved_dir, moved_name


def __getattr__(name: str) -> Any:
    return moved_name(__name__, "asyncdeploy._results", name)


def __dir__() -> list[str]:
    return moved_dir("asyncdeploy._results")
