"""Finishing what a deployer that died left behind: half-made and half-drained workloads.

The drivers mark them (:attr:`WorkloadStatus.unfinished`; on Docker and Podman see
``drivers/engine/_unfinished.py``; a Kubernetes Pod is made and removed whole by the cluster,
so none is ever marked there). Finishing one is a drain from one look, like ``delete``: what
still runs gets its hook, its stop signal and the deadline; what has exited is removed; the pause
container goes last; every step is an event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from asyncdeploy._operations import Drain, draining
from asyncdeploy.results import WorkloadStatus
from asyncdeploy.selectors import SelectorLike, as_selector

if TYPE_CHECKING:
    from asyncdeploy.deployer import Deployer

__all__ = ["UNKNOWN_OWNER", "finishing", "plan_of_finish", "unfinished_workloads"]

UNKNOWN_OWNER = "(unknown owner)"


async def unfinished_workloads(
    deployer: Deployer, selector: SelectorLike | None = None, *, force: bool = False
) -> list[WorkloadStatus]:
    """The unfinished workloads ``selector`` matches; those whose maker cannot be told dead
    from here (another host) only with ``force``."""
    found = await deployer.driver.list(as_selector(selector))
    return [
        status
        for status in found
        if status.unfinished is not None and (force or UNKNOWN_OWNER not in status.unfinished)
    ]


def plan_of_finish(status: WorkloadStatus) -> list[str]:
    """What finishing it does, step by step, for ``--dry-run`` (pure)."""
    if not status.containers:  # only named volumes are left (a create killed before its pause)
        return ["remove its named volumes (no container of the plan is left to drain)"]
    steps = []
    for container in sorted(status.containers, key=lambda c: c.role == "pause"):
        if container.role == "pause":
            steps.append(f"remove {container.name} (the pause container, last)")
        elif container.state == "running":
            steps.append(
                f"drain {container.name} (running: its pre_stop hook, its stop signal, "
                f"up to {status.grace_period_seconds} s)"
            )
        else:
            steps.append(f"remove {container.name} ({container.state})")
    return steps


def finishing(
    deployer: Deployer, names: list[str], *, grace_period_seconds: int | None = None
) -> Drain:
    """Drain and remove these workloads from one look, under one deadline, with their events."""
    return draining(deployer.driver, lambda: deployer.driver.find(names), grace_period_seconds)
