"""The contract every driver meets, and the small values drivers return.

Drivers take plans and return attrs values: engine dicts and Kubernetes model objects never cross
this boundary. Every driver drains with the same event types (:mod:`asyncdeploy.events`).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from typing import Any, ClassVar, Protocol

from asyncdeploy.events import DrainSummary, Emit
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.results import ApplyResult, EngineInfo, ExecResult, WorkloadStatus
from asyncdeploy.selectors import SelectorLike

__all__ = [
    "LABEL_CONTAINER",
    "LABEL_GRACE",
    "LABEL_PLAN_DIGEST",
    "LABEL_ROLE",
    "LABEL_WORKLOAD",
    "Driver",
]

# Labels that identify what asyncdeploy created (container labels, Pod labels and annotations).
LABEL_WORKLOAD = "asyncdeploy.io/workload"
LABEL_ROLE = "asyncdeploy.io/role"
LABEL_CONTAINER = "asyncdeploy.io/container"
LABEL_GRACE = "asyncdeploy.io/termination-grace-period-seconds"
LABEL_PLAN_DIGEST = "asyncdeploy.io/plan-digest"


class Driver(Protocol):
    """What a deployer needs from an engine. All methods map engine errors to ``EngineError``."""

    name: ClassVar[str]

    async def ping(self) -> EngineInfo:
        """Check the engine answers; raise ``EngineUnavailable`` when it does not."""
        ...

    async def apply(self, plan: WorkloadPlan, *, emit: Emit | None = None) -> ApplyResult:
        """Create the workload; a no-op for an unchanged plan, a graceful replacement otherwise."""
        ...

    async def get(self, name: str) -> WorkloadStatus:
        """Raise ``WorkloadNotFound`` when there is no such workload."""
        ...

    async def list(self, selector: SelectorLike | None = None) -> builtins.list[WorkloadStatus]:
        """The workloads whose labels match ``selector`` (every workload without one)."""
        ...

    async def wait_ready(self, name: str, *, timeout: float) -> WorkloadStatus:
        """Wait until every run container passes its readiness check (or runs, without one).

        Raise ``EngineTimeout`` when ``timeout`` seconds pass first.
        """
        ...

    def logs(
        self,
        name: str,
        *,
        container: str | None = None,
        follow: bool = False,
        tail: int | None = None,
        since: float | None = None,
        timestamps: bool = False,
    ) -> AsyncIterator[str]:
        """Output of ``container`` (None: the plan's first run container); ``tail`` last lines,
        ``since`` a Unix time, ``timestamps`` RFC 3339 prefixes."""
        ...

    async def exec(
        self, name: str, command: Sequence[str], *, container: str | None = None
    ) -> ExecResult: ...

    async def inspect(self, name: str) -> dict[str, Any]:
        """Engine detail for people, masked by :mod:`asyncdeploy.secrets`."""
        ...

    async def drain(
        self, names: Sequence[str], *, grace_period_seconds: int | None, emit: Emit
    ) -> builtins.list[DrainSummary]:
        """Drain the named workloads concurrently under one deadline and remove them.

        Emits every step; returns one summary per workload. A missing name raises
        ``WorkloadNotFound`` before anything is touched.
        """
        ...

    async def aclose(self) -> None: ...
