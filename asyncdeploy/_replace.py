"""Replacing a workload: a new instance beside the old one, then the old one drained.

:meth:`Deployer.replacing <asyncdeploy.deployer.Deployer.replacing>` is the public door; the
flow lives here so that the deployer stays the small awaitable API.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import attrs
from anyio.abc import ObjectReceiveStream

from asyncdeploy.errors import AsyncDeployError, WorkloadConflict
from asyncdeploy.events import DrainEvent, DrainSummary
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.plan import WorkloadPlan
from asyncdeploy.results import WorkloadStatus

if TYPE_CHECKING:
    from asyncdeploy.deployer import Deployer

__all__ = ["ReplaceResult", "Replacement", "replacing"]


@attrs.frozen(kw_only=True)
class Replacement:
    """A replacement in progress: the new instance (ready) and the old ones' drain events."""

    new: WorkloadStatus
    old: tuple[str, ...]
    events: ObjectReceiveStream[DrainEvent]


@attrs.frozen(kw_only=True)
class ReplaceResult:
    """A finished replacement: the new instance and one drain summary per old instance."""

    new: WorkloadStatus
    drained: tuple[DrainSummary, ...]


@asynccontextmanager
async def replacing(
    deployer: Deployer,
    plan: WorkloadPlan,
    *,
    old: Sequence[str] | None = None,
    new_name: str | None = None,
    ready_timeout: float = 60,
    grace_period_seconds: int | None = None,
    on_ready: Callable[[WorkloadStatus], Awaitable[None]] | None = None,
) -> AsyncIterator[Replacement]:
    """Start ``plan`` as a new instance, wait until it is ready, then drain the old ones.

    The new instance is named ``new_name`` (default ``<plan.name>-<6 hex>``) and labelled
    ``replace.asyncdeploy.io/instance-of=<plan.name>``. The old ones are ``old``, or by default the
    workload named ``plan.name`` and every earlier instance of it. A load balancer follows
    readiness: it adds the new instance once its readiness check passes (``on_ready`` is
    awaited then, before any drain: register it there if your balancer is told, not polled),
    and the old one leaves rotation when its drain fails its readiness check, before its
    listener closes. If the new instance never becomes ready it is removed and the old
    ones are left untouched.
    """
    driver = deployer.driver
    new_name = new_name or f"{plan.name[:56]}-{secrets.token_hex(3)}"
    if await deployer._exists(new_name):
        raise WorkloadConflict(
            f"cannot start the replacement as {new_name!r}: a workload has that name",
            engine=driver.name,
            status=409,
        )
    if old is None:
        instances = await driver.list({LABEL_INSTANCE_OF: plan.name})
        named = [plan.name] if await deployer._exists(plan.name) else []
        old = [*named, *(w.name for w in instances if w.name != plan.name)]
    else:
        await driver.find(old)  # a clear WorkloadNotFound before anything starts
    old = tuple(old)
    new_plan = attrs.evolve(plan, name=new_name, instance_of=plan.name)
    await driver.apply(new_plan)
    try:
        status = await driver.wait_ready(new_name, timeout=ready_timeout)
        if on_ready is not None:
            await on_ready(status)
    except BaseException:
        # the old instances were never touched; only the new one goes (errors of this
        # cleanup must not hide why the replacement failed)
        with anyio.CancelScope(shield=True), anyio.move_on_after(60):
            try:
                await deployer.delete(new_name, grace_period_seconds=0)
            except AsyncDeployError:
                pass
        raise
    found = await driver.find(old)  # afresh: they may have changed while it started
    async with deployer._drain(found, grace_period_seconds, None) as events:
        yield Replacement(new=status, old=old, events=events)
