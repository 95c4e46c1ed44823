"""How every retry loop waits: pauses that double from a first one up to a longest, and every
loop's pair of them here, in one place.

Imports nothing of asyncdeploy: the server kit (``workload/``) uses it as the drivers do.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

__all__ = [
    "ACCEPT",
    "ENGINE_CALL",
    "FOLLOW",
    "KILLED_POLL",
    "POD_DELETE",
    "RESTART_POLL",
    "WATCH",
    "Backoff",
]


@attrs.frozen
class Backoff:
    """Pauses of ``first`` seconds, doubled after each, never longer than ``longest``."""

    first: float
    longest: float

    def pauses(self) -> Iterator[float]:
        """The pauses of one loop, in order (endless: the loop's own bound ends it)."""
        pause = self.first
        while True:
            yield pause
            pause = min(pause * 2, self.longest)

    def after(self, failures: int) -> float:
        """The pause after ``failures`` failures in a row (1: the first pause)."""
        return min(self.first * 2.0 ** max(failures - 1, 0), self.longest)


ENGINE_CALL = Backoff(0.05, 1.0)
"""An engine call lost with the connection, tried again (a drain's, a create's roll-back)."""
POD_DELETE = Backoff(0.05, 1.0)
"""A Pod's delete refused for now (429, 5xx, a lost connection), unless ``Retry-After`` says."""
FOLLOW = Backoff(0.05, 0.5)
"""A delete following another's drain: its steps between what the exit stream tells."""
RESTART_POLL = Backoff(0.1, 1.0)
"""A container restarting under its policy: looked at until it takes its stop signal."""
KILLED_POLL = Backoff(0.02, 0.2)
"""Podman's state after a SIGKILL, polled (its waits block on a cut-off hook); many containers:
do not flood the API service."""
WATCH = Backoff(0.1, 2.0)
"""A Kubernetes watch that failed, started again."""
ACCEPT = Backoff(0.05, 1.0)
"""The control socket's accept while file descriptors are exhausted."""
