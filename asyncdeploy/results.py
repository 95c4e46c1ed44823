"""What users receive from a deployer besides events: workload status, apply results, exec output.

Plain frozen values shared by every driver; engine dicts and Kubernetes objects never appear here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from asyncdeploy.events import DrainSummary
from asyncdeploy.labels import ContainerRole

__all__ = ["ApplyResult", "ContainerStatus", "EngineInfo", "ExecResult", "WorkloadStatus"]


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


@attrs.frozen(kw_only=True)
class WorkloadStatus:
    name: str
    driver: str
    labels: Mapping[str, str]
    grace_period_seconds: int
    plan_digest: str | None
    containers: tuple[ContainerStatus, ...]

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


@attrs.frozen(kw_only=True)
class ExecResult:
    exit_code: int
    output: str
