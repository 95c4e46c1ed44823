"""What one workload's drain knows as it goes, and when it gives up on an engine it lost.

Pure: no engine call and no clock of its own (the drain passes ``now``), so that the rule and
the state's steps are tested without an engine or a drain (``tests/unit/test_drain_state.py``).
"""

from __future__ import annotations

import attrs

__all__ = ["DrainState", "gives_up"]


def gives_up(
    now: float, *, deadline: float, unreachable_since: float, cleaning: bool, after: float
) -> bool:
    """Whether a call lost with the connection is no longer tried again.

    Before the deadline the drain waits for the engine (a connection that blinks kills
    nothing), unless it is cleaning up early (cancelled: the caller's "kill now"); then the
    engine gets ``after`` seconds from when it was lost. At or past the deadline it gets
    ``after`` seconds from the later of the deadline and the loss.
    """
    if now >= deadline:
        return now - max(unreachable_since, deadline) >= after
    return cleaning and now - unreachable_since >= after


@attrs.define(kw_only=True)
class DrainState:
    """One workload drain's flags and the containers it has seen go, in one place."""

    owner: bool = True  # False while following another delete: nothing to kill or remove
    cut: bool = False  # cancelled: the caller's "kill now", whoever drains the workload
    cleaning: bool = False  # in the shielded kill-and-remove step
    lost: bool = False  # the engine stayed unreachable: the drain gave up on it
    unreachable_since: float | None = None  # when calls began to find no engine (None: reached)
    gone: set[str] = attrs.field(factory=set)  # ids of containers seen removed
    pause_killed: set[str] = attrs.field(factory=set)  # ids of pause containers sent SIGKILL
    signalled: set[str] = attrs.field(factory=set)  # names: stop signal sent, or about to be

    def unreachable(self, now: float) -> float:
        """A call found no engine at ``now``: since when none has been found."""
        if self.unreachable_since is None:
            self.unreachable_since = now
        return self.unreachable_since

    def reached(self) -> None:
        self.unreachable_since = None

    def begin_cleanup(self) -> bool:
        """Enter the cleanup; whether it kills and removes: an owner does, and so does a
        cancelled follower (the caller asked to kill now)."""
        self.cleaning = True
        if self.cut:
            self.owner = True
        return self.owner
