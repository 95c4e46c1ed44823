"""One replace at a time per plan name: a marker the engine holds that names a live owner.

The marker is an engine object created atomically under a name derived from the plan's
(:meth:`Driver.hold_marker`: a volume on Docker and Podman, a ConfigMap on Kubernetes): whoever
creates it holds the lock; whoever finds it existing reads its record — the owner
(:class:`~asyncdeploy._owner.Owner`) and a wall-clock bound past which no replacement can still be
running. A record whose owner is dead (same host: its pid is gone or reused) or whose bound has
passed is stale: the next replace removes it and takes the lock, so a killed replace never
leaves it stuck for ever (on the same host not even for a moment). A record from a live owner
(or one that cannot be checked from here, within its bound) makes the replace fail at once
with :class:`~asyncdeploy._errors.ReplaceInProgress` (exit 1), naming the owner.

A replace that ends, however it ends, leaves nothing of its lock: it retires the marker it
holds (``Driver.retire_marker``). What a killed one left goes with the plan
(:func:`retire_locks`): after the delete of one of its instances, or by ``reconcile``, the lock
is *taken* as a replace takes it (a live replace's lock is never touched, a dead one's is taken
over) and released. A replace that starts meanwhile finds the lock held and fails at once
(``ReplaceInProgress``, as against another replace: run it again).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

import anyio
import attrs

from asyncdeploy._errors import AsyncDeployError, ReplaceInProgress, WorkloadNotFound
from asyncdeploy._owner import Owner
from asyncdeploy.drivers.base import Driver
from asyncdeploy.labels import LABEL_INSTANCE_OF

__all__ = [
    "LockRecord",
    "has_instance",
    "lock_key",
    "lock_plan",
    "replace_lock",
    "retire_locks",
    "retire_quietly",
]

log = logging.getLogger("asyncdeploy")

TAKEOVER_TRIES = 3
RETIRE_BOUND = 60.0  # seconds a retire holds the lock at most (a look and a removal)
_PREFIX = "asyncdeploy-replace-lock."


def lock_key(plan_name: str) -> str:
    """The marker's name: a dot cannot occur in a workload name, so none can collide with it."""
    return f"{_PREFIX}{plan_name}"


def lock_plan(key: str) -> str | None:
    """The plan whose lock ``key`` is (None: not a replace lock's key)."""
    return key.removeprefix(_PREFIX) if key.startswith(_PREFIX) else None


@attrs.frozen(kw_only=True)
class LockRecord:
    owner: Owner
    started: float  # wall time
    expires: float  # wall time: no replacement of this owner can still run after it

    def stale(self, now: float) -> bool:
        return now > self.expires or self.owner.alive() is False

    def to_json(self) -> str:
        return json.dumps(
            {"owner": self.owner.to_data(), "started": self.started, "expires": self.expires},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> LockRecord | None:
        try:
            raw = json.loads(text)
            owner = Owner.from_data(raw["owner"])
            if owner is None:
                return None
            return cls(owner=owner, started=float(raw["started"]), expires=float(raw["expires"]))
        except (ValueError, KeyError, TypeError):
            return None


@asynccontextmanager
async def replace_lock(
    driver: Driver, plan_name: str, *, bound: float, labels: dict[str, str]
) -> AsyncIterator[LockRecord]:
    """Hold the replace lock of ``plan_name`` for the block; ``bound``: seconds the replacement
    may take at most (its record is stale after it). Released (shielded) on the way out, and
    nothing of it is left."""
    key = lock_key(plan_name)
    now = time.time()
    mine = LockRecord(owner=Owner.this_process(), started=now, expires=now + bound)
    record = mine.to_json()
    for _ in range(TAKEOVER_TRIES):
        held = await driver.hold_marker(key, record, labels=labels)
        if held is None:
            break
        theirs = LockRecord.from_json(held)
        if theirs is not None and not theirs.stale(time.time()):
            since = time.strftime("%H:%M:%S", time.localtime(theirs.started))
            raise ReplaceInProgress(
                f"another replace of {plan_name!r} is running ({theirs.owner.describe()}, "
                f"since {since}); wait for it to finish, then run this one again",
                engine=driver.name,
            )
        await driver.drop_marker(key, held)  # stale (or unreadable): its owner is gone
    else:
        raise ReplaceInProgress(
            f"could not take the replace lock of {plan_name!r}: another replace keeps taking it",
            engine=driver.name,
        )
    try:
        yield mine
    finally:
        # retired, not dropped: a replace that ends (done, failed, rolled back, interrupted)
        # leaves nothing of its lock; the marker's free remains (a volume on Docker and Podman)
        # outlived it, and only a delete of one of the plan's instances removed them
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            try:
                await driver.retire_marker(key, record)
            except AsyncDeployError:
                pass  # stale once this process is gone: the next replace takes it over


async def retire_locks(driver: Driver, names: Iterable[str] | None = None) -> list[str]:
    """Remove what killed replaces left of the locks of these plans (the module's rule);
    ``names``: the workloads just deleted (a plan's lock is looked at when one of them is
    the plan or, by the name a replace gives, ``PLAN-xxxxxx``, one of its instances); None:
    every plan that has a lock (``reconcile``). The plans whose lock was retired."""
    plans = [p for p in map(lock_plan, await driver.marker_keys()) if p is not None]
    if names is not None:
        deleted = set(names)
        plans = [p for p in plans if p in deleted or any(_instance_name(n, p) for n in deleted)]
    return [plan for plan in plans if await _retire(driver, plan)]


def _instance_stem(name: str) -> str | None:
    """The plan name (cut at 56) of a name of the form a replace gives an instance (``_run``:
    ``PLAN-`` and 6 hex digits); None for any other name."""
    stem, _, suffix = name.rpartition("-")
    hexadecimal = len(suffix) == 6 and all(c in "0123456789abcdef" for c in suffix)
    return stem if stem and hexadecimal else None


def _instance_name(name: str, plan: str) -> bool:
    return _instance_stem(name) == plan[:56]


async def retire_quietly(driver: Driver, names: Iterable[str]) -> None:
    """:func:`retire_locks` after a delete, which it never fails: an engine error leaves the
    remains to the next delete or ``reconcile`` (logged). Only a delete of an instance a
    replace made (``PLAN-xxxxxx``) looks: a plan never replaced has no lock, and its delete
    makes no call more."""
    instances = [n for n in names if _instance_stem(n) is not None]
    if not instances:
        return
    try:
        await retire_locks(driver, instances)
    except AsyncDeployError as error:
        log.warning("the replace lock's remains were left (%s); reconcile removes them", error)


async def _retire(driver: Driver, plan_name: str) -> bool:
    try:
        async with replace_lock(driver, plan_name, bound=RETIRE_BOUND, labels={}):
            pass  # taken (a dead replace's record taken over), then released: nothing stays
        return True
    except ReplaceInProgress:
        return False  # a live replace holds it: its lock, not ours to remove


async def has_instance(driver: Driver, plan_name: str) -> bool:
    """The plan has a workload: of its name, or an instance a replace made."""
    if await driver.list({LABEL_INSTANCE_OF: plan_name}):
        return True
    try:
        await driver.get(plan_name)
    except WorkloadNotFound:
        return False
    return True
