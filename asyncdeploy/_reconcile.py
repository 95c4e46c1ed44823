"""Finishing what a deployer that died left behind: half-made and half-drained workloads.

The drivers mark them (:attr:`WorkloadStatus.unfinished`; on Docker and Podman see
``drivers/engine/_unfinished.py``; a Kubernetes Pod is made and removed whole by the cluster,
so none is ever marked there). Finishing one is a drain from one look, like ``delete``: what
still runs gets its hook, its stop signal and the deadline; what has exited is removed; the pause
container goes last; every step is an event.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from anyio.abc import ObjectReceiveStream

from asyncdeploy._event_stream import drain_stream
from asyncdeploy._events import DrainEvent
from asyncdeploy._kill import KillSwitch
from asyncdeploy._operations import Drain
from asyncdeploy._results import WorkloadStatus
from asyncdeploy._selectors import SelectorLike, as_selector
from asyncdeploy.drivers.base import Driver
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.replace._lock import lock_key

if TYPE_CHECKING:
    from asyncdeploy.deployer import Deployer

__all__ = [
    "UNKNOWN_OWNER",
    "being_replaced",
    "finishing",
    "plan_of_finish",
    "unfinished_workloads",
]

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
    """Drain and remove these workloads from one look, under one deadline, with their events.

    A workload whose plan a replace was replacing when its deployer died (the replace's lock is
    still there) keeps the plan's named volumes: the plan lives on, and its next instance mounts
    them (a killed recreate had drained the old instance and not yet made the new one)."""
    driver = deployer.driver

    @asynccontextmanager
    async def start(kill: KillSwitch) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        found = await driver.find(names)
        keep = bool(await being_replaced(driver, names))
        drain = drain_stream(driver, found, grace_period_seconds, kill, keep_volumes=keep)
        async with drain as events:
            yield events

    return Drain(start)


async def being_replaced(driver: Driver, names: list[str]) -> list[str]:
    """The plans of ``names`` whose replace lock is held (by a live replace, or left by a dead
    one)."""
    plans = {name: name for name in names}
    for status in await driver.list():
        if status.name in plans:
            plans[status.name] = status.labels.get(LABEL_INSTANCE_OF) or status.name
    return [
        plan
        for plan in sorted(set(plans.values()))
        if await driver.read_marker(lock_key(plan)) is not None
    ]
