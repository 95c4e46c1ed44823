"""One operation's "kill now": how a caller cuts its drains short.

A drain cut short is a cancelled drain: each driver's shielded cleanup then kills the survivors
and removes everything. The switch cancels the scopes its drains run in (:meth:`guarding`), the
ones open now and any opened later, and a drain that begins after it was thrown runs at grace 0
(no container's drain exists yet to be cut short). No task watches it: :meth:`kill` cancels.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

__all__ = ["KillSwitch"]


class KillSwitch:
    """Thrown once by :meth:`kill`; every drain it guards is cut short from then on."""

    def __init__(self) -> None:
        self._thrown = False
        self._scopes: set[anyio.CancelScope] = set()

    @property
    def thrown(self) -> bool:
        return self._thrown

    def kill(self) -> None:
        """Cut every guarded drain short now, and every later one at once (idempotent)."""
        self._thrown = True
        for scope in self._scopes:
            scope.cancel()

    @contextmanager
    def guarding(self) -> Iterator[anyio.CancelScope]:
        """A cancel scope that :meth:`kill` cancels (at once, when thrown already)."""
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            if self._thrown:
                scope.cancel()
            try:
                yield scope
            finally:
                self._scopes.discard(scope)
