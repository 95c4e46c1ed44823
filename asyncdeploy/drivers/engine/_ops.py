"""What the engine drain works on: the containers it found, what a look or a claim answers.
Values only (the drain's pure core reads them); the calls themselves are ``ContainerOps``
(:mod:`._drain.calls`)."""

from __future__ import annotations

import enum

import attrs

from asyncdeploy._errors import EngineUnavailable
from asyncdeploy.labels import ContainerRole

__all__ = [
    "CallNotSent",
    "ClaimAnswer",
    "ContainerLook",
    "ContainerRef",
    "WorkloadSnapshot",
]


class CallNotSent(EngineUnavailable):
    """The call never reached the engine (no connection could be made): sending it again is
    safe. A plain ``EngineUnavailable`` from a call that changes something may have landed."""


class CallUnanswered(EngineUnavailable):
    """The engine took the call and did not answer it within its bound: an engine that does
    not answer, as good as unreachable (the call may have landed)."""


class ClaimAnswer(enum.Enum):
    """The engine's answer to a claim of a drain."""

    CLAIMED = enum.auto()  # this drain holds it
    HELD = enum.auto()  # another delete does
    REFUSED = enum.auto()  # could not tell (paused already, or not running): a look decides


@attrs.frozen(kw_only=True)
class ContainerRef:
    id: str
    name: str
    role: ContainerRole
    running: bool
    paused: bool = False
    exit_code: int | None = None
    pre_stop: tuple[str, ...] | None = None
    pre_stop_http: tuple[int, str] | None = None  # (port, path): a GET to the workload
    stop_signal: str = "SIGTERM"
    restart_policy: str = "no"
    workload: str = ""  # the workload it belongs to (its label)
    # its propagation window (plan.propagation), from its label: (seconds, "pre_stop" | "signal")
    propagation: tuple[float, str] | None = None


@attrs.frozen(kw_only=True)
class WorkloadSnapshot:
    name: str
    grace_period_seconds: int
    containers: tuple[ContainerRef, ...]
    plan_name: str = ""  # the plan it is an instance of (its volumes' owner); "" = its name
    # whether a container mounts a named volume (False: the drain need not look for any);
    # None: unknown (nothing is left but the volumes, say), so the drain looks
    volumes: bool | None = None

    @property
    def volume_owner(self) -> str:
        return self.plan_name or self.name


@attrs.frozen(kw_only=True)
class ContainerLook:
    """A container's state at one moment."""

    running: bool
    paused: bool = False
    exit_code: int | None = None
