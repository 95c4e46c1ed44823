"""The drain's books, kept once for every driver: the effective grace period, what is known of
each container, the context every event carries, and the summary that ends a drain.

The engine drain (:mod:`asyncdeploy.drivers.engine._drain`) and the Kubernetes drain
(:mod:`asyncdeploy.drivers.kubernetes._drain`, its Pods' states read by
:mod:`asyncdeploy.drivers.kubernetes._pod_states`) differ in how they learn what happens; what
they write down about it (errors once each: :meth:`DrainBooks.error`), and how it is summed up,
is the same and lives here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from asyncdeploy._events import (
    ContainerEnd,
    ContainerOutcome,
    DrainFinished,
    DrainSummary,
    Emit,
)
from asyncdeploy.labels import ContainerRole
from asyncdeploy.plan import DEFAULT_GRACE_PERIOD_SECONDS

__all__ = ["DrainBooks", "TrackedContainer", "effective_grace", "summarize"]


def effective_grace(declared: int | str | None, override: int | None = None) -> int:
    """The grace period a drain uses: the caller's override, else the workload's declared one,
    else the default (the one place the default applies)."""
    if override is not None:
        return override
    return DEFAULT_GRACE_PERIOD_SECONDS if declared is None else int(declared)


@attrs.define(kw_only=True)
class TrackedContainer:
    """What a drain knows of one init or run container; ``outcome`` None while unknown."""

    name: str
    role: ContainerRole
    outcome: ContainerEnd | None = None
    exit_code: int | None = None
    seconds: float | None = None


def summarize(
    workload: str,
    grace: int,
    seconds: float,
    containers: Iterable[TrackedContainer],
    errors: Sequence[str],
    *,
    unknown: ContainerEnd = "missing",
) -> DrainSummary:
    """The summary of one drain; a container whose end was never seen counts as ``unknown``."""
    return DrainSummary(
        workload=workload,
        grace_period_seconds=grace,
        seconds=seconds,
        containers=tuple(
            ContainerOutcome(
                name=c.name,
                role=c.role,
                outcome=c.outcome or unknown,
                exit_code=c.exit_code,
                seconds=c.seconds,
            )
            for c in containers
        ),
        errors=tuple(errors),
    )


@attrs.define(kw_only=True)
class DrainBooks:
    """One workload's drain: its clock, its deadline, its error lines, its events' context."""

    workload: str
    grace: int
    started: float  # on ``clock``, when the whole drain call began
    emit: Emit
    errors: list[str] = attrs.field(factory=list)
    clock: Callable[[], float]  # the caller's (anyio's loop clock, or a test's)
    # started + grace; moved on only by an engine delete that takes over a dead one's drain
    deadline: float = attrs.field(
        default=attrs.Factory(lambda self: self.started + self.grace, takes_self=True)
    )

    def elapsed(self) -> float:
        return self.clock() - self.started

    def at(self, container: TrackedContainer | None = None, **more: Any) -> dict[str, Any]:
        """The fields every event carries (workload, elapsed; container and role for one)."""
        context: dict[str, Any] = {"workload": self.workload, "elapsed": self.elapsed()}
        if container is not None:
            context.update(container=container.name, role=container.role)
        return context | more

    def error(self, message: str) -> None:
        """Write an error line down, once (a retried step may fail the same way twice)."""
        if message not in self.errors:
            self.errors.append(message)

    def finish(
        self,
        containers: Iterable[TrackedContainer],
        *,
        unknown: ContainerEnd = "missing",
        tearing_down: bool = False,
        unreachable_node: str | None = None,
    ) -> DrainSummary:
        """Sum the drain up and emit ``DrainFinished``, its last event (``tearing_down``: the
        containers all ended, the workload was still going when the wait ended;
        ``unreachable_node``: the Kubernetes node that stopped reporting while it drained)."""
        summary = summarize(
            self.workload, self.grace, self.elapsed(), containers, self.errors, unknown=unknown
        )
        if tearing_down or unreachable_node:
            summary = attrs.evolve(
                summary, tearing_down=tearing_down, unreachable_node=unreachable_node
            )
        self.emit(DrainFinished(**self.at(), summary=summary))
        return summary
