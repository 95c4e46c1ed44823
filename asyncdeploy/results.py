"""What users receive from a deployer besides events: workload status, apply results, exec output.

Plain frozen values shared by every driver; engine dicts and Kubernetes objects never appear here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from asyncdeploy.events import DrainSummary
from asyncdeploy.labels import ContainerRole

__all__ = [
    "ApplyResult",
    "ContainerStatus",
    "EngineInfo",
    "ExecResult",
    "PublishedPort",
    "WorkloadEvent",
    "WorkloadStatus",
]


@attrs.frozen(kw_only=True)
class EngineInfo:
    driver: str
    version: str
    api_version: str
    engine: str = ""  # what answered: docker, podman, or the Kubernetes server's git version


@attrs.frozen(kw_only=True)
class ContainerStatus:
    name: str
    role: ContainerRole
    image: str
    state: str  # created, running, exited, ... as the engine says it
    exit_code: int | None = None
    health: str | None = None  # healthy, unhealthy, starting, or None without a check
    restarts: int | None = None  # restarts the engine counted (None: not known)
    checks: tuple[str, ...] = ()  # the checks it has: startup, readiness, liveness


@attrs.frozen(kw_only=True)
class PublishedPort:
    """A container port reachable on the host: ``host_ip:host_port`` -> ``container_port``."""

    container_port: int
    host_port: int | None  # None: not published on the host (Kubernetes without hostPort)
    protocol: str = "tcp"
    host_ip: str = ""

    def __str__(self) -> str:
        if self.host_port is None:
            return f"{self.container_port}/{self.protocol}"
        host = f"{self.host_ip}:" if self.host_ip not in ("", "0.0.0.0", "::") else ""
        return f"{host}{self.host_port}->{self.container_port}/{self.protocol}"


@attrs.frozen(kw_only=True)
class WorkloadStatus:
    name: str
    driver: str
    labels: Mapping[str, str]
    grace_period_seconds: int
    plan_digest: str | None
    containers: tuple[ContainerStatus, ...]
    unfinished: str | None = None
    """Why a deployer that died left it half-made or half-drained (``reconcile`` finishes it)."""
    ports: tuple[PublishedPort, ...] = ()  # what the workload publishes, host -> container
    namespace: str | None = None  # Kubernetes: the Pod's namespace (engines have none)

    @property
    def state(self) -> str:
        """``running`` when every run container runs, else the first run container's state."""
        runs = [c for c in self.containers if c.role == "run"]
        if runs and all(c.state == "running" for c in runs):
            return "running"
        return runs[0].state if runs else "unknown"


@attrs.frozen(kw_only=True)
class ApplyResult:
    """What ``apply`` did: ``created``, ``unchanged`` or ``replaced``."""

    action: Literal["created", "unchanged", "replaced"]
    status: WorkloadStatus
    replaced: DrainSummary | None = None
    strategy: Literal["surge", "recreate"] | None = None  # how a changed plan replaced it
    downtime: float | None = None  # recreate: seconds without a ready instance


@attrs.frozen(kw_only=True)
class ExecResult:
    exit_code: int
    output: str


@attrs.frozen(kw_only=True)
class WorkloadEvent:
    """Something the engine recorded about a workload: a container started, died, turned
    unhealthy, was restarted, OOM-killed; on Kubernetes the Pod's Events (scheduling, pulls,
    probe failures, back-offs)."""

    time: float  # UNIX time
    container: str  # the container's name in the plan ("" for the workload as a whole)
    action: str  # the engine's word: start, die, health_status, restart, oom, Scheduled, ...
    message: str = ""
