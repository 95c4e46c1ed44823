"""Drain events: one frozen value per step of a drain, and the summary that ends it.

Every event carries the ``workload`` it belongs to and ``elapsed``, the seconds since that
workload's drain started. Events about one container also carry ``container`` and ``role``
(``pause``, ``init``, ``run`` or ``autoheal``). Consumers ``match`` on :data:`DrainEvent`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import attrs

from asyncdeploy.labels import ContainerRole
from asyncdeploy.pull_events import PullEvent

__all__ = [
    "ContainerExited",
    "ContainerForceKilled",
    "ContainerOutcome",
    "ContainerRemoved",
    "DrainEvent",
    "DrainFinished",
    "DrainStarted",
    "DrainSummary",
    "Emit",
    "Event",
    "Outcome",
    "PauseRemoved",
    "PreStopFinished",
    "PreStopStarted",
    "Role",
    "SidecarRemoved",
    "SignalSent",
    "event_to_dict",
    "ignore_events",
]

Role = ContainerRole
Outcome = Literal["exited", "killed", "already-exited", "missing", "unreachable"]
"""How a container ended: ``unreachable`` when the engine stopped answering before its end was
seen (a later delete finishes the job); ``missing`` when it went without its end being seen."""
OUTCOMES: tuple[Outcome, ...] = ("exited", "killed", "already-exited", "missing", "unreachable")


@attrs.frozen(kw_only=True)
class DrainStarted:
    """The drain of one workload began; every container must be gone by ``deadline``."""

    workload: str
    elapsed: float
    grace_period_seconds: int
    deadline: float  # wall-clock (UNIX) time
    containers: tuple[str, ...]


@attrs.frozen(kw_only=True)
class SidecarRemoved:
    """The autoheal sidecar was removed, before any other container was touched."""

    workload: str
    elapsed: float
    container: str
    role: Role = "autoheal"


@attrs.frozen(kw_only=True)
class PreStopStarted:
    workload: str
    elapsed: float
    container: str
    role: Role = "run"


@attrs.frozen(kw_only=True)
class PreStopFinished:
    """A pre-stop hook ended: ``exit_code`` is None when it was cut off at the deadline."""

    workload: str
    elapsed: float
    container: str
    exit_code: int | None
    timed_out: bool
    role: Role = "run"


@attrs.frozen(kw_only=True)
class SignalSent:
    workload: str
    elapsed: float
    container: str
    signal: str
    role: Role = "run"


@attrs.frozen(kw_only=True)
class ContainerExited:
    """A container exited; ``graceful`` is False when it had to be killed."""

    workload: str
    elapsed: float
    container: str
    exit_code: int | None
    graceful: bool
    role: Role = "run"


@attrs.frozen(kw_only=True)
class ContainerForceKilled:
    """The deadline passed (or the drain was cancelled) and the container was sent SIGKILL."""

    workload: str
    elapsed: float
    container: str
    reason: str = "deadline"
    role: Role = "run"


@attrs.frozen(kw_only=True)
class ContainerRemoved:
    workload: str
    elapsed: float
    container: str
    role: Role = "run"


@attrs.frozen(kw_only=True)
class PauseRemoved:
    """The pause container, holder of the shared namespaces, was removed last."""

    workload: str
    elapsed: float
    container: str
    role: Role = "pause"


@attrs.frozen(kw_only=True)
class ContainerOutcome:
    """How one container ended: ``seconds`` from the start of the drain to its exit."""

    name: str
    role: Role
    outcome: Outcome
    exit_code: int | None
    seconds: float | None


@attrs.frozen(kw_only=True)
class DrainSummary:
    """The result of draining one workload."""

    workload: str
    grace_period_seconds: int
    seconds: float
    containers: tuple[ContainerOutcome, ...]
    errors: tuple[str, ...] = ()

    def count(self, outcome: Outcome) -> int:
        return sum(1 for c in self.containers if c.outcome == outcome)

    @property
    def ok(self) -> bool:
        return not self.errors


@attrs.frozen(kw_only=True)
class DrainFinished:
    """The last event of a workload's drain, carrying its summary."""

    workload: str
    elapsed: float
    summary: DrainSummary


DrainEvent = (
    DrainStarted
    | SidecarRemoved
    | PreStopStarted
    | PreStopFinished
    | SignalSent
    | ContainerExited
    | ContainerForceKilled
    | ContainerRemoved
    | PauseRemoved
    | DrainFinished
)


Event = DrainEvent | PullEvent
"""Everything a deployer reports as it happens: drains, and the image pulls of a create."""


def event_to_dict(event: Event) -> dict[str, Any]:
    """Plain JSON-ready data: ``event`` (the type's name) first, then the event's fields.

    ``DrainFinished`` is flattened: its summary's containers and totals sit at the top level.
    """
    out: dict[str, Any] = {"event": type(event).__name__}
    if isinstance(event, DrainFinished):
        summary = event.summary
        out.update(
            workload=event.workload,
            elapsed=round(event.elapsed, 3),
            grace_period_seconds=summary.grace_period_seconds,
            seconds=round(summary.seconds, 3),
            containers=[
                {
                    "name": c.name,
                    "role": c.role,
                    "outcome": c.outcome,
                    "exit_code": c.exit_code,
                    "seconds": None if c.seconds is None else round(c.seconds, 3),
                }
                for c in summary.containers
            ],
            totals={outcome: summary.count(outcome) for outcome in OUTCOMES},
            errors=list(summary.errors),
        )
        return out
    for key, value in attrs.asdict(event, recurse=False).items():
        out[key] = round(value, 3) if key == "elapsed" else value
    if "containers" in out:
        out["containers"] = list(out["containers"])
    return out


Emit = Callable[[Event], None]
"""Hands an event to the consumer without ever waiting for it (a slow consumer never delays a kill)."""


def ignore_events(_: Event) -> None:
    """An :data:`Emit` for drains nobody listens to (a replacement inside ``apply``)."""
