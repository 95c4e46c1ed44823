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

from asyncdeploy._events import DrainEvent
from asyncdeploy._kill import KillSwitch
from asyncdeploy._operations import Drain
from asyncdeploy._results import WorkloadStatus
from asyncdeploy._selectors import SelectorLike, as_selector
from asyncdeploy.drivers.base import Driver
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.replace._lock import has_instance, lock_key, lock_plan, retire_quietly

if TYPE_CHECKING:
    from asyncdeploy.deployer import Deployer

__all__ = [
    "UNKNOWN_OWNER",
    "being_replaced",
    "finishing",
    "left_locks",
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


async def left_locks(driver: Driver) -> list[str]:
    """The plans whose replace lock is left while no instance of them is (a replace killed
    after it drained the last one, or an asyncdeploy that kept its locks' remains): ``reconcile``
    retires them (``replace/_lock.py``: taken first; a live replace's is left alone)."""
    plans = [p for p in map(lock_plan, await driver.marker_keys()) if p is not None]
    return [p for p in plans if not await has_instance(driver, p)]


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
    async def start(_: KillSwitch) -> AsyncIterator[ObjectReceiveStream[DrainEvent]]:
        found = await driver.find(names)
        keep = bool(await being_replaced(driver, names))
        async with drain.stream(driver, found, grace_period_seconds, keep_volumes=keep) as events:
            yield events
        await retire_quietly(driver, names)  # the replace lock of a plan now gone

    drain = Drain(start)
    return drain


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
