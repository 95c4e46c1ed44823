"""What users receive from a deployer besides events: workload status, apply results, exec output.

Plain frozen values shared by every driver; engine dicts and Kubernetes objects never appear here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from asyncdeploy._events import DrainSummary
from asyncdeploy.labels import ContainerRole
from asyncdeploy.plan import gate_name

__all__ = [
    "DRAINING",
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
    """What answered a deployer: its driver, the engine's version and API version."""

    driver: str
    version: str
    api_version: str
    engine: str = ""  # what answered: docker, podman, or the Kubernetes server's git version


DRAINING = "draining"
"""The health of a running container whose workload's drain has begun (on Docker and Podman,
told by the drain's claim): a draining server answers its readiness check with 503 on purpose,
and nothing new should be sent to it."""


@attrs.frozen(kw_only=True)
class ContainerStatus:
    """One container of a workload as the engine reports it, in plan order."""

    name: str
    role: ContainerRole
    image: str
    state: str  # created, running, exited, ... as the engine says it
    exit_code: int | None = None
    health: str | None = None  # healthy, unhealthy, starting, or None without a check
    # (or DRAINING: a drain of its workload has begun, so it is not ready whatever it answers)
    restarts: int | None = None  # restarts the engine counted (None: not known)
    checks: tuple[str, ...] = ()  # the checks the plan gave it: startup, readiness, liveness

    @property
    def ready(self) -> bool:
        """Running, and not failing a check the plan gave it."""
        if self.state != "running" or self.health == DRAINING:
            return False
        return not self.checks or self.health in (None, "healthy")


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
    """A workload as the engine reports it: its containers, ports, labels and grace period."""

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
    created: float | None = None  # UNIX time it was created (its pause container, its Pod)
    draining_until: float | None = None
    """A drain of it is under way (its claim on Docker and Podman, the Pod's deletion on
    Kubernetes): the UNIX time of that drain's deadline."""
    node: str | None = None  # Kubernetes: the node the Pod is bound to (None: not scheduled yet)

    @property
    def state(self) -> str:
        """``draining`` while a drain runs (``unfinished`` says when its deployer died);
        ``running`` when every run container runs; else
        the first run container's state (``creating`` before there is one)."""
        if self.draining_until is not None or any(
            c.role == "pause" and c.state == "paused" for c in self.containers
        ):
            return "draining"  # (a paused pause container is a drain's claim)
        runs = [c for c in self.containers if c.role == "run"]
        if runs and all(c.state == "running" for c in runs):
            return "running"
        if runs:
            return runs[0].state
        pause = next((c for c in self.containers if c.role == "pause"), None)
        if pause is not None and pause.state in ("created", "running"):
            return "creating"  # its run containers are not made yet
        return pause.state if pause is not None else "unknown"

    @property
    def ready(self) -> tuple[int, int]:
        """How many run containers are ready, of how many: running, and passing the checks the
        plan gave them (a health check an image brings along is shown, not counted); a gated
        container is ready when its gate is (the gate answers for it)."""
        by_name = {c.name: c for c in self.containers}
        runs = [c for c in self.containers if c.role == "run"]
        ready = 0
        for run in runs:
            gate = by_name.get(gate_name(run.name))
            ready += (gate if gate is not None and gate.role == "sidecar" else run).ready
        return ready, len(runs)


@attrs.frozen(kw_only=True)
class ApplyResult:
    """What ``apply`` did: ``created``, ``unchanged`` or ``replaced``."""

    action: Literal["created", "unchanged", "replaced"]
    status: WorkloadStatus
    replaced: DrainSummary | None = None
    strategy: Literal["surge", "recreate"] | None = None  # how a changed plan replaced it
    downtime: float | None = None  # recreate: seconds from the old ones' stop to the new one ready


@attrs.frozen(kw_only=True)
class ExecResult:
    """A command run by ``exec``: its exit code (-1 when the engine gave none) and output."""

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
