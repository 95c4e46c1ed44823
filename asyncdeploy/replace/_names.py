"""What a workload name means after a replace: one rule, used by every command that takes one.

A replace starts its new instance under a new name (``NAME-1a2b3c``, labelled
``LABEL_INSTANCE_OF=NAME``): the engines cannot hold two containers, nor Kubernetes two Pods, of
one name at once. So a name means the workload of that name when there is one, else the one
instance of the plan of that name. Several instances (a replace of it under way, or one left by
a replace that was killed) are a :class:`~asyncdeploy._errors.WorkloadConflict` naming them:
guessing could delete the wrong one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs

from asyncdeploy._errors import WorkloadConflict, WorkloadNotFound
from asyncdeploy.drivers.base import Driver
from asyncdeploy.labels import LABEL_INSTANCE_OF
from asyncdeploy.plan import WorkloadPlan

__all__ = ["current_name", "current_plan", "instance_of", "resolving"]

T = TypeVar("T")


async def instance_of(driver: Driver, name: str) -> str | None:
    """The one instance of plan ``name`` (None: there is none); several are a conflict."""
    instances = sorted(w.name for w in await driver.list({LABEL_INSTANCE_OF: name}))
    if not instances:
        return None
    if len(instances) > 1:
        raise WorkloadConflict(
            f"{name!r} has several instances ({', '.join(instances)}): a replace of it is under "
            "way, or one was interrupted; name the instance you mean",
            engine=driver.name,
        )
    return instances[0]


async def current_name(driver: Driver, name: str) -> str:
    """``name`` itself when such a workload exists, else its one instance; ``WorkloadNotFound``
    when neither exists."""
    try:
        await driver.get(name)
    except WorkloadNotFound:
        found = await instance_of(driver, name)
        if found is None:
            raise
        return found
    return name


async def resolving(driver: Driver, name: str, call: Callable[[str], Awaitable[T]]) -> T:
    """``call(name)``; when it finds no such workload, ``call`` of its one instance instead (the
    common case costs no extra engine call)."""
    try:
        return await call(name)
    except WorkloadNotFound:
        found = await instance_of(driver, name)
        if found is None:
            raise
    return await call(found)


async def current_plan(driver: Driver, plan: WorkloadPlan) -> WorkloadPlan:
    """The plan as a create must apply it: unchanged when its name exists or nothing does; the
    plan under its current instance's name when a replace left one (so a create of the same plan
    finds it unchanged, and a changed one replaces that instance, never a second copy)."""
    if plan.instance_of is not None:
        return plan
    try:
        await driver.get(plan.name)
    except WorkloadNotFound:
        found = await instance_of(driver, plan.name)
        if found is not None:
            return attrs.evolve(plan, name=found, instance_of=plan.name)
    return plan
