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
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import attrs

from asyncdeploy._errors import AsyncDeployError, ReplaceInProgress
from asyncdeploy._owner import Owner
from asyncdeploy.drivers.base import Driver

__all__ = ["LockRecord", "lock_key", "replace_lock"]

TAKEOVER_TRIES = 3


def lock_key(plan_name: str) -> str:
    """The marker's name: a dot cannot occur in a workload name, so none can collide with it."""
    return f"asyncdeploy-replace-lock.{plan_name}"


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
    may take at most (its record is stale after it). Released (shielded) on the way out."""
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
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            try:
                await driver.drop_marker(key, record)
            except AsyncDeployError:
                pass  # stale once this process is gone: the next replace takes it over
