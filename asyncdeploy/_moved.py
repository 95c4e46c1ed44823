"""The old public module paths, kept one release as aliases that warn.

Every public name has one import path, ``from asyncdeploy import NAME`` (the table in
``asyncdeploy/__init__.py``). ``asyncdeploy.events``, ``errors``, ``results`` and ``selectors``
were public modules as well, a second path to the same names; their code is in private modules
now (``_events``, ...), and the old paths answer every name they had, with a
``DeprecationWarning`` that says where the name is, until ``REMOVED_IN``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

REMOVED_IN = "0.2.0"


def moved_name(old: str, new: str, name: str) -> Any:
    """``old.name``, which lives in ``new`` now: the value, with the warning."""
    if name.startswith("__"):  # the import system's questions (__path__, __file__...)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(new), name)
    except AttributeError:
        raise AttributeError(f"module {old!r} has no attribute {name!r}") from None
    public = importlib.import_module("asyncdeploy").__all__
    instead = (
        f"`from asyncdeploy import {name}`"
        if name in public
        else f"nothing: {name} is not a public name (it is in the private {new})"
    )
    warnings.warn(
        f"{old}.{name} is deprecated and goes in asyncdeploy {REMOVED_IN}; use {instead}",
        DeprecationWarning,
        stacklevel=3,  # the caller's line: past this function and the module's __getattr__
    )
    return value


def moved_dir(new: str) -> list[str]:
    return sorted(n for n in vars(importlib.import_module(new)) if not n.startswith("_"))
